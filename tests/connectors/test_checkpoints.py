"""The checkpoints connector against data written by LangGraph's own SqliteSaver/PostgresSaver.

Every data set here is made by running the real agent graph of `tests/agent_graph.py` over the
real checkpointer; the PostgreSQL server is the one `tests/conftest.py` starts.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg
import pytest
import time_machine
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.base import id as lg_id
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.base import MIGRATIONS
from langgraph.checkpoint.sqlite import SqliteSaver

from tests.agent_graph import build_agent, charge_turn, final_turn, run
from twice.connectors import checkpoints
from twice.connectors.base import SourceError
from twice.connectors.checkpoints.decode import uuid6_time_ns
from twice.connectors.checkpoints.postgres import KNOWN_MIGRATION
from twice.timeline import fingerprint, validate

T0 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)
T1 = T0 + timedelta(hours=1, minutes=30)
A1 = "toolu_01A7fQxS2mBvK9cLr3TyHn"  # charge that raises (connection reset)
A2 = "toolu_01Dp4WzE8uJqN6aYk1VbRg"  # the model asks again with a new id (layer 5)
B1 = "call_Qm3xZ8vLp2RtY7nWk4Hs9Jd"  # another thread, OpenAI-style id
CUS_A = "cus_QZ4mX8rT2nLk9P"
CUS_B = "cus_Nf7Yb2Kp5Lw3Xc"


@contextmanager
def rewound_clock(start: datetime) -> Iterator[time_machine.Traveller]:
    """Freeze the clock at `start` for a LangGraph run.

    LangGraph's uuid6() never lets ids go back in time (a process-wide `_last_v6_timestamp`),
    so after any run at a later time, ids minted at a rewound clock would carry that later time
    instead of `ts`. Rewinding the clock therefore rewinds that guard too.
    """
    saved = lg_id._last_v6_timestamp
    lg_id._last_v6_timestamp = None
    try:
        with time_machine.travel(start, tick=False) as clock:
            yield clock
    finally:
        lg_id._last_v6_timestamp = saved


def pacer(clock: time_machine.Traveller, seconds: list[float]) -> Callable[[str], None]:
    """Each node start moves the frozen clock by the next number of seconds."""
    steps = iter(seconds)
    return lambda _node: clock.shift(next(steps))


def write_incident(saver: BaseCheckpointSaver[Any]) -> None:
    """Two threads, the same on every backend:

    t-renewal-1 (worker-a, from T0): the charge raises, ToolNode turns that into an error
    ToolMessage; 5 minutes later the model asks again with a new tool call id; that one succeeds.
    t-renewal-2 (worker-b, from T1): one charge, succeeds.
    """
    with rewound_clock(T0) as clock:
        graph = build_agent(
            saver, [charge_turn(A1), charge_turn(A2), final_turn()],
            fail_first=ConnectionResetError("Connection reset by peer"),
            on_node=pacer(clock, [2, 1, 300, 1, 2]),
        )
        run(graph, "t-renewal-1", worker="worker-a")
        clock.move_to(T1)
        graph = build_agent(
            saver,
            [charge_turn(B1, customer_id=CUS_B, amount=1500, currency="EUR"), final_turn()],
            on_node=pacer(clock, [2, 1, 2]),
        )
        run(graph, "t-renewal-2", worker="worker-b")


def write_sqlite(path: Path, writer: Callable[[BaseCheckpointSaver[Any]], object]) -> Path:
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        writer(SqliteSaver(conn))
    finally:
        conn.close()
    return path


def write_postgres(dsn: str, writer: Callable[[BaseCheckpointSaver[Any]], object]) -> str:
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        writer(saver)
    return dsn


@dataclass(frozen=True)
class Stores:
    sqlite: Path
    postgres: str


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory,
             new_postgres_database: Callable[[], str]) -> Stores:
    path = tmp_path_factory.mktemp("checkpoints") / "agent.sqlite"
    return Stores(write_sqlite(path, write_incident),
                  write_postgres(new_postgres_database(), write_incident))


def both(stores: Stores) -> list[str | Path]:
    return [stores.sqlite, stores.postgres]


def of_kind(rows: pd.DataFrame, kind: str) -> pd.DataFrame:
    return rows[rows["kind"] == kind].reset_index(drop=True)


def secs(seconds: float) -> pd.Timestamp:
    return pd.Timestamp(T0 + timedelta(seconds=seconds))


# --- what the agent asked for and got back ------------------------------------------------


def test_sqlite_tool_calls_and_results_are_recovered_with_ids_args_and_times(incident: Stores):
    result = checkpoints.load(incident.sqlite)
    validate(result.rows)
    assert result.warnings == []
    assert set(result.rows["source"]) == {"checkpoints"}

    calls = of_kind(result.rows, "tool_call")
    assert list(calls["tool_call_id"]) == [A1, A2, B1]
    assert list(calls["tool_name"]) == ["charge_subscription"] * 3
    assert list(calls["thread_id"]) == ["t-renewal-1", "t-renewal-1", "t-renewal-2"]
    # each call is placed at the first checkpoint holding it: right after the model turn
    assert list(calls["at"]) == [secs(2), secs(2 + 1 + 300),
                                 pd.Timestamp(T1 + timedelta(seconds=2))]
    assert list(calls["step"]) == [1, 3, 1]
    assert calls.loc[0, "args"] == (
        '{"amount":4900,"currency":"usd","customer_id":"cus_QZ4mX8rT2nLk9P"}')
    assert list(calls["subject"]) == [CUS_A, CUS_A, CUS_B]
    assert list(calls["amount"]) == [4900, 4900, 1500]
    assert list(calls["currency"]) == ["usd", "usd", "eur"]
    # the re-emitted call has a new id but the same arguments
    same = fingerprint({"customer_id": CUS_A, "amount": 4900, "currency": "usd"})
    assert list(calls["args_fingerprint"])[:2] == [same, same]
    assert list(calls["args_fingerprint"])[2] != same
    assert list(calls["worker"]) == ["worker-a", "worker-a", "worker-b"]

    results = of_kind(result.rows, "tool_result")
    assert list(results["tool_call_id"]) == [A1, A2, B1]
    assert list(results["at"]) == [secs(3), secs(304), pd.Timestamp(T1 + timedelta(seconds=3))]
    assert list(results["tool_name"]) == ["charge_subscription"] * 3
    assert list(results["outcome"]) == ["error", "ok", "ok"]
    details = list(results["detail"])
    assert details[0].startswith("Error: ConnectionResetError('Connection reset by peer')")
    assert details[1].startswith('{"status": "succeeded", "charge": "ch_')
    origin = str(results["origin"].iloc[0])
    assert origin == f"{incident.sqlite}#t-renewal-1/{results['checkpoint_id'].iloc[0]}"


def test_postgres_gives_the_same_rows_as_sqlite(incident: Stores):
    lite = checkpoints.load(incident.sqlite)
    pg = checkpoints.load(incident.postgres)
    validate(pg.rows)
    assert pg.warnings == []
    compare = ["at", "kind", "thread_id", "step", "name", "worker", "tool_call_id", "tool_name",
               "args", "args_fingerprint", "subject", "amount", "currency", "outcome", "detail"]
    assert len(of_kind(pg.rows, "tool_call")) == 3
    pd.testing.assert_frame_equal(pg.rows[compare], lite.rows[compare])
    # the origin names the database without its password
    password = psycopg.conninfo.conninfo_to_dict(incident.postgres)["password"]
    assert not pg.rows["origin"].str.contains(str(password), regex=False).any()
    assert pg.rows["origin"].str.startswith("postgresql://postgres:***@127.0.0.1:").all()


def test_checkpoint_rows_carry_step_source_worker_and_time(incident: Stores):
    rows = of_kind(checkpoints.load(incident.sqlite).rows, "checkpoint")
    first = rows[rows["thread_id"] == "t-renewal-1"]
    assert list(first["step"]) == [-1, 0, 1, 2, 3, 4, 5]
    assert list(first["name"]) == ["input"] + ["loop"] * 6
    assert set(first["worker"]) == {"worker-a"}  # config scalars are copied into metadata
    assert list(first["at"]) == [secs(0), secs(0), secs(2), secs(3), secs(303), secs(304),
                                 secs(306)]
    assert set(rows[rows["thread_id"] == "t-renewal-2"]["worker"]) == {"worker-b"}


def test_uuid6_time_of_each_checkpoint_id_equals_its_ts(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(lg_id, "_last_v6_timestamp", None)  # a real, un-frozen clock
    path = write_sqlite(tmp_path / "live.sqlite", lambda saver: run(
        build_agent(saver, [charge_turn(A1), final_turn()]), "t-live"))
    result = checkpoints.load(path)
    rows = of_kind(result.rows, "checkpoint")
    assert len(rows) == 5
    for at, checkpoint_id in zip(rows["at"], rows["checkpoint_id"], strict=True):
        id_time = uuid6_time_ns(checkpoint_id)
        assert id_time is not None
        assert abs(id_time - at.value) < 5_000_000  # ts and id are minted within microseconds
    assert not [w for w in result.warnings if "UUIDv6" in w.detail]


# --- push-down: threads and time window ----------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_thread_ids_returns_only_that_threads_rows(incident: Stores, backend: str):
    target = incident.sqlite if backend == "sqlite" else incident.postgres
    full = checkpoints.load(target).rows
    only = checkpoints.load(target, thread_ids=["t-renewal-2"]).rows
    assert set(only["thread_id"]) == {"t-renewal-2"}
    assert list(of_kind(only, "tool_call")["tool_call_id"]) == [B1]
    expected = full[full["thread_id"] == "t-renewal-2"].reset_index(drop=True)
    pd.testing.assert_frame_equal(only, expected)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_time_window_returns_only_rows_inside_it(incident: Stores, backend: str):
    target = incident.sqlite if backend == "sqlite" else incident.postgres
    # From 200 s after T0 to 400 s: the re-emitted call and what followed, not the first call
    # (still in the message list, but it was asked for before the window), not thread 2.
    rows = checkpoints.load(target, since=T0 + timedelta(seconds=200),
                            until=T0 + timedelta(seconds=400)).rows
    assert set(rows["thread_id"]) == {"t-renewal-1"}
    assert list(of_kind(rows, "checkpoint")["step"]) == [3, 4, 5]
    assert list(of_kind(rows, "tool_call")["tool_call_id"]) == [A2]
    assert list(of_kind(rows, "tool_result")["tool_call_id"]) == [A2]
    # a window closing before the first result: the call without its answer
    early = checkpoints.load(target, until=T0 + timedelta(seconds=2.5)).rows
    assert list(of_kind(early, "tool_call")["tool_call_id"]) == [A1]
    assert of_kind(early, "tool_result").empty
    # naive datetimes are UTC; combined with thread_ids
    late = checkpoints.load(target, thread_ids=["t-renewal-2"], since=T1.replace(tzinfo=None))
    assert list(of_kind(late.rows, "tool_call")["tool_call_id"]) == [B1]


# --- pending writes ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_result_only_in_pending_writes_is_placed_at_the_checkpoint_they_hang_off(
        tmp_path: Path, fresh_postgres_dsn: str, backend: str):
    def crash_mid_step(saver: BaseCheckpointSaver[Any]) -> None:
        with rewound_clock(T0) as clock:
            graph = build_agent(saver, [charge_turn(A1), final_turn()],
                                on_node=pacer(clock, [2, 1, 1]),
                                crash_beside_tools=RuntimeError("worker lost"))
            with pytest.raises(RuntimeError, match="worker lost"):
                run(graph, "t-crash")

    target: str | Path = (write_sqlite(tmp_path / "crash.sqlite", crash_mid_step)
                          if backend == "sqlite" else write_postgres(fresh_postgres_dsn,
                                                                     crash_mid_step))
    rows = checkpoints.load(target).rows
    assert list(of_kind(rows, "checkpoint")["step"]) == [-1, 0, 1]  # no checkpoint after tools
    result = of_kind(rows, "tool_result")
    assert list(result["tool_call_id"]) == [A1]
    assert list(result["outcome"]) == ["ok"]
    assert list(result["checkpoint_id"]) == list(of_kind(rows, "tool_call")["checkpoint_id"])
    assert list(result["at"]) == [secs(2)]
    assert str(result["origin"].iloc[0]).endswith("/writes")


# --- input that cannot be read, or must not be ---------------------------------------------


def pickle_bomb(marker: Path) -> bytes:
    """A pickle that creates `marker` when unpickled (what an attacker's blob would do)."""

    class Plant:
        def __reduce__(self) -> tuple[object, ...]:
            return (pathlib.Path.touch, (marker,))

    return pickle.dumps(Plant())


def test_pickle_blob_in_sqlite_is_refused_with_a_warning(tmp_path: Path):
    path = write_sqlite(tmp_path / "agent.sqlite", write_incident)
    marker = tmp_path / "unpickled"
    with sqlite3.connect(path) as db:
        (checkpoint_id,) = db.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = 't-renewal-1' "
            "AND json_extract(metadata, '$.step') = 1").fetchone()
        db.execute("UPDATE checkpoints SET type = 'pickle', checkpoint = ? "
                   "WHERE checkpoint_id = ?", (pickle_bomb(marker), checkpoint_id))
    result = checkpoints.load(path)
    assert not marker.exists()
    refused = [w for w in result.warnings if "pickle" in w.detail]
    assert len(refused) == 1 and checkpoint_id in refused[0].source
    # the rest still loads; the first call is now first seen one step later
    calls = of_kind(result.rows, "tool_call")
    assert list(calls["tool_call_id"]) == [A1, A2, B1]
    assert list(calls["step"]) == [2, 3, 1]
    # the planted blob was live: unpickling it does run code
    pickle.loads(pickle_bomb(marker))
    assert marker.exists()


def test_pickle_blob_in_postgres_is_refused_with_a_warning(tmp_path: Path,
                                                            fresh_postgres_dsn: str):
    write_postgres(fresh_postgres_dsn, write_incident)
    marker = tmp_path / "unpickled"
    with psycopg.connect(fresh_postgres_dsn) as db:
        db.execute("UPDATE checkpoint_blobs SET type = 'pickle', blob = %s "
                   "WHERE thread_id = 't-renewal-1' AND channel = 'messages'",
                   (pickle_bomb(marker),))
    result = checkpoints.load(fresh_postgres_dsn)
    assert not marker.exists()
    assert [w for w in result.warnings if "pickle" in w.detail]
    assert len(of_kind(result.rows, "checkpoint")) == 12  # checkpoints themselves still read
    # thread 1's message lists are unreadable; its calls are still found in the pending writes
    # (the model's and the tool's outputs), at the checkpoint each write hangs off
    calls = of_kind(result.rows, "tool_call")
    assert list(calls["tool_call_id"]) == [A1, A2, B1]
    assert list(calls["origin"].str.endswith("/writes")) == [True, True, False]
    assert list(calls["at"]) == [secs(0), secs(3), pd.Timestamp(T1 + timedelta(seconds=2))]


def test_not_a_sqlite_file(tmp_path: Path):
    path = tmp_path / "notes.sqlite"
    path.write_text("thread_id,checkpoint_id\nt1,abc\n")
    with pytest.raises(SourceError, match="not a SQLite database") as err:
        checkpoints.load(path)
    assert err.value.source == str(path)
    with pytest.raises(SourceError, match="file not found"):
        checkpoints.load(tmp_path / "missing.sqlite")


def test_reading_keeps_the_locks_this_process_holds_on_the_file(incident: Stores,
                                                                tmp_path: Path):
    """Closing any descriptor of a SQLite file drops every POSIX lock the process holds on it:
    reading evidence a checkpointer of this process has open must not take its lock away."""
    path = Path(shutil.copy(incident.sqlite, tmp_path / "agent.sqlite"))
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        # a rollback journal: the writer's lock is on the database file itself (WAL keeps it
        # in the -shm file)
        assert writer.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
        writer.execute("BEGIN EXCLUSIVE")  # the checkpointer, mid-write
        assert len(checkpoints.load(path).rows)
        other = subprocess.run([sys.executable, "-c", (
            "import sqlite3, sys\n"
            "try:\n"
            f"    sqlite3.connect({str(path)!r}, timeout=0).execute('BEGIN IMMEDIATE')\n"
            "except sqlite3.OperationalError as e:\n"
            "    sys.exit(str(e))\n")], capture_output=True, text=True, timeout=60)
        assert other.returncode == 1 and "locked" in other.stderr, other
    finally:
        writer.close()


def test_sqlite_file_with_other_tables(tmp_path: Path):
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INTEGER)")
    with pytest.raises(SourceError, match=r"no `checkpoints` table \(found: orders\)"):
        checkpoints.load(path)
    assert not checkpoints.sniff(path, path.read_bytes()[:65536])


def test_sniff_recognises_a_saver_file(incident: Stores, tmp_path: Path):
    assert checkpoints.sniff(incident.sqlite, incident.sqlite.read_bytes()[:65536])
    (tmp_path / "x.json").write_text("{}")
    assert not checkpoints.sniff(tmp_path / "x.json", b"{}")


def test_postgres_database_with_other_tables(fresh_postgres_dsn: str):
    with psycopg.connect(fresh_postgres_dsn) as db:
        db.execute("CREATE TABLE orders (id int primary key, amount int)")
    with pytest.raises(SourceError, match=r"no `checkpoints` table \(found: orders\)") as err:
        checkpoints.load(fresh_postgres_dsn)
    password = str(psycopg.conninfo.conninfo_to_dict(fresh_postgres_dsn)["password"])
    assert password not in str(err.value)
    assert err.value.source.startswith("postgresql://postgres:***@")


def test_unreachable_postgres(postgres_dsn: str):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dsn = f"postgresql://postgres:S3cret-not-shown@127.0.0.1:{port}/db"
    with pytest.raises(SourceError, match="Connection refused|connection failed") as err:
        checkpoints.load(dsn)
    assert "S3cret-not-shown" not in str(err.value)
    assert err.value.source == f"postgresql://postgres:***@127.0.0.1:{port}/db"


def test_wrong_postgres_password(postgres_dsn: str):
    real = str(psycopg.conninfo.conninfo_to_dict(postgres_dsn)["password"])
    wrong = postgres_dsn.replace(f":{real}@", ":Wr0ng-pa55word@")
    with pytest.raises(SourceError, match="password authentication failed") as err:
        checkpoints.load(wrong)
    assert "Wr0ng-pa55word" not in str(err.value) and real not in str(err.value)


def test_unknown_migration_version_is_reported_but_read(fresh_postgres_dsn: str):
    assert KNOWN_MIGRATION == len(MIGRATIONS) - 1  # the installed saver's last migration
    write_postgres(fresh_postgres_dsn, write_incident)
    with psycopg.connect(fresh_postgres_dsn) as db:
        db.execute("INSERT INTO checkpoint_migrations (v) VALUES (%s)", (KNOWN_MIGRATION + 3,))
    result = checkpoints.load(fresh_postgres_dsn, thread_ids="t-renewal-2")
    assert any(f"version {KNOWN_MIGRATION + 3}, newer" in w.detail for w in result.warnings)
    assert list(of_kind(result.rows, "tool_call")["tool_call_id"]) == [B1]


# --- size ----------------------------------------------------------------------------------


def test_ten_thousand_checkpoints_of_long_threads_all_load(tmp_path: Path):
    """One real 25-turn thread (53 checkpoints, lists growing to 52 messages), copied to 200
    threads: every checkpoint re-stores the whole message list, which is what makes naive
    readers quadratic."""
    turns = [charge_turn(f"toolu_01Perf{i:04d}", amount=100 + i) for i in range(25)]
    path = write_sqlite(tmp_path / "big.sqlite",
                        lambda saver: run(build_agent(saver, [*turns, final_turn()]), "t-0"))
    with sqlite3.connect(path) as db:
        for table in ("checkpoints", "writes"):
            columns = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
            rest = ", ".join(c for c in columns if c != "thread_id")
            db.execute("WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n "
                       f"WHERE k < 199) INSERT INTO {table} (thread_id, {rest}) "
                       f"SELECT 't-' || n.k, {rest} FROM {table}, n WHERE thread_id = 't-0'")
    # speed is measured by benchmarks/analyze_bench.py, not here
    result = checkpoints.load(path)
    assert len(of_kind(result.rows, "checkpoint")) == 200 * 53
    assert len(of_kind(result.rows, "tool_call")) == 200 * 25


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_reading_a_saver_file_leaves_its_folder_untouched(incident: Stores, tmp_path: Path):
    folder = tmp_path / "evidence"
    folder.mkdir()
    copy = folder / "agent.sqlite"
    copy.write_bytes(incident.sqlite.read_bytes())
    before = _listing(folder)
    rows = checkpoints.load(copy).rows
    assert _listing(folder) == before  # no -wal / -shm beside the evidence
    assert set(rows["thread_id"].dropna()) == {"t-renewal-1", "t-renewal-2"}


def test_a_live_wal_file_is_read_without_writing_beside_it(tmp_path: Path):
    """A SqliteSaver still open by the agent: its last steps are only in the -wal file."""
    folder = tmp_path / "live"
    folder.mkdir()
    path = folder / "agent.sqlite"
    writer = sqlite3.connect(path, check_same_thread=False)
    try:
        write_incident(SqliteSaver(writer))  # WAL mode (SqliteSaver.setup); still open
        assert (folder / "agent.sqlite-wal").stat().st_size > 0
        before = _listing(folder)
        rows = checkpoints.load(path).rows
        assert _listing(folder) == before
        assert {"t-renewal-1", "t-renewal-2"} <= set(rows["thread_id"].dropna())
        assert A2 in set(rows["tool_call_id"].dropna())
    finally:
        writer.close()


def test_an_empty_wal_file_beside_a_saver_file_changes_nothing(incident: Stores,
                                                               tmp_path: Path):
    """An empty -wal (a reader opened the file, or the log was checkpointed) holds no
    transaction: the file reads as it does alone, and the folder stays as it was."""
    path = tmp_path / "agent.sqlite"
    shutil.copyfile(incident.sqlite, path)
    alone = checkpoints.load(path)
    (tmp_path / "agent.sqlite-wal").touch()
    before = _listing(tmp_path)
    with_wal = checkpoints.load(path)
    assert _listing(tmp_path) == before
    pd.testing.assert_frame_equal(with_wal.rows, alone.rows)
    assert with_wal.warnings == alone.warnings


READ_ONLY_MOUNT = """
set -e
mount --bind "$1" "$1"
mount -o remount,ro,bind "$1"
if touch "$1/probe" 2>/dev/null; then echo "mount is writable" >&2; exit 3; fi
exec "$2" -c "$3" "$1/agent.sqlite"
"""
READ = """
import sys
from twice.connectors import checkpoints
rows = checkpoints.load(sys.argv[1]).rows
print(len(rows), sorted(set(rows["thread_id"].dropna())))
"""


def test_a_saver_file_on_a_read_only_file_system_is_read(incident: Stores, tmp_path: Path):
    """The evidence folder mounted read-only (a private mount namespace: nothing else sees it)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to mount a folder read-only")
    folder = tmp_path / "readonly"
    folder.mkdir()
    (folder / "agent.sqlite").write_bytes(incident.sqlite.read_bytes())
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [unshare, "-m", "sh", "-c", READ_ONLY_MOUNT, "sh", str(folder), sys.executable, READ],
        capture_output=True, text=True, timeout=120, cwd=repo)
    if done.returncode != 0 and "mount" in done.stderr and "Traceback" not in done.stderr:
        pytest.skip(f"cannot mount read-only here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'t-renewal-1', 't-renewal-2'" in done.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["agent.sqlite"]
