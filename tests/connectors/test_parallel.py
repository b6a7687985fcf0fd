"""Sources read side by side in worker processes (twice/connectors/parallel.py via
registry.load_all): the same rows and warnings as one process, errors raised with their source,
no worker left."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from twice.connectors import parallel, registry
from twice.connectors.base import SourceError

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data"


def _sources(folder: Path) -> list[tuple[str, Path, dict[str, object]]]:
    found, _ = registry.scan_folder(folder)
    return [(n, p, {}) for n, p in found]


def _children() -> list[int]:
    pids: list[int] = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as fh:
            pids.extend(int(p) for p in fh.read().split())
    return pids


@pytest.mark.parametrize("sample", ["redelivery", "gateway_retry", "human_pause"])
def test_workers_give_the_same_rows_and_warnings_as_one_process(sample: str) -> None:
    sources = _sources(SAMPLES / sample)
    assert len(sources) >= 3
    one = registry.load_all(sources, workers=1)
    assert registry.elsewhere([registry.file_size(t) for _, t, _ in sources], 3, 0)
    side_by_side = registry.load_all(sources, workers=3, parallel_min_bytes=0)
    pd.testing.assert_frame_equal(one.rows, side_by_side.rows, check_exact=True)
    assert one.warnings == side_by_side.warnings
    assert _children() == []


def test_warnings_from_a_worker_keep_their_place(tmp_path: Path) -> None:
    for f in (SAMPLES / "redelivery").iterdir():
        if f.is_file():
            (tmp_path / f.name).write_bytes(f.read_bytes())
    spans = next(p for n, p, _ in _sources(tmp_path) if n == "spans")
    with spans.open("ab") as fh:
        fh.write(b"{not json\n")
    sources = _sources(tmp_path)
    one = registry.load_all(sources, workers=1)
    two = registry.load_all(sources, workers=2, parallel_min_bytes=0)
    assert any("not valid JSON" in w.detail for w in one.warnings)
    assert one.warnings == two.warnings
    pd.testing.assert_frame_equal(one.rows, two.rows, check_exact=True)


def test_a_source_that_cannot_be_read_in_a_worker_is_its_source_error(tmp_path: Path) -> None:
    bad = tmp_path / "events.jsonl"
    bad.write_bytes(b'{"object": "event", "id": "evt_1"\n' * 50_000)  # every line cut short
    sources = [*_sources(SAMPLES / "redelivery"), ("stripe_events", bad, {})]
    away = registry.elsewhere([registry.file_size(t) for _, t, _ in sources], 2, 0)
    assert any(len(sources) - 1 in batch for batch in away), away  # the biggest: a worker's
    with pytest.raises(SourceError) as err:
        registry.load_all(sources, workers=len(sources), parallel_min_bytes=0)
    assert err.value.source == str(bad)
    assert _children() == []  # the other workers were stopped, not left running


def test_a_worker_that_dies_is_a_source_error_naming_what_it_read() -> None:
    with pytest.raises(SourceError) as err, parallel.Workers() as pool:
        pool.start([parallel.Task(0, "spans.jsonl", os._exit, 3)])
        list(pool.results())
    assert err.value.source == "spans.jsonl"
    assert "worker process reading it stopped (exit code 3" in err.value.reason
    assert _children() == []


def test_an_unexpected_error_in_a_worker_arrives_with_its_traceback() -> None:
    with pytest.raises(ValueError, match="invalid literal") as err, parallel.Workers() as pool:
        pool.start([parallel.Task(0, "x", int, "not a number")])
        list(pool.results())
    assert any("in a worker process" in note for note in err.value.__notes__)


def test_results_arrive_in_task_order_from_several_workers() -> None:
    with parallel.Workers() as pool:
        pool.start([parallel.Task(0, "a", str.upper, "a"), parallel.Task(2, "c", abs, -3)])
        pool.start([parallel.Task(1, "b", len, "bb")])
        got = dict(pool.results())
    assert got == {0: "A", 2: 3, 1: 2}


def test_plan_spreads_big_files_and_keeps_databases_here() -> None:
    mib = 2**20
    # spans 708 MiB, events 396 MiB, checkpoints 109 MiB on two cores: the spans go to a worker
    assert registry.elsewhere([708 * mib, 396 * mib, 109 * mib], 2, 64 * mib) == [[0]]
    assert registry.elsewhere([708 * mib, 396 * mib, 109 * mib], 1, 64 * mib) == []
    assert registry.elsewhere([10 * mib, 20 * mib], 2, 64 * mib) == []  # too small to pay off
    assert registry.elsewhere([0, 500 * mib], 2, 64 * mib) == []  # a DSN (0) and one file
    # four cores, three files: each file its own process, this one keeps the smallest
    assert sorted(registry.elsewhere([300 * mib, 200 * mib, 100 * mib, 0], 4, 0)) == [[0], [1]]


def test_a_script_without_a_main_guard_can_load_side_by_side(tmp_path: Path) -> None:
    """Workers are not multiprocessing's spawn, which re-runs the caller's script."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from twice.connectors import registry
        found, _ = registry.scan_folder(Path({str(SAMPLES / 'redelivery')!r}))
        loaded = registry.load_all([(n, p, {{}}) for n, p in found], workers=3,
                                   parallel_min_bytes=0)
        print("rows", len(loaded.rows))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("rows ") == 1  # printed once: the script did not run again
