"""The scale suite: `twice analyze` on each source alone and on all three, against a bare read.

    python benchmarks/suite.py [--sizes 100k,1m] [--sources events,spans,checkpoints,all]
                               [--repeat 2] [--data DIR] [--out benchmarks/results/suite.json]

For each size N the data is generated in the real formats by `benchmarks/analyze_bench.generate`
(N Stripe events as JSON lines, two per PaymentIntent confirmed in one request; N OTLP spans as
the file exporter writes them, a tool span and an HTTP client span per call; N/10 checkpoints
written by LangGraph's own SqliteSaver; one call in a hundred executed twice by a step retry)
and kept in `--data DIR` (reused when there). Each source set gets a folder of its own holding
links to its files, so `twice analyze FOLDER` sees only them.

Every measurement is a whole command in a fresh process, as a user runs it:
  twice   `python -m twice.cli analyze FOLDER --format json` (stdout discarded)
  floor   a bare read of the same file in the same round, nothing else:
            events       DuckDB `read_json` of the fields twice reads, columns declared with
                         their types, into an Arrow table
            spans        pyarrow's JSON reader over the OTLP lines, into an Arrow table
            checkpoints  sqlite3 reading every row of both tables, and msgpack (ormsgpack,
                         what LangGraph uses) decoding every blob
            all          the three floors above, one after the other in one process
The two alternate (floor, twice, floor, twice, ...) `--repeat` times; the best of each is kept
and the ratio is taken between bests of the same round set. Wall time, CPU time (the process
and its children: DuckDB's threads, twice's worker processes) and peak memory (resident memory
of the process tree summed, sampled every 10 ms) are recorded, and the input's size on disk.

The table printed at the end is the one docs/scale.md quotes; the JSON goes to `--out`.
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
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SUFFIX = {"k": 1_000, "m": 1_000_000}
FILES = {"events": ["events.jsonl"], "spans": ["spans.jsonl"],
         "checkpoints": ["checkpoints.sqlite"],
         "all": ["events.jsonl", "spans.jsonl", "checkpoints.sqlite"]}
TARGET = {"ratio": 3.0, "peak_vs_input": 1.5}


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


# --- the floors: each runs in a fresh interpreter ------------------------------------------------

def floor_events(path: str) -> int:
    import duckdb

    rel = duckdb.sql(
        "SELECT id, type, created, request.id AS request_id, "
        "request.idempotency_key AS request_key, data.object.id AS object_id, "
        "data.object.object AS object_type, data.object.customer AS customer, "
        "data.object.amount AS amount, data.object.currency AS currency, "
        "data.object.status AS status, data.object.payment_intent AS payment_intent, "
        "livemode FROM read_json(?, format = 'newline_delimited', columns = {"
        "id: 'VARCHAR', type: 'VARCHAR', created: 'BIGINT', livemode: 'BOOLEAN', "
        "request: 'STRUCT(id VARCHAR, idempotency_key VARCHAR)', "
        "data: 'STRUCT(object STRUCT(id VARCHAR, object VARCHAR, customer VARCHAR, "
        "amount BIGINT, currency VARCHAR, status VARCHAR, payment_intent VARCHAR))'})",
        params=[path])
    table = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
    return int(table.num_rows)


def floor_spans(path: str) -> int:
    import pyarrow.json as pj

    table = pj.read_json(path, read_options=pj.ReadOptions(block_size=64 << 20))
    return int(table.num_rows)


def floor_checkpoints(path: str) -> int:
    import sqlite3

    import orjson
    import ormsgpack

    def ext(code: int, data: bytes) -> object:
        return ormsgpack.unpackb(data, ext_hook=ext)  # LangGraph's objects: their fields

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    n = 0
    for kind, blob, meta in con.execute("SELECT type, checkpoint, metadata FROM checkpoints"):
        ormsgpack.unpackb(blob, ext_hook=ext) if kind == "msgpack" else None
        orjson.loads(meta)
        n += 1
    for kind, blob in con.execute("SELECT type, value FROM writes"):
        ormsgpack.unpackb(blob, ext_hook=ext) if kind == "msgpack" else None
        n += 1
    con.close()
    return n


FLOORS = {"events.jsonl": floor_events, "spans.jsonl": floor_spans,
          "checkpoints.sqlite": floor_checkpoints}


def child_floor(paths: list[str]) -> None:
    rows = sum(FLOORS[Path(p).name](p) for p in paths)
    print(json.dumps({"rows": rows}))


# --- measuring a command: wall, CPU of the tree, peak resident memory of the tree ---------------

def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return pids


def _rss_mib(pids: list[int]) -> float:
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            pass
    return total / 2**20


def run(cmd: list[str]) -> dict[str, float]:
    """Run `cmd`; its wall time, the CPU time of it and its children, and the peak of the
    resident memory of its process tree (sampled every 10 ms)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0.0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.01):
            peak = max(peak, _rss_mib(_tree(proc.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.decode()[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # a process too short for a sample: its own high-water mark
    peak = max(peak, after.ru_maxrss / 1024 if after.ru_maxrss > before.ru_maxrss else 0.0)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_mib": round(peak, 1)}


# --- the parent ---------------------------------------------------------------------------------

def dataset(base: Path, n: int, seed: int, sources: list[str]) -> tuple[Path, dict[str, Any]]:
    """The generated incident for size n under `base` (reused when complete): every source's
    file, or, when `sources` do not need them all and no full set is there, only theirs in a
    folder of its own (a point too large for this machine's memory or time with every source,
    such as 10m events alone)."""
    from analyze_bench import generate

    needed = {name for s in sources for name in FILES[s]}
    kinds = [kind for kind in ("events", "spans", "checkpoints") if FILES[kind][0] in needed]
    name = size_name(n)
    if len(kinds) < 3 and not (base / f"{name}.json").is_file():  # no full set to reuse
        name = f"{name}-only-{'-'.join(kinds)}"
    folder = base / name
    manifest = base / f"{name}.json"
    if folder.is_dir() and manifest.is_file():
        return folder, json.loads(manifest.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t = time.perf_counter()
    sizes = generate(folder, n if "events" in kinds else 0, n if "spans" in kinds else 0,
                     n // 10 if "checkpoints" in kinds else 0, seed)
    sizes["generate_s"] = round(time.perf_counter() - t, 1)
    manifest.write_text(json.dumps(sizes))
    return folder, sizes


def source_folder(data: Path, sources: str) -> Path:
    """A folder holding links to the files of `sources` only."""
    folder = data.parent / f"{data.name}-{sources}"
    folder.mkdir(exist_ok=True)
    for name in FILES[sources]:
        link = folder / name
        if not link.exists():
            link.symlink_to(data / name)
    return folder


def measure(data: Path, sources: str, repeat: int) -> dict[str, Any]:
    folder = source_folder(data, sources)
    files = [str(data / f) for f in FILES[sources]]
    floor_cmd = [sys.executable, __file__, "--child-floor", *files]
    twice_cmd = [sys.executable, "-m", "twice.cli", "analyze", str(folder), "--format", "json"]
    floors, twices = [], []
    for _ in range(repeat):
        floors.append(run(floor_cmd))
        twices.append(run(twice_cmd))
    best = {"floor": min(floors, key=lambda r: r["wall_s"]),
            "twice": min(twices, key=lambda r: r["wall_s"])}
    input_mib = sum(os.path.getsize(f) for f in files) / 2**20
    t, f = best["twice"], best["floor"]
    return {
        "input_mib": round(input_mib, 1), "floor": f, "twice": t,
        "ratio_wall": round(t["wall_s"] / f["wall_s"], 2),
        "ratio_cpu": round(t["cpu_s"] / max(f["cpu_s"], 1e-3), 2),
        "peak_vs_input": round(t["peak_mib"] / input_mib, 2),
        "runs": {"floor": floors, "twice": twices},
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    head = ("| size | sources | input | twice wall / CPU | floor wall / CPU | ratio wall / CPU "
            "| twice peak | peak / input |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for size, by_source in results.items():
        for sources, r in by_source.items():
            t, f = r["twice"], r["floor"]
            lines.append(
                f"| {size} | {sources} | {r['input_mib']:,.0f} MiB "
                f"| {t['wall_s']:.2f} s / {t['cpu_s']:.2f} s "
                f"| {f['wall_s']:.2f} s / {f['cpu_s']:.2f} s "
                f"| **{r['ratio_wall']:.1f}x** / {r['ratio_cpu']:.1f}x "
                f"| {t['peak_mib']:,.0f} MiB | {r['peak_vs_input']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100k,1m")
    ap.add_argument("--sources", default="events,spans,checkpoints,all")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--data", type=Path, default=Path("/tmp/twice-suite-data"),
                    help="generated data is kept here and reused")
    ap.add_argument("--out", type=Path, default=RESULTS / "suite.json")
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    sources = [s.strip() for s in args.sources.split(",")]
    unknown = set(sources) - set(FILES)
    if unknown:
        raise SystemExit(f"unknown sources {sorted(unknown)}; choose from {sorted(FILES)}")
    results: dict[str, dict[str, Any]] = {}
    inputs: dict[str, Any] = {}
    for n in (parse_size(s) for s in args.sizes.split(",")):
        data, sizes = dataset(args.data, n, args.seed, sources)
        inputs[size_name(n)] = sizes
        results[size_name(n)] = {}
        for s in sources:
            r = measure(data, s, args.repeat)
            results[size_name(n)][s] = r
            print(f"[{size_name(n)} {s}] twice {r['twice']} floor {r['floor']} "
                  f"ratio {r['ratio_wall']}x", file=sys.stderr, flush=True)
    doc = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "target": TARGET, "inputs": inputs, "results": results, "table": table(results),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(doc["table"])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child-floor":
        child_floor(sys.argv[2:])
    else:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        main()
