"""Benchmark `twice sweep` over a long window against one analysis of the same window.

    python benchmarks/sweep_bench.py [--days 365] [--chunk-s 86400]
                                     [--out benchmarks/results/sweep.json] [--skip-analyze]

Generates (in a temp folder) `--days` days of evidence the way the sweep tests do
(twice/lab/month.py `month()`: one shifted copy of a bundled lab incident a day, the
straddling redelivery, the month-long renewal control) and writes it as a Parquet timeline file,
which the `timeline` connector reads. Then, in this one process:
  analyze  load the file through the registry + one `twice.engine.analyze()` of everything
  sweep    `twice.sweep.run.run_sweep` with `--chunk-s` chunks on a fresh SQLite store
and records wall and CPU seconds of each (CPU is the steadier figure when other work shares the
machine), the process's peak RSS after each step, chunks analysed / skipped (no provider attempt
in the chunk's own window) / total, and the groups each found (they must be equal).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from twice.connectors import registry  # noqa: E402
from twice.engine import analyze  # noqa: E402
from twice.lab.month import month  # noqa: E402
from twice.store import open_store  # noqa: E402
from twice.store.sweeps import sweep_groups  # noqa: E402
from twice.sweep.run import Source, run_sweep  # noqa: E402

TARGET_RATIO = 5.0


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _timed(fn: Any) -> tuple[Any, float, float]:
    gc.collect()
    w0, c0 = time.perf_counter(), _cpu()
    out = fn()
    return out, round(time.perf_counter() - w0, 3), round(_cpu() - c0, 3)


def run(days: int, chunk_s: float, skip_analyze: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg": [round(x, 2) for x in os.getloadavg()]},
        "what": "run_sweep (fresh SQLite store) vs load + one analyze() of the same file",
        "target_ratio_cpu": TARGET_RATIO,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "year.parquet"
        frame, gen_wall, _ = _timed(lambda: month(days))
        frame.to_parquet(path, index=False)
        doc["input"] = {"days": days, "rows": len(frame), "bytes": path.stat().st_size,
                        "generate_s": gen_wall}
        del frame
        sources: list[Source] = [("timeline", path, {})]
        if not skip_analyze:
            analysis, wall, cpu = _timed(
                lambda: analyze(registry.load_all(sources).rows))
            doc["analyze"] = {"wall_s": wall, "cpu_s": cpu, "groups": len(analysis.groups),
                              "peak_rss_mb": _peak_rss_mb()}
            whole = sorted((g.group_id, g.worst_layer and g.worst_layer.value)
                           for g in analysis.groups)
            del analysis
        store = open_store(str(Path(tmp) / "store.sqlite3"))
        stats: dict[str, int] = {}
        # `stats` (chunks analysed / skipped) is newer than the sweep: time older code too
        extra: dict[str, Any] = (
            {"stats": stats} if "stats" in inspect.signature(run_sweep).parameters else {})
        result, wall, cpu = _timed(lambda: run_sweep(store, sources, chunk_s=chunk_s, **extra))
        groups = sweep_groups(store, result.record.id)
        doc["sweep"] = {"wall_s": wall, "cpu_s": cpu, "chunk_s": chunk_s,
                        "chunks_total": result.record.chunks_total,
                        "chunks_analysed": stats.get("analysed"),
                        "chunks_skipped": stats.get("skipped"),
                        "groups": len(groups), "peak_rss_mb": _peak_rss_mb()}
        if not skip_analyze:
            doc["same_groups"] = whole == sorted((g.group_id, g.layer) for g in groups)
            doc["ratio_cpu"] = round(cpu / doc["analyze"]["cpu_s"], 2)
            doc["ratio_wall"] = round(wall / doc["analyze"]["wall_s"], 2)
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--chunk-s", type=float, default=86400.0)
    ap.add_argument("--skip-analyze", action="store_true")
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent / "results" / "sweep.json")
    args = ap.parse_args()
    doc = run(args.days, args.chunk_s, args.skip_analyze)
    text = json.dumps(doc, indent=2)
    print(text)
    if str(args.out) != "-":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
