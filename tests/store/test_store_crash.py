"""Saved work survives a crash mid-write, and concurrent writers lose nothing.

A separate process saves large investigations (every bundled sample in one timeline, with a
megabyte of incompressible detail) and adds notes, in a loop, to the real store (a SQLite file,
or the test PostgreSQL server), writing a journal line before and after each call. The test
SIGKILLs it at random moments, again and again, and after each kill checks that the store opens,
that everything the journal says was committed is there intact, and that no half-written
investigation is visible. Then several processes add notes to one investigation at once.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
import pytest

from twice.connectors import registry
from twice.store import open_store
from twice.timeline import concat

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261202
KILLS = {"sqlite": 20, "postgres": 12}

WRITER = textwrap.dedent("""
    import sys
    from datetime import UTC, datetime

    import pandas as pd

    from twice.store import Note, open_store
    from twice.engine import analyze

    url, timeline_path, journal_path, prefix = sys.argv[1:5]
    timeline = pd.read_parquet(timeline_path)
    analysis = analyze(timeline)
    store = open_store(url)
    with open(journal_path, "a", buffering=1) as journal:
        journal.write("ready\\n")
        n = 0
        while True:
            inv = f"{prefix}-{n}"
            journal.write(f"begin create {inv}\\n")
            store.create(f"crash test {inv}", timeline, id=inv, analysis=analysis)
            journal.write(f"done create {inv}\\n")
            for k in range(3):
                text = f"note {k} on {inv}"
                journal.write(f"begin note {inv} {text}\\n")
                store.add_note(inv, Note("crash-test", text, datetime.now(UTC)))
                journal.write(f"done note {inv} {text}\\n")
            n += 1
""")


@pytest.fixture(scope="module")
def large_timeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    frames = []
    for folder in sorted(p for p in (ROOT / "sample_data").iterdir()
                         if (p / "truth.json").exists()):
        found, _ = registry.scan_folder(folder)
        frames.append(registry.load_all([(n, p, {}) for n, p in found]).rows)
    timeline = concat(frames)
    rng = np.random.default_rng(SEED)  # incompressible, so the blob really is ~1 MB
    timeline["detail"] = pd.array(
        [rng.bytes(300).hex() for _ in range(len(timeline))], dtype="string")
    path = tmp_path_factory.mktemp("timeline") / "large.parquet"
    timeline.to_parquet(path, index=False)
    return path, pd.read_parquet(path)


@dataclass
class Journal:
    created: list[str]  # ids whose create returned
    notes: dict[str, list[str]]  # id -> note texts whose add_note returned, in order
    interrupted: list[str]  # every call a kill cut short ("create <id>", "note <id> <text>")


def _read_journal(path: Path) -> Journal:
    journal = Journal([], {}, [])
    pending: str | None = None
    for line in path.read_text().splitlines():
        verb, _, call = line.partition(" ")
        if verb in ("begin", "ready") and pending is not None:
            journal.interrupted.append(pending)  # the writer was killed inside this call
        pending = call if verb == "begin" else None
        if verb == "done":
            what, _, rest = call.partition(" ")
            if what == "create":
                journal.created.append(rest)
            else:
                inv, _, text = rest.partition(" ")
                journal.notes.setdefault(inv, []).append(text)
    if pending is not None:
        journal.interrupted.append(pending)
    return journal


def _spawn(url: str, timeline: Path, journal: Path, prefix: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", WRITER, url, str(timeline), str(journal),
                             prefix], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_ready(proc: subprocess.Popen[bytes], journal: Path, marks: int) -> None:
    deadline = time.monotonic() + 120
    while journal.read_text().count("ready") < marks:
        if proc.poll() is not None:
            raise AssertionError(f"writer died: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "writer never became ready"
        time.sleep(0.05)


def _check(url: str, expected: pd.DataFrame, journal: Journal,
           count_rows: Callable[[], tuple[int, int]]) -> None:
    store = open_store(url)  # opens (SQLite: recovers its WAL) after the kill
    listed = {s.id for s in store.list()}
    assert set(journal.created) <= listed, "a committed investigation was lost"
    # a kill after the commit, before the journal line, leaves one the journal did not confirm
    cut_creates = {c.split(" ", 1)[1] for c in journal.interrupted if c.startswith("create ")}
    assert listed - set(journal.created) <= cut_creates
    investigations, timelines = count_rows()
    assert investigations == timelines == len(listed), "a half-written investigation"
    for inv in listed:
        snap = store.get(inv)
        assert snap is not None
        assert len(snap.timeline) == len(expected)
        pd.testing.assert_series_equal(snap.timeline["detail"], expected["detail"])
        confirmed = journal.notes.get(inv, [])
        cut = {c.split(" ", 2)[2] for c in journal.interrupted if c.startswith(f"note {inv} ")}
        texts = [n.text for n in snap.notes]
        assert [t for t in texts if t not in cut] == confirmed, "a committed note was lost"


def _crash_loop(url: str, timeline: Path, expected: pd.DataFrame, tmp: Path, kills: int,
                count_rows: Callable[[], tuple[int, int]]) -> dict[str, int]:
    rng = random.Random(SEED)
    journal_path = tmp / "journal.txt"
    journal_path.write_text("")
    for kill in range(kills):
        proc = _spawn(url, timeline, journal_path, f"k{kill}")
        try:
            _wait_ready(proc, journal_path, kill + 1)
            time.sleep(rng.uniform(0.05, 1.5))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, "the writer stopped before it was killed"
        journal = _read_journal(journal_path)
        _check(url, expected, journal, count_rows)
    journal = _read_journal(journal_path)
    inside = len(journal.interrupted)
    return {"kills": kills, "kills_inside_a_store_call": inside,
            "inside_create": sum(c.startswith("create ") for c in journal.interrupted),
            "investigations": len(journal.created),
            "notes": sum(len(v) for v in journal.notes.values()), "lost": 0}


def test_sqlite_store_survives_sigkill_mid_write(
        tmp_path: Path, large_timeline: tuple[Path, pd.DataFrame]) -> None:
    path = tmp_path / "investigations.sqlite3"
    open_store(str(path))

    def count_rows() -> tuple[int, int]:
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            return (conn.execute("SELECT count(*) FROM investigations").fetchone()[0],
                    conn.execute("SELECT count(*) FROM timelines").fetchone()[0])

    figures = _crash_loop(str(path), *large_timeline, tmp_path, KILLS["sqlite"], count_rows)
    print(f"\nsqlite crash test: {figures}")
    assert figures["investigations"] >= KILLS["sqlite"] // 2  # the writer really wrote


def test_postgres_store_survives_sigkill_of_its_client(
        tmp_path: Path, fresh_postgres_dsn: str,
        large_timeline: tuple[Path, pd.DataFrame]) -> None:
    open_store(fresh_postgres_dsn)

    def count_rows() -> tuple[int, int]:
        with psycopg.connect(fresh_postgres_dsn) as conn:
            return (conn.execute("SELECT count(*) FROM investigations").fetchone()[0],  # type: ignore[index]
                    conn.execute("SELECT count(*) FROM timelines").fetchone()[0])  # type: ignore[index]

    figures = _crash_loop(fresh_postgres_dsn, *large_timeline, tmp_path, KILLS["postgres"],
                          count_rows)
    print(f"\npostgres crash test: {figures}")
    assert figures["investigations"] >= KILLS["postgres"] // 2


NOTE_WRITER = textwrap.dedent("""
    import sys, time
    from datetime import UTC, datetime
    from twice.store import Note, open_store

    url, inv, who, count, writers = sys.argv[1:6]
    store = open_store(url)
    deadline = time.monotonic() + 170
    for n in range(int(count)):
        # rounds: note n is written once every writer's note n-1 is in, so the writers race
        # each other inside every round whatever the machine's load (no head start decides)
        while len(store.get(inv, timeline=False).notes) < n * int(writers):
            if time.monotonic() > deadline:
                sys.exit(f"{who}: round {n} never completed")
            time.sleep(0.002)
        store.add_note(inv, Note(who, f"{who} note {n}", datetime.now(UTC)))
""")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_processes_lose_no_note(backend: str, tmp_path: Path,
                                           request: pytest.FixtureRequest) -> None:
    url = (str(tmp_path / "s.sqlite3") if backend == "sqlite"
           else request.getfixturevalue("fresh_postgres_dsn"))
    found, _ = registry.scan_folder(ROOT / "sample_data" / "step_retry")
    inv = open_store(url).create("shared", registry.load_all(
        [(n, p, {}) for n, p in found]).rows)
    writers, each = 4, 30
    procs = [subprocess.Popen([sys.executable, "-c", NOTE_WRITER, url, inv, f"w{w}", str(each),
                               str(writers)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stderr=subprocess.PIPE) for w in range(writers)]
    for proc in procs:
        assert proc.wait(timeout=180) == 0, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
    snap = open_store(url).get(inv)
    assert snap is not None
    assert sorted(n.text for n in snap.notes) == sorted(
        f"w{w} note {n}" for w in range(writers) for n in range(each))
    # every round holds one note of each writer: the writes interleaved by construction, so a
    # lost write shows as a missing note above, never as a round that did not complete
    rounds = [sorted(n.author for n in snap.notes[r * writers:(r + 1) * writers])
              for r in range(each)]
    assert rounds == [[f"w{w}" for w in range(writers)]] * each
