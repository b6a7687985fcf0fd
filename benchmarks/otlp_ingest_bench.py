"""Benchmark the spans connector's OTLP JSON lines ingest against parsing the same bytes alone.

    python benchmarks/otlp_ingest_bench.py [--sizes 100k,1m] [--repeats 3]
                                           [--out benchmarks/results/otlp_ingest.json]

For each size, generates (in a temp folder) N spans as the OTel file exporter writes them: one
OTLP export object per line, 512 spans a line, a tool span (`execute_tool`, GenAI attributes) and
an HTTP client span under it per call, one call in a hundred executed twice. Then, in this one
process and alternating so both see the same machine load, `--repeats` times each:
  floor  read the file a line at a time + orjson.loads every line
  load   twice.connectors.spans.load(file) -> the timeline DataFrame
and records every time, the medians and the ratio of the medians (issue 6's target: <= 3), in
wall time and in this process's CPU time (steadier when other work shares the machine).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from analyze_bench import _export, call_spans  # noqa: E402

from twice.connectors import spans  # noqa: E402

T0 = 1_717_424_400  # 2024-06-03T14:20:00Z
TARGET_RATIO = 3.0


def generate(path: Path, n_spans: int, batch_size: int = 512) -> dict[str, int]:
    """N spans of OTLP JSON lines (the shape `benchmarks/analyze_bench.py` writes)."""
    n = lines = 0
    batch: list[dict] = []
    with path.open("wb") as out:
        i = 1  # ids and trace ids of 0 would be all zeros: invalid
        while n < n_spans:
            cid = f"{i:08x}"
            thread = f"th_{i // 4:07d}"
            tcid = f"toolu_01{cid}{cid}{cid[:6]}"
            customer = f"cus_{(i * 7919) % 10**8:08d}"
            amount = (900, 1900, 4900, 9900)[i % 4]
            t = T0 + i * 0.05
            runs = [(t, f"key_{cid}_0")] + ([(t + 37.0, f"key_{cid}_1")] if i % 100 == 0 else [])
            for r, (tr, key) in enumerate(runs):
                if n + 2 > n_spans:
                    break
                batch += call_spans(i, r, tr, key, f"req_{cid}{r}", tcid, thread,
                                    customer, amount)
                n += 2
                if len(batch) >= batch_size:
                    out.write(orjson.dumps(_export(batch)) + b"\n")
                    lines += 1
                    batch = []
            i += 1
        if batch:
            out.write(orjson.dumps(_export(batch)) + b"\n")
            lines += 1
    return {"spans": n, "lines": lines, "bytes": path.stat().st_size}


def floor(path: Path) -> int:
    """What no reader can beat: read every line and parse it with orjson, nothing more."""
    n = 0
    with path.open("rb") as fh:
        for line in fh:
            orjson.loads(line)
            n += 1
    return n


def _timed(fn: object, path: Path) -> tuple[float, float, object]:
    """(wall s, CPU s of this process, result): on a shared machine the CPU time is the
    steadier of the two, so both are kept."""
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    value = fn(path)  # type: ignore[operator]
    return time.perf_counter() - start, time.process_time() - cpu, value


def _summary(floors: list[float], loads: list[float]) -> dict[str, object]:
    floor_s, load_s = statistics.median(floors), statistics.median(loads)
    return {"floor_s": [round(x, 3) for x in floors], "load_s": [round(x, 3) for x in loads],
            "median_floor_s": round(floor_s, 3), "median_load_s": round(load_s, 3),
            "ratio": round(load_s / floor_s, 2)}


def run_size(n_spans: int, repeats: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spans.jsonl"
        t = time.perf_counter()
        sizes = generate(path, n_spans)
        gen_s = time.perf_counter() - t
        walls: dict[str, list[float]] = {"floor": [], "load": []}
        cpus: dict[str, list[float]] = {"floor": [], "load": []}
        rows = warnings = 0
        for _ in range(repeats):
            for label, fn in (("floor", floor), ("load", spans.load)):
                wall, cpu, result = _timed(fn, path)
                walls[label].append(wall)
                cpus[label].append(cpu)
                if label == "load":
                    rows = len(result.rows)  # type: ignore[attr-defined]
                    warnings = len(result.warnings)  # type: ignore[attr-defined]
                del result
    wall_summary = _summary(walls["floor"], walls["load"])
    cpu_summary = _summary(cpus["floor"], cpus["load"])
    return {
        "input": {**sizes, "generate_s": round(gen_s, 1)},
        "wall": wall_summary,
        "cpu": cpu_summary,
        "spans_per_s": round(sizes["spans"] / wall_summary["median_load_s"]),  # type: ignore[operator]
        "timeline_rows": rows,
        "warnings": warnings,
        "meets_target": {"wall": wall_summary["ratio"] <= TARGET_RATIO,  # type: ignore[operator]
                         "cpu": cpu_summary["ratio"] <= TARGET_RATIO},  # type: ignore[operator]
    }


def _size(text: str) -> int:
    text = text.strip().lower()
    for suffix, factor in (("k", 1_000), ("m", 1_000_000)):
        if text.endswith(suffix):
            return int(float(text[:-1]) * factor)
    return int(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100k,1m")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/otlp_ingest.json"))
    args = ap.parse_args()
    results = {}
    for label in args.sizes.split(","):
        results[label.strip()] = run_size(_size(label), args.repeats)
        print(label, json.dumps(results[label.strip()]), flush=True)
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg": [round(x, 2) for x in os.getloadavg()]},
        "what": "twice.connectors.spans.load vs read + orjson.loads per line, same file, "
                "alternating",
        "target_ratio": TARGET_RATIO,
        "sizes": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
