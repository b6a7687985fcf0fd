"""The scale benchmark: `twice analyze` at 10k, 100k, 1M (10M) provider events, against the floor.

    python benchmarks/suite.py [--sizes 10k,100k,1m] [--data DIR] [--duckdb]
                               [--out benchmarks/results/suite.json]

For each size N: N Stripe events, N spans and N/10 checkpoints, generated in the real formats by
benchmarks/analyze_bench.generate (two events per PaymentIntent confirmed in one request, a tool
span and an HTTP client span per call, LangGraph's own SqliteSaver; one call in a hundred is
executed twice by a step retry). Then, each in a fresh interpreter so its peak memory is its own:
  floor     read + orjson.loads every line of the same JSON files (nothing else)
  analysis  what `twice analyze --format json` does: load every source (registry.load_all:
            big files read side by side in worker processes), analyze, the JSON contract
            serialised; peak memory of this process and its workers at once (sampled)
  analysis_one_process
            the same with every source read in one process, each connector timed on its own
  duckdb    (--duckdb) the Stripe events read into timeline rows by the orjson + Python path
            and by the DuckDB path (twice/connectors/provider/stripe_events_duckdb.py), at
            every size
Results, with a growth table (how time and memory grow with size), go to the --out JSON file.
Generated data goes to a temp folder (or --data DIR, kept and reused between runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TARGET_1M = {"wall_s": 60.0, "peak_rss_mib": 4096.0}
SUFFIX = {"k": 1_000, "m": 1_000_000}


def parse_size(text: str) -> int:
    text = text.strip().lower()
    if text[-1:] in SUFFIX:
        return int(float(text[:-1]) * SUFFIX[text[-1]])
    return int(text)


def size_name(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


# --- the children: each runs in a fresh interpreter and prints one JSON line, last -----------

def _peak_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _cpu_s() -> float:
    """CPU seconds this process used (all its threads): on a shared machine, the steadier
    measure of work done than wall time."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 2)


def child_floor(paths: list[str]) -> dict[str, Any]:
    import orjson

    n = 0
    for path in paths:
        with open(path, "rb") as fh:
            for line in fh:
                orjson.loads(line)
                n += 1
    return {"lines": n, "cpu_s": _cpu_s(), "peak_rss_mib": _peak_mib()}


def _tree_rss_mib() -> float:
    """Resident memory of this process and its children right now (Linux /proc), MiB."""
    total = 0
    pids = [os.getpid()]
    try:
        for task in os.listdir(f"/proc/{os.getpid()}/task"):
            with open(f"/proc/{os.getpid()}/task/{task}/children") as fh:
                pids.extend(int(p) for p in fh.read().split())
    except OSError:
        pass
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
    return total / 2**20


class TreePeak:
    """The highest `_tree_rss_mib` seen, sampled every 20 ms while in the `with` block: the peak
    of memory in use at once when worker processes read sources beside this one."""

    def __enter__(self) -> TreePeak:
        import threading

        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _tree_rss_mib())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def child_analysis(folder: str, workers: str) -> dict[str, Any]:
    """`twice analyze --format json FOLDER`, phase by phase. With `workers` = 1, every source is
    loaded here, one after the other, and timed on its own (registry.load_all does the same with
    one worker); otherwise by `registry.load_all` itself, sources read side by side in worker
    processes, timed as one phase."""
    phases: dict[str, float] = {}
    t = time.perf_counter()
    import orjson

    from twice.connectors import registry
    from twice.engine import analyze
    from twice.report import to_contract
    from twice.timeline import concat

    found, _ = registry.scan_folder(Path(folder))
    for name, _path in found:
        registry.get(name)  # the connector's own imports (pyarrow, langgraph, ...)
    phases["imports_and_scan"] = time.perf_counter() - t
    with TreePeak() as tree:
        if workers == "1":
            frames, warnings = [], []
            for name, path in found:
                t = time.perf_counter()
                result = registry.load_one(name, path, {})
                phases[f"load_{name}"] = phases.get(f"load_{name}", 0.0) \
                    + time.perf_counter() - t
                frames.append(result.rows)
                warnings.extend(result.warnings)
            t = time.perf_counter()
            rows = concat(frames)
            del frames
            phases["concat"] = time.perf_counter() - t
        else:
            t = time.perf_counter()
            loaded = registry.load_all([(n, p, {}) for n, p in found])
            rows, warnings = loaded.rows, loaded.warnings
            del loaded
            phases["load_all_with_concat"] = time.perf_counter() - t
        t = time.perf_counter()
        analysis = analyze(rows, warnings)
        phases["analyze"] = time.perf_counter() - t
        t = time.perf_counter()
        doc = orjson.dumps(to_contract(analysis), option=orjson.OPT_INDENT_2)
        phases["report"] = time.perf_counter() - t
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "workers": registry.workers_available() if workers != "1" else 1,
        "phases_s": {k: round(v, 3) for k, v in phases.items()},
        "timeline_rows": len(rows), "attempts": len(analysis.attempts),
        "duplicate_groups": len(analysis.groups), "warnings": len(warnings),
        "report_bytes": len(doc), "cpu_s": _cpu_s(),
        "workers_cpu_s": round(children.ru_utime + children.ru_stime, 2),
        "peak_rss_mib": round(max(_peak_mib(), tree.peak), 1),
        "peak_rss_this_process_mib": _peak_mib(),
        "peak_rss_largest_worker_mib": round(children.ru_maxrss / 1024, 1),
    }


def child_events(path: str, how: str) -> dict[str, Any]:
    """Stripe events JSON lines -> timeline rows: the orjson + Python path, or the DuckDB path
    (twice/connectors/provider/stripe_events_duckdb.py, which `stripe_events.load` takes for
    big clean files)."""
    t = time.perf_counter()
    from twice.connectors.jsonfile import json_documents
    from twice.connectors.provider import stripe_events, stripe_events_duckdb

    if how == "duckdb":
        import duckdb  # noqa: F401  (its import is part of the path's cost)
    imports = time.perf_counter() - t
    t = time.perf_counter()
    if how == "duckdb":
        result = stripe_events_duckdb.load(Path(path), path, min_bytes=0)
        if result is None:
            raise SystemExit("the DuckDB path declined the generated file")
    else:
        result = stripe_events.parse_documents(json_documents(path, []), path)
    return {"imports_s": round(imports, 3), "load_s": round(time.perf_counter() - t, 3),
            "rows": len(result.rows), "cpu_s": _cpu_s(), "peak_rss_mib": _peak_mib()}


CHILDREN = {"floor": child_floor, "analysis": lambda a: child_analysis(a[0], a[1]),
            "events": lambda a: child_events(a[0], a[1])}


def run_child(kind: str, args: list[str]) -> dict[str, Any]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", kind, *args], cwd=ROOT,
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {"wall_s": round(wall, 3), **result}


# --- the parent ---------------------------------------------------------------------------------

def dataset(base: Path, n: int, seed: int) -> tuple[Path, dict[str, Any]]:
    """The incident folder for size n under `base`, generated unless a complete one is there."""
    from analyze_bench import generate

    folder = base / size_name(n)
    manifest = base / f"{size_name(n)}.json"
    if folder.is_dir() and manifest.is_file():
        return folder, json.loads(manifest.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t = time.perf_counter()
    sizes = generate(folder, n, n, n // 10, seed)
    sizes["generate_s"] = round(time.perf_counter() - t, 1)
    manifest.write_text(json.dumps(sizes))
    return folder, sizes


def measure_size(base: Path, n: int, seed: int, with_duckdb: bool) -> dict[str, Any]:
    folder, sizes = dataset(base, n, seed)
    print(f"[{size_name(n)}] data ready: {sizes}", file=sys.stderr, flush=True)
    floor = run_child("floor", [str(folder / "events.jsonl"), str(folder / "spans.jsonl")])
    print(f"[{size_name(n)}] floor {floor['wall_s']} s", file=sys.stderr, flush=True)
    entry: dict[str, Any] = {"input": sizes, "floor_orjson_parse": floor}
    for key, workers in (("analysis_one_process", "1"), ("analysis", "default")):
        run = run_child("analysis", [str(folder), workers])
        print(f"[{size_name(n)}] {key} {run['wall_s']} s, {run['peak_rss_mib']} MiB "
              f"{run['phases_s']}", file=sys.stderr, flush=True)
        entry[key] = {**run, "events_per_s": round(sizes["events"] / run["wall_s"]),
                      "vs_floor": round(run["wall_s"] / max(floor["wall_s"], 1e-9), 2)}
    if with_duckdb:
        events = str(folder / "events.jsonl")
        ours = run_child("events", [events, "orjson"])
        duck = run_child("events", [events, "duckdb"])
        entry["stripe_events_read"] = {
            "orjson_python_path": ours, "duckdb_path": duck,
            "duckdb_vs_ours": round(duck["wall_s"] / max(ours["wall_s"], 1e-9), 2)}
        print(f"[{size_name(n)}] events: ours {ours['wall_s']} s, duckdb {duck['wall_s']} s",
              file=sys.stderr, flush=True)
    return entry


def growth(results: dict[str, Any]) -> list[dict[str, Any]]:
    """From each size to the next: how many times the input grew, and the time and memory."""
    names = list(results)
    rows = []
    for a, b in zip(names, names[1:], strict=False):
        ra, rb = results[a], results[b]
        size = rb["input"]["events"] / ra["input"]["events"]
        rows.append({
            "from": a, "to": b, "size_x": round(size, 2),
            "wall_x": round(rb["analysis"]["wall_s"] / ra["analysis"]["wall_s"], 2),
            "wall_one_process_x": round(rb["analysis_one_process"]["wall_s"]
                                        / ra["analysis_one_process"]["wall_s"], 2),
            "analyze_phase_x": round(rb["analysis"]["phases_s"]["analyze"]
                                     / max(ra["analysis"]["phases_s"]["analyze"], 1e-9), 2),
            "peak_rss_x": round(rb["analysis"]["peak_rss_mib"]
                                / ra["analysis"]["peak_rss_mib"], 2),
            "floor_x": round(rb["floor_orjson_parse"]["wall_s"]
                             / ra["floor_orjson_parse"]["wall_s"], 2),
        })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10k,100k,1m")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--data", type=Path, help="keep generated data here (reused if present)")
    ap.add_argument("--duckdb", action="store_true", help="also time the DuckDB events reader")
    ap.add_argument("--out", type=Path, default=RESULTS / "suite.json")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    tmp = None
    if args.data is None:
        tmp = tempfile.TemporaryDirectory(prefix="twice-suite-")
        base = Path(tmp.name)
    else:
        base = args.data
        base.mkdir(parents=True, exist_ok=True)
    try:
        results = {size_name(n): measure_size(base, n, args.seed, args.duckdb) for n in sizes}
    finally:
        if tmp is not None:
            tmp.cleanup()
    doc: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "sizes": results,
        "growth": growth(results),
    }
    if "1m" in results:
        a = results["1m"]["analysis"]
        doc["target_1m"] = {**TARGET_1M, "met": a["wall_s"] < TARGET_1M["wall_s"]
                            and a["peak_rss_mib"] < TARGET_1M["peak_rss_mib"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(CHILDREN[sys.argv[2]](sys.argv[3:])))
    else:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        main()
