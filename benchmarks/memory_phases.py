"""Where `twice analyze` holds its memory: resident memory after each phase of one analysis, and
each phase's own peak, in one process (Linux: /proc/self/status, the peak reset before each
phase through /proc/self/clear_refs).

    python benchmarks/memory_phases.py FOLDER [--trim-after-load]

Phases: the imports; loading the folder into the timeline (`registry.load_all`); the engine's
steps as `engine.analyze` runs them (`provider_attempts`, `link`, `group_attempts`), then
those dropped; then `engine.analyze` whole on the same timeline, and the JSON report. After
the load it prints the timeline's own size (its columns' buffers). With `--trim-after-load`
the process gives back what it holds but no longer uses (glibc's `malloc_trim`, Arrow's pool
`release_unused`) before the engine's phases, and says how much that was: whether memory held
but free raises the peak.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _status() -> dict[str, float]:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def _trim() -> None:
    import pyarrow as pa

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    pa.default_memory_pool().release_unused()


class Phases:
    def __init__(self) -> None:
        _reset_peak()
        self.start = time.perf_counter()

    def mark(self, name: str) -> None:
        s = _status()
        print(f"{name:24s} {time.perf_counter() - self.start:6.2f} s   resident "
              f"{s['VmRSS']:7.0f} MiB   phase peak {s['VmHWM']:7.0f} MiB", flush=True)
        _reset_peak()
        self.start = time.perf_counter()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--trim-after-load", action="store_true")
    args = ap.parse_args()
    phases = Phases()
    import pyarrow as pa

    from twice.attempts import provider_attempts
    from twice.connectors import registry
    from twice.engine import Options, analyze
    from twice.grouping import group_attempts
    from twice.link import link, link_agent_side
    from twice.report import to_contract
    phases.mark("imports")
    found, _ = registry.scan_folder(args.folder)
    loaded = registry.load_all([(n, p, {}) for n, p in found])
    timeline = loaded.rows
    phases.mark("load")
    own = timeline.memory_usage(deep=False).sum() / 2**20
    print(f"  the timeline: {len(timeline):,} rows, {len(timeline.columns)} columns, "
          f"{own:,.0f} MiB of buffers ({pa.total_allocated_bytes() / 2**20:,.0f} MiB in "
          "Arrow's pool)")
    if args.trim_after_load:
        before = _status()["VmRSS"]
        _trim()
        print(f"  held but free, given back: {before - _status()['VmRSS']:,.0f} MiB")
        _reset_peak()
        phases.start = time.perf_counter()
    opts = Options()
    attempts = provider_attempts(timeline)
    phases.mark("provider_attempts")
    if attempts.empty:
        attempts, aligned, _ = link_agent_side(timeline)
        phases.mark("link_agent_side")
    else:
        attempts, aligned, _ = link(timeline, attempts, opts.tolerance_s)
        phases.mark("link")
    labels = group_attempts(attempts, aligned, opts.window_s)
    phases.mark("group_attempts")
    del attempts, aligned, labels
    phases.mark("(those dropped)")
    analysis = analyze(timeline, loaded.warnings, opts)
    phases.mark("analyze, whole")
    to_contract(analysis)
    phases.mark("the report")


if __name__ == "__main__":
    main()
