"""`twice sweep` over a month made of the lab incidents: what it finds equals one analysis of the
whole month, a straddling duplicate is kept once, the results are stored (real SQLite and real
PostgreSQL), a killed sweep resumes to the same result, and every link opens its verdict."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

from app.cli import main
from app.store import open_store
from app.sweep import run_sweep
from app.sweep_store import SweepGroup, get_sweep, sweep_groups
from tests.app.test_sweep_data import START, sample_names, write_month
from twice.engine import analyze

ROOT = Path(__file__).resolve().parents[2]
BOUNDARY = START + pd.Timedelta(days=10)


def key(groups: list[SweepGroup]) -> list[tuple[Any, ...]]:
    return [(g.group_id, g.layer, g.money_at_risk, g.investigation_id, g.chunk, g.customer,
             g.attempts, g.first_at) for g in groups]


@pytest.fixture(scope="module")
def month_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_month(tmp_path_factory.mktemp("month") / "month.parquet")


@pytest.fixture(scope="module")
def swept(month_file: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[str, str, list[SweepGroup]]:
    """One uninterrupted sweep of the month into a SQLite store: (store url, sweep id, groups)."""
    url = str(tmp_path_factory.mktemp("store") / "investigations.sqlite3")
    seen: list[tuple[int, int, int]] = []
    result = run_sweep(open_store(url), [("timeline", month_file, {})],
                       progress=lambda d, t, f: seen.append((d, t, f)))
    assert result.record.finished and not result.resumed
    assert seen[-1] == (result.record.chunks_total, result.record.chunks_total,
                        result.record.group_count)
    return url, result.record.id, sweep_groups(open_store(url), result.record.id)


def test_a_sweep_finds_what_one_analysis_of_the_whole_month_finds(
        swept: tuple[str, str, list[SweepGroup]], month_file: Path) -> None:
    url, sweep_id, groups = swept
    whole = analyze(pd.read_parquet(month_file))
    assert sorted((g.group_id, g.worst_layer and g.worst_layer.value, g.money_at_risk())
                  for g in whole.groups) == \
        sorted((g.group_id, g.layer, g.money_at_risk) for g in groups)
    # one copy of each duplicate-making sample per day it was placed on, and the straddler
    assert len(groups) == len(whole.groups) > 20
    assert len({g.group_id for g in groups}) == len(groups)
    record = get_sweep(open_store(url), sweep_id)
    assert record is not None and record.chunks_done == record.chunks_total >= 30


def test_a_duplicate_straddling_midnight_is_kept_once_by_the_chunk_it_starts_in(
        swept: tuple[str, str, list[SweepGroup]]) -> None:
    _, _, groups = swept
    straddle = [g for g in groups if str(g.thread_id).endswith("-straddle")]
    assert len(straddle) == 1
    g = straddle[0]
    assert g.layer == "redelivery" and g.attempts == 2
    assert g.first_at < BOUNDARY.to_pydatetime() <= g.last_at
    # chunks start at the midnight before the earliest record (START), one a day
    assert g.chunk == (BOUNDARY - START).days - 1


def test_a_repeat_33_hours_later_is_followed_across_chunks(
        swept: tuple[str, str, list[SweepGroup]]) -> None:
    if "human_pause" not in sample_names():
        pytest.skip("the human_pause sample is not bundled")
    _, _, groups = swept
    paused = [g for g in groups if g.last_at - g.first_at > pd.Timedelta(hours=24)]
    assert paused, "the 33 h resume was lost between chunks"
    assert all(g.layer == "redelivery" for g in paused)


def test_every_group_is_saved_as_an_investigation_that_gives_its_verdict(
        swept: tuple[str, str, list[SweepGroup]]) -> None:
    url, sweep_id, groups = swept
    store = open_store(url)
    for g in groups:
        snap = store.get(g.investigation_id)
        assert snap is not None, g
        assert sweep_id in snap.summary.tags and g.layer in snap.summary.tags
        found = {x.group_id: x for x in analyze(snap.timeline).groups}
        assert g.group_id in found
        assert found[g.group_id].worst_layer == g.layer
        assert found[g.group_id].money_at_risk() == g.money_at_risk
        # a slice, not the month
        assert len(snap.timeline) < 200


def test_the_same_sweep_in_postgresql(month_file: Path, fresh_postgres_dsn: str,
                                      swept: tuple[str, str, list[SweepGroup]]) -> None:
    # twelve days hold every layer, the straddler and the 33 h resume: enough for the backend
    _, _, groups = swept
    since, until = START, START + pd.Timedelta(days=12)
    store = open_store(fresh_postgres_dsn)
    result = run_sweep(store, [("timeline", month_file, {})], since=since, until=until)
    stored = sweep_groups(store, result.record.id)
    inside = [g for g in groups if since.to_pydatetime() <= g.first_at < until.to_pydatetime()]

    def same(gs: list[SweepGroup]) -> list[tuple[Any, ...]]:
        return [(g.group_id, g.layer, g.money_at_risk, g.customer, g.attempts, g.first_at,
                 g.last_at, g.confidence, g.protected) for g in gs]

    assert same(stored) == same(inside)
    assert {g.layer for g in stored} >= {"sdk_retry", "gateway_retry", "step_retry",
                                         "redelivery", "model_reemission"}
    again = run_sweep(store, [("timeline", month_file, {})], since=since, until=until)
    assert again.resumed and again.chunks_skipped == again.record.chunks_total == 12
    assert key(sweep_groups(store, result.record.id)) == key(stored)  # nothing added twice
    assert len(store.list(search=result.record.id)) == len(stored)
    for g in stored[:3]:  # the saved slices open with their verdict from PostgreSQL too
        snap = store.get(g.investigation_id)
        assert snap is not None
        assert {x.group_id: x.worst_layer for x in analyze(snap.timeline).groups}[
            g.group_id] == g.layer


def _chunks_done(store_path: Path) -> int:
    if not store_path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{store_path}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM sweep_chunks").fetchone()[0])
    except sqlite3.OperationalError:  # tables not created yet
        return 0


def _sweep_cmd(month_file: Path, store_path: Path) -> list[str]:
    return [sys.executable, "-m", "app.cli", "sweep", str(month_file), "--store",
            str(store_path), "--format", "json", "--no-progress"]


@pytest.fixture
def killed_twice(month_file: Path, tmp_path: Path) -> Iterator[tuple[Path, list[int]]]:
    store_path = tmp_path / "killed.sqlite3"
    at_kill: list[int] = []
    for after in (3, 9):
        proc = subprocess.Popen(_sweep_cmd(month_file, store_path), cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 300
            while _chunks_done(store_path) < after and proc.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
            assert proc.poll() is None, "the sweep ended before it could be killed"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            at_kill.append(_chunks_done(store_path))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    yield store_path, at_kill


def test_a_killed_sweep_resumes_to_the_uninterrupted_result(
        killed_twice: tuple[Path, list[int]], month_file: Path,
        swept: tuple[str, str, list[SweepGroup]]) -> None:
    store_path, at_kill = killed_twice
    _, sweep_id, groups = swept
    record = get_sweep(open_store(str(store_path)), sweep_id)
    assert record is not None and not record.finished
    assert 3 <= at_kill[0] <= at_kill[1] < record.chunks_total
    # `--resume ID` alone: the sources come from the stored sweep
    done = subprocess.run([sys.executable, "-m", "app.cli", "sweep", "--resume", sweep_id,
                           "--store", str(store_path), "--format", "json", "--no-progress"],
                          cwd=ROOT, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    assert f"resumed sweep {sweep_id}".encode() in done.stderr
    doc = orjson.loads(done.stdout)
    assert doc["sweep"]["finished"] and doc["sweep"]["id"] == sweep_id
    assert [g["group_id"] for g in doc["groups"]] == [g.group_id for g in groups]
    assert key(sweep_groups(open_store(str(store_path)), sweep_id)) == key(groups)
    with sqlite3.connect(store_path) as conn:  # no duplicate rows, none lost, no orphan
        assert conn.execute("SELECT count(*), count(DISTINCT group_id) FROM sweep_groups"
                            ).fetchone() == (len(groups), len(groups))
        assert conn.execute("SELECT count(*) FROM investigations").fetchone()[0] == len(groups)
        assert conn.execute("SELECT count(*) FROM timelines").fetchone()[0] == len(groups)
        assert conn.execute("SELECT count(*), count(DISTINCT chunk) FROM sweep_chunks"
                            ).fetchone() == (record.chunks_total, record.chunks_total)


def test_show_and_list_from_the_command_line(
        swept: tuple[str, str, list[SweepGroup]], capsys: pytest.CaptureFixture[str]) -> None:
    url, sweep_id, groups = swept
    assert main(["sweep", "--show", sweep_id, "--store", url, "--format", "json",
                 "--base-url", "http://twice.example:8501"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert len(doc["groups"]) == len(groups)
    first = doc["groups"][0]
    assert first["link"] == (f"http://twice.example:8501/?inv={first['investigation_id']}"
                             f"&group={first['group_id']}&tab=verdict")
    by_layer = doc["totals"]["by_layer"]
    assert sum(row["groups"] for row in by_layer.values()) == len(groups)
    usd = sum(g.money_at_risk.get("usd", 0) for g in groups)
    assert doc["totals"]["money_at_risk"]["usd"] == usd > 0
    assert sum(row["money_at_risk"].get("usd", 0) for row in by_layer.values()) == usd
    assert by_layer["redelivery"]["groups"] >= 2  # the redelivery copies and the straddler

    assert main(["sweep", "--show", sweep_id, "--store", url]) == 0
    table = capsys.readouterr().out
    assert f"{len(groups)} duplicate groups" in table
    for g in groups:
        assert f"?inv={g.investigation_id}&group={g.group_id}&tab=verdict" in table

    assert main(["sweep", "--list", "--store", url]) == 0
    assert sweep_id in capsys.readouterr().out


def test_bad_input_is_one_clear_message(tmp_path: Path, month_file: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "s.sqlite3")
    assert main(["sweep", str(tmp_path / "missing"), "--store", url]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["sweep", "--show", "nope", "--store", url]) == 2
    assert "no sweep 'nope'" in capsys.readouterr().err
    assert main(["sweep", str(month_file), "--chunk", "soon", "--store", url]) == 2
    assert "--chunk" in capsys.readouterr().err
    assert main(["sweep", str(month_file), "--resume", "sw-0000", "--store", url,
                 "--no-progress"]) == 2
    assert "was not made from these sources" in capsys.readouterr().err
    assert main(["sweep", str(month_file), "--since", "2025-05-02", "--until", "2025-05-01",
                 "--store", url, "--no-progress"]) == 2
    assert "--until must be later" in capsys.readouterr().err
    assert main(["sweep", str(month_file), "--overlap", "5m", "--store", url,
                 "--no-progress"]) == 2
    assert "--overlap at least --window" in capsys.readouterr().err


def test_a_time_window_sweeps_only_its_days(month_file: Path, tmp_path: Path,
                                            swept: tuple[str, str, list[SweepGroup]]) -> None:
    _, _, groups = swept
    since, until = START + pd.Timedelta(days=5), START + pd.Timedelta(days=12)
    result = run_sweep(open_store(str(tmp_path / "w.sqlite3")), [("timeline", month_file, {})],
                       since=since, until=until)
    assert result.record.chunks_total == 7
    inside = [g.group_id for g in groups
              if since.to_pydatetime() <= g.first_at < until.to_pydatetime()]
    assert [g.group_id for g in sweep_groups(open_store(str(tmp_path / "w.sqlite3")),
                                             result.record.id)] == inside
    assert inside and len(inside) < len(groups)


def test_the_progress_bar_counts_chunks_and_duplicates_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = ROOT / "sample_data" / "sdk_retry"
    url = str(tmp_path / "p.sqlite3")
    monkeypatch.setenv("TWICE_STORE", url)  # the app's store, as `twice web` opens it
    assert main(["sweep", str(folder)]) == 0
    out = capsys.readouterr()
    assert "1/1 chunks · 1 duplicates" in out.err
    assert "1/1 chunks" in out.out and "sdk_retry" in out.out
    monkeypatch.delenv("TWICE_STORE")
    assert main(["sweep", str(folder), "--store", url]) == 0  # the same command: a resume
    assert "(1 chunks were already done)" in capsys.readouterr().err
