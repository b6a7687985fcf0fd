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

import pandas as pd
import pytest

from tests.contract import contract
from twice.cli import main
from twice.engine import analyze
from twice.lab.month import START, month, sample_names, write_month
from twice.store import open_store
from twice.store.sweeps import SweepGroup, get_sweep, sweep_groups
from twice.sweep.run import Plan, batches, run_sweep

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
    return [sys.executable, "-m", "twice.cli", "sweep", str(month_file), "--store",
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
    done = subprocess.run([sys.executable, "-m", "twice.cli", "sweep", "--resume", sweep_id,
                           "--store", str(store_path), "--format", "json", "--no-progress"],
                          cwd=ROOT, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    assert f"resumed sweep {sweep_id}".encode() in done.stderr
    doc = contract(done.stdout)
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
    doc = contract(capsys.readouterr().out)
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
    assert main(["sweep", "--list", "--store", url, "--format", "json"]) == 0
    assert sweep_id in [s["id"] for s in contract(capsys.readouterr().out)]
    # --exit-code: a sweep that holds duplicate groups is a gate's failure
    assert main(["sweep", "--show", sweep_id, "--store", url, "--exit-code"]) == 1
    capsys.readouterr()


def test_bad_input_is_one_clear_message(tmp_path: Path, month_file: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "s.sqlite3")
    assert main(["sweep", str(tmp_path / "missing"), "--store", url]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["sweep", "--show", "nope", "--store", url]) == 2
    assert "no sweep 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # click's usage error
        main(["sweep", str(month_file), "--chunk", "soon", "--store", url])
    assert exited.value.code == 2
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
    assert main(["sweep", str(folder), "-v"]) == 0  # -v: a line per chunk, terminal or not
    out = capsys.readouterr()
    assert "1/1 chunks · 1 duplicates" in out.err
    assert "1/1 chunks" in out.out and "sdk_retry" in out.out
    monkeypatch.delenv("TWICE_STORE")
    assert main(["sweep", str(folder), "--store", url]) == 0  # the same command: a resume
    err = capsys.readouterr().err
    assert "(1 chunks were already done)" in err
    assert "chunks ·" not in err  # without -v, no bar when stderr is no terminal


def test_chunks_without_an_attempt_are_done_without_the_engine_and_not_redone(
        tmp_path: Path) -> None:
    """Three days of incidents, then nothing for weeks but one day of agent-side evidence only
    (spans, checkpoints: no provider record, so no attempt in a timeline that has provider
    records), then more incidents: the empty and agent-only chunks are marked done without the
    engine, the result still equals one analysis, and a resume redoes none of them."""
    frame = month(days=24)
    at = frame["at"]
    day = pd.Timedelta(days=1)
    provider = frame["kind"].isin(["provider_request", "provider_event"])
    keep = ((at < START + 3 * day) | (at >= START + 20 * day)
            | ((at >= START + 9 * day) & (at < START + 10 * day) & ~provider))
    path = tmp_path / "gaps.parquet"
    frame[keep].to_parquet(path, index=False)
    agent_only = (START + 9 * day, START + 10 * day)

    store = open_store(str(tmp_path / "gaps.sqlite3"))
    stats: dict[str, int] = {}
    result = run_sweep(store, [("timeline", path, {})], stats=stats)
    total = result.record.chunks_total
    assert result.record.finished and result.record.chunks_done == total
    whole = analyze(pd.read_parquet(path))
    groups = sweep_groups(store, result.record.id)
    assert sorted((g.group_id, g.worst_layer and g.worst_layer.value, g.money_at_risk())
                  for g in whole.groups) == \
        sorted((g.group_id, g.layer, g.money_at_risk) for g in groups)
    assert len(groups) >= 3
    kept = frame[keep]
    days_with = {int(d) for d in (kept.loc[provider[keep], "at"] - START) // day}
    assert 9 not in days_with and ((kept["at"] - START) // day == 9).sum() > 100
    # one chunk a day from START: only the days with a provider record run the engine
    assert stats == {"analysed": len(days_with), "skipped": total - len(days_with)}
    assert stats["skipped"] >= 17
    assert not [g for g in groups
                if agent_only[0].to_pydatetime() <= g.first_at < agent_only[1].to_pydatetime()]
    with sqlite3.connect(tmp_path / "gaps.sqlite3") as conn:  # every chunk recorded done
        assert conn.execute("SELECT count(DISTINCT chunk) FROM sweep_chunks").fetchone()[0] \
            == total
        assert conn.execute("SELECT count(*) FROM investigations").fetchone()[0] == len(groups)

    again: dict[str, int] = {}
    resumed = run_sweep(store, [("timeline", path, {})], stats=again)
    assert resumed.resumed and resumed.chunks_skipped == total
    assert again.get("analysed", 0) == again.get("skipped", 0) == 0
    assert key(sweep_groups(store, result.record.id)) == key(groups)


def test_batches_grow_stop_at_done_chunks_and_keep_under_the_row_cap() -> None:
    day = pd.Timedelta(days=1)
    plan = Plan(since=START, until=START + 40 * day, chunk_s=86400.0, overlap_s=7200.0)
    # 100 rows a day at noon, 1000 on day 30
    times = [START + d * day + pd.Timedelta(hours=12) for d in range(40)
             for _ in range(1000 if d == 30 else 100)]
    at_ns = pd.DatetimeIndex(times).as_unit("ns").asi8
    todo = [i for i in range(40) if i not in (7, 8)]  # 7 and 8 done by an earlier run
    got = list(batches(plan, todo, at_ns, max_rows=1500))
    assert [c for b in got for c in b] == todo  # every chunk to do, once, in order
    assert all(b == list(range(b[0], b[-1] + 1)) for b in got)  # consecutive chunks only
    # 1, 4, then 16 cut by the done chunks; then at most 1500 rows a batch
    assert got == [[0], [1, 2, 3, 4], [5, 6], list(range(9, 24)), list(range(24, 30)),
                   list(range(30, 36)), list(range(36, 40))]
    # one chunk over the cap is still a batch (of one)
    assert list(batches(plan, [29, 30, 31], at_ns, max_rows=500)) == [[29], [30], [31]]


def test_a_repeat_33_hours_later_is_followed_into_another_batch(
        month_file: Path, tmp_path: Path, swept: tuple[str, str, list[SweepGroup]]) -> None:
    """Starting the sweep on the paused run's day puts its first attempt in the first batch (one
    chunk) and the resume 33 h later in the next: the far rows bring the resume in."""
    names = [n for n in sample_names() if n != "control_renewal"]
    if "human_pause" not in names:
        pytest.skip("the human_pause sample is not bundled")
    _, _, groups = swept
    day = START + pd.Timedelta(days=names.index("human_pause"))
    paused = [g for g in groups if g.last_at - g.first_at > pd.Timedelta(hours=24)
              and day.to_pydatetime() <= g.first_at < (day + pd.Timedelta(days=1)).to_pydatetime()]
    assert len(paused) == 1 and paused[0].last_at >= (day + pd.Timedelta(days=1)).to_pydatetime()
    store = open_store(str(tmp_path / "pause.sqlite3"))
    result = run_sweep(store, [("timeline", month_file, {})], since=day,
                       until=day + pd.Timedelta(days=5))
    found = [g for g in sweep_groups(store, result.record.id) if g.group_id == paused[0].group_id]
    assert [(g.layer, g.attempts, g.first_at, g.last_at, g.chunk) for g in found] == \
        [(paused[0].layer, paused[0].attempts, paused[0].first_at, paused[0].last_at, 0)]


def test_each_investigation_is_titled_in_words_not_by_a_hash(
        swept: tuple[str, str, list[SweepGroup]]) -> None:
    """Issue 20: a sweep's investigation is named customer · amount · tool · layer · gap (then
    when it started), never by the sweep's hash, and a part the evidence lacks is left out."""
    import dataclasses

    from twice.formats import money
    from twice.sweep.run import investigation_title
    from twice.verdict import fmt_gap

    url, sweep_id, groups = swept
    store = open_store(url)
    titles = {s.id: s.title for s in store.list()}
    for g in groups:
        title = titles[g.investigation_id]
        assert sweep_id not in title and "unknown" not in title, title
        snap = store.get(g.investigation_id)
        assert snap is not None
        group = next(x for x in analyze(snap.timeline).groups if x.group_id == g.group_id)
        named = next(d for d in group.duplicates if d.layer.value == g.layer)
        second = next(r for r in group.records if r["attempt_id"] == named.second)
        words = [g.customer, money({second["currency"]: int(second["amount"])}),
                 group.tool_name, g.layer, f"gap {fmt_gap(named.gap_seconds)}",
                 f"{g.first_at:%Y-%m-%d %H:%M} UTC"]
        assert title == "Sweep: " + " · ".join(w for w in words if w), title
    assert any(g.customer for g in groups) and any(g.tool_name for g in groups)
    # the evidence names no customer nor tool: those parts are left out
    bare = dataclasses.replace(group, tool_name=None)
    title = investigation_title(bare, dataclasses.replace(g, customer=None))
    assert title == "Sweep: " + " · ".join(words[1:2] + words[3:]), title
