"""Fuzzing the checkpoints connector: SqliteSaver files LangGraph wrote, then damaged (bad blobs,
wrong msgpack, pickle and code-naming blobs, wrong tables and column types, truncated or corrupt
files), and a few bad rows in a real PostgreSQL PostgresSaver database.

Blobs are decoded with LangGraph's strict allow-list and pickle off: the tests plant blobs that
would create a marker file if anything unpickled them or called what they name."""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ormsgpack
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.connectors.fuzz_inputs import json_values, text
from tests.connectors.fuzz_summary import check, fuzz_settings
from tests.connectors.test_checkpoints import write_incident, write_postgres
from twice.connectors import checkpoints
from twice.connectors.base import LoadResult

SAMPLE = Path(__file__).parents[2] / "sample_data" / "sdk_retry" / "checkpoints.sqlite"
MARKER_NAME = "code-ran"


class _Plant:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))  # unpickling creates the marker file


def hostile_blobs(marker: Path) -> list[tuple[str, bytes]]:
    """(type, blob) pairs that run code if decoded carelessly: pickle, and msgpack ext records
    naming a callable (LangGraph's constructor / method ext codes 0-3)."""
    call = ("builtins", "open", [str(marker), "w"])
    blobs = [("pickle", pickle.dumps(_Plant(str(marker))))]
    for code in (0, 1, 2, 3):
        args: Any = call if code != 2 else ("builtins", "open", {"file": str(marker),
                                                                  "mode": "w"})
        if code == 3:
            args = ("builtins", "open", "__call__", str(marker))
        blobs.append(("msgpack", ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(args)))))
        blobs.append(("msgpack", ormsgpack.packb({"v": 4, "ts": "2025-03-04T10:00:00+00:00",
                                                  "channel_values": {"messages": [
                                                      ormsgpack.Ext(code, ormsgpack.packb(args))
                                                  ]}})))
    return blobs


def _packable(value: Any) -> bytes:
    try:
        return ormsgpack.packb(value)
    except (TypeError, ormsgpack.MsgpackEncodeError):
        return b"\xc1"  # msgpack's never-used byte


_blob_types = st.sampled_from(["msgpack", "json", "bytes", "bytearray", "null", "empty",
                               "pickle", "weird", None])
_blobs = (
    st.binary(max_size=64)
    | json_values.map(_packable)
    | st.builds(lambda code, data: ormsgpack.packb(ormsgpack.Ext(code, data)),
                st.integers(0, 127), st.binary(max_size=32))
    | st.builds(lambda code, v: ormsgpack.packb(ormsgpack.Ext(code, _packable(v))),
                st.integers(0, 6), json_values)
    | json_values.map(lambda v: _packable({"v": 4, "ts": v, "channel_values": {"messages": v}}))
    | json_values.map(lambda v: _packable({"ts": "2025-03-04T10:00:00+00:00",
                                           "channel_values": {"messages": [
                                               {"type": "ai", "tool_calls": [v]},
                                               {"type": "tool", "tool_call_id": v,
                                                "content": v}]}}))
    | st.none()
)
def _cell(value: Any) -> Any:
    """What a SQLite cell can hold: an integer outside SQLite's 64 bits is stored as its text
    (SQLite itself cannot hold it, so no real file has one), text with a lone surrogate as its
    bytes."""
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return str(value)
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate (NASTY's "\ud800"): sqlite3 cannot bind
            return value.encode("utf-8", "surrogatepass")  # it; the bytes another writer left
        return value
    return value if isinstance(value, (int, float, bytes)) else repr(value)


_cells = json_values.map(_cell) \
    | st.binary(max_size=16) | st.none()
_sql_values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(), text, st.binary(max_size=16),
                        st.none())


@pytest.fixture(scope="module")
def sample_rows() -> tuple[list[str], list[tuple[str, int]]]:
    with sqlite3.connect(SAMPLE) as db:
        ids = [r[0] for r in db.execute("SELECT checkpoint_id FROM checkpoints ORDER BY 1")]
        writes = [tuple(r) for r in db.execute("SELECT task_id, idx FROM writes ORDER BY 1, 2")]
    return ids, writes  # type: ignore[return-value]


def _copy(tmp_path: Path, name: str = "cp.sqlite") -> Path:
    path = tmp_path / name
    shutil.copyfile(SAMPLE, path)
    return path


def _load(path: Path) -> Callable[[], LoadResult]:
    return lambda: checkpoints.load(path)


@fuzz_settings(30)
@given(changes=st.lists(st.tuples(st.integers(0, 10**6), _blob_types, _blobs), min_size=1,
                        max_size=6),
       write_changes=st.lists(st.tuples(st.integers(0, 10**6), _blob_types, _blobs),
                              max_size=4),
       metadata=st.lists(st.tuples(st.integers(0, 10**6), _cells), max_size=3))
def test_sqlite_bad_blobs_and_metadata(
    tmp_path: Path, sample_rows: tuple[list[str], list[tuple[str, int]]],
    changes: list[tuple[int, str | None, bytes | None]],
    write_changes: list[tuple[int, str | None, bytes | None]],
    metadata: list[tuple[int, Any]],
) -> None:
    ids, writes = sample_rows
    path = _copy(tmp_path)
    with sqlite3.connect(path) as db:
        for i, type_, blob in changes:
            db.execute("UPDATE checkpoints SET type = ?, checkpoint = ? WHERE checkpoint_id = ?",
                       (type_, blob, ids[i % len(ids)]))
        for i, type_, blob in write_changes:
            task_id, idx = writes[i % len(writes)]
            db.execute("UPDATE writes SET type = ?, value = ? WHERE task_id = ? AND idx = ?",
                       (type_, blob, task_id, idx))
        for i, value in metadata:
            db.execute("UPDATE checkpoints SET metadata = ? WHERE checkpoint_id = ?",
                       (value, ids[i % len(ids)]))
    check("checkpoints", _load(path), source=str(path))


@fuzz_settings(25)
@given(column=st.sampled_from(["thread_id", "checkpoint_ns", "checkpoint_id", "type"]),
       values=st.lists(st.tuples(st.integers(0, 10**6), _sql_values), min_size=1, max_size=4))
def test_sqlite_wrong_column_values(
    tmp_path: Path, sample_rows: tuple[list[str], list[tuple[str, int]]], column: str,
    values: list[tuple[int, Any]],
) -> None:
    ids, _ = sample_rows
    path = _copy(tmp_path)
    with sqlite3.connect(path) as db:
        for i, value in values:
            # OR IGNORE: the saver's NOT NULL / primary key constraints keep some values out
            db.execute(f"UPDATE OR IGNORE checkpoints SET {column} = ? WHERE rowid = ?",
                       (value, i % len(ids) + 1))
            db.execute(f"UPDATE OR IGNORE writes SET {column} = ? WHERE rowid = ?",
                       (value, i % 90 + 1))
    check("checkpoints", _load(path), source=str(path))


def test_hostile_blobs_are_not_decoded_into_code(tmp_path: Path,
                                                  sample_rows: tuple[list[str], Any]) -> None:
    ids, writes = sample_rows
    marker = tmp_path / MARKER_NAME
    path = _copy(tmp_path)
    blobs = hostile_blobs(marker)
    with sqlite3.connect(path) as db:
        for i, (type_, blob) in enumerate(blobs):
            db.execute("UPDATE checkpoints SET type = ?, checkpoint = ? WHERE checkpoint_id = ?",
                       (type_, blob, ids[i]))
            task_id, idx = writes[i]
            db.execute("UPDATE writes SET type = ?, value = ? WHERE task_id = ? AND idx = ?",
                       (type_, blob, task_id, idx))
    result = check("checkpoints", _load(path), source=str(path))
    assert isinstance(result, LoadResult) and len(result.rows)
    assert not marker.exists()
    details = " ".join(w.detail for w in result.warnings)
    assert "refused to unpickle" in details
    assert "builtins.open" in details  # named as not on the allow-list, not constructed


@pytest.mark.parametrize("ddl", [
    "DROP TABLE writes",
    "ALTER TABLE writes DROP COLUMN value",
    "ALTER TABLE checkpoints DROP COLUMN checkpoint",
    "ALTER TABLE checkpoints RENAME TO old_checkpoints",
    "DROP TABLE checkpoints; CREATE VIEW checkpoints AS SELECT 1 AS thread_id",
    "DROP TABLE checkpoints; CREATE TABLE checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
    " type, checkpoint, metadata); INSERT INTO checkpoints VALUES (NULL, NULL, NULL, NULL, NULL,"
    " NULL), (x'00', 1.5, 7, 'msgpack', 'text not a blob', x'ff')",
    "DROP TABLE writes; CREATE TABLE writes (thread_id, checkpoint_ns, checkpoint_id, task_id,"
    " task_path, idx, channel, type, value); INSERT INTO writes VALUES (NULL, NULL,"
    " 'not-a-uuid', NULL, NULL, 'x', NULL, 'msgpack', x'c1')",
    "DELETE FROM checkpoints",
])
def test_sqlite_wrong_tables(tmp_path: Path, ddl: str) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as db:
        db.executescript(ddl)
    check("checkpoints", _load(path), source=str(path))


def test_sqlite_truncated_and_corrupt_files(tmp_path: Path) -> None:
    raw = SAMPLE.read_bytes()
    path = tmp_path / "cut.sqlite"
    # every page boundary and a few bytes around it, and inside the header
    cuts = sorted({0, 1, 15, 16, 17, 99, 100, 101} | {
        p * 4096 + d for p in range(len(raw) // 4096) for d in (-1, 0, 1, 2048)} - {-1})
    for end in cuts:
        path.write_bytes(raw[:end])
        check("checkpoints", _load(path), source=str(path), engine=False)
    for offset in range(100, len(raw), 997):  # one flipped byte at a time, all over the file
        damaged = bytearray(raw)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        check("checkpoints", _load(path), source=str(path), engine=False)


@fuzz_settings(25)
@given(raw=st.binary(max_size=200))
def test_sqlite_header_then_junk(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + raw)
    check("checkpoints", _load(path), source=str(path))


# --- PostgresSaver: a few bad rows in a real database ------------------------------------------


@pytest.fixture(scope="module")
def pg_source(new_postgres_database: Callable[[], str]) -> str:
    """A PostgresSaver database the real agent graph wrote (the checkpoints tests' incident)."""
    return write_postgres(new_postgres_database(), write_incident)


_PG_DAMAGE = {
    "blob_junk": "UPDATE checkpoint_blobs SET blob = '\\xc1ff00'::bytea",
    "blob_type_pickle": "UPDATE checkpoint_blobs SET type = 'pickle'",
    "blob_type_unknown": "UPDATE checkpoint_blobs SET type = 'yaml'",
    "blob_null": "UPDATE checkpoint_blobs SET blob = NULL",
    "versions_not_object": "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, "
                           "'{channel_versions}', '[1, \"x\"]')",
    "ts_garbage": "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{ts}', "
                  "'\"9999-99-99\"')",
    "ts_far_future": "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{ts}', "
                     "'\"9999-12-31T23:59:59+00:00\"')",
    "checkpoint_id_junk": "UPDATE checkpoints SET checkpoint_id = 'not-a-uuid-' || checkpoint_id"
                          ", checkpoint = checkpoint - 'ts'",
    "metadata_scalar": "UPDATE checkpoints SET metadata = '12345678901234567890123'",
    "writes_junk": "UPDATE checkpoint_writes SET blob = '\\x92c1'::bytea, type = 'msgpack'",
    "writes_gone": "DROP TABLE checkpoint_writes",
    "blobs_gone": "DROP TABLE checkpoint_blobs",
    "migrations_ahead": "INSERT INTO checkpoint_migrations VALUES (99)",
}


@pytest.mark.parametrize("damage", sorted(_PG_DAMAGE))
def test_postgres_bad_rows(pg_source: str, damage: str) -> None:
    base, _, good = pg_source.rpartition("/")
    copy = f"fuzz_{damage}"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{copy}"')
        admin.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{good}"')  # the good data, copied
    dsn = f"{base}/{copy}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_PG_DAMAGE[damage])  # type: ignore[arg-type]
        result = check("checkpoints_postgres", lambda: checkpoints.load(dsn))
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')
    if damage == "blob_type_pickle":
        assert isinstance(result, LoadResult)
        assert any("refused to unpickle" in w.detail for w in result.warnings)


# --- rebuilt messages of the wrong shape, values nested too deep, blobs too big (issue 19) -----
BAD_TOOL_CALLS: dict[str, Any] = {
    "list_of_ints": [1, 2, 3], "string": "abc", "null": None, "object": {"id": "c"},
    "id_list": [{"id": ["x"], "name": {"a": 1}, "args": 1}],
    "deep_args": [{"id": "call_deep", "name": "charge", "args": {"x": "DEEP"}}],
}


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


@dataclass(frozen=True)
class Raw:
    """An ext record as read (ormsgpack.Ext does not show its fields)."""

    code: int
    data: bytes


def _raw(blob: bytes) -> Any:
    return ormsgpack.unpackb(blob, ext_hook=Raw)


def _reshape(value: Any, tool_calls: Any) -> Any:
    """`value` (msgpack, LangGraph's ext records unpacked) with every AI message's tool_calls
    replaced, and every tool message's tool_call_id given the same wrong shape."""
    if isinstance(value, Raw):
        fields = _raw(value.data)
        if isinstance(fields, list) and len(fields) >= 3 and isinstance(fields[2], dict):
            if fields[1] == "AIMessage":
                calls = tool_calls
                if tool_calls is BAD_TOOL_CALLS["deep_args"]:
                    calls = [{**tool_calls[0], "args": {"x": _deep(200)}}]
                fields[2] = {**fields[2], "tool_calls": calls}
            elif fields[1] == "ToolMessage":
                fields[2] = {**fields[2], "tool_call_id": tool_calls
                             if not isinstance(tool_calls, list) else [1, 2]}
        return ormsgpack.Ext(value.code, ormsgpack.packb(_reshape(fields, tool_calls)))
    if isinstance(value, list):
        return [_reshape(v, tool_calls) for v in value]
    if isinstance(value, dict):
        return {k: _reshape(v, tool_calls) for k, v in value.items()}
    return value


def reshaped_blob(blob: bytes, tool_calls: Any) -> bytes:
    return ormsgpack.packb(_reshape(_raw(blob), tool_calls))


def _messages_named(result: LoadResult) -> str:
    return " ".join(w.detail for w in result.warnings)


@pytest.mark.parametrize("shape", sorted(BAD_TOOL_CALLS))
def test_sqlite_messages_of_the_wrong_shape_are_warnings(tmp_path: Path, shape: str) -> None:
    """LangGraph rebuilds a message from whatever its blob says (no validation): tool_calls
    that are not a list of objects, ids that are not text, arguments 200 levels deep. In
    checkpoints and in writes: each is a warning for its message, the rest is read."""
    path = _copy(tmp_path)
    with sqlite3.connect(path) as db:
        for table, column in (("checkpoints", "checkpoint"), ("writes", "value")):
            rows = db.execute(f"SELECT rowid, {column} FROM {table} WHERE type = 'msgpack'")
            for rowid, blob in rows.fetchall():
                db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?",
                           (reshaped_blob(blob, BAD_TOOL_CALLS[shape]), rowid))
    result = check("checkpoints", _load(path), source=str(path))
    assert isinstance(result, LoadResult), result
    said = _messages_named(result)
    if shape == "deep_args":
        assert "arguments nested deeper than 128 levels" in said
        assert "call_deep" in set(result.rows["tool_call_id"].dropna())
    elif shape != "null":
        assert "not a list" in said or "not an object" in said or "not text" in said, said


@pytest.mark.parametrize("levels", [130, 600])
def test_a_deep_tool_result_is_read_without_its_content(tmp_path: Path, levels: int) -> None:
    """A tool message kept as a plain dict (its class not rebuilt), its content nested deeper
    than any result's (ormsgpack writes at most 255 levels: spliced in as bytes)."""
    marker = "\x00DEEP\x00"
    message = {"type": "tool", "tool_call_id": "call_deep", "content": marker}
    blob = ormsgpack.packb([message]).replace(ormsgpack.packb(marker),
                                              b"\x91" * levels + b"\x90")
    path = _copy(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE writes SET value = ? WHERE rowid = (SELECT min(rowid) FROM writes "
                   "WHERE type = 'msgpack')", (blob,))
    result = check("checkpoints", _load(path), source=str(path))
    assert isinstance(result, LoadResult)
    assert "tool result call_deep: content nested deeper than 128 levels" in \
        _messages_named(result)


def test_too_big_and_too_many_container_blobs_are_skipped(tmp_path: Path) -> None:
    """A blob past 32 MiB, and one of 2 million empty lists (a few MiB that would decode to
    more than 100 MiB of objects), each a warning naming its row; the rest is read."""
    path = _copy(tmp_path)
    many = b"\xdd" + (2_000_000).to_bytes(4, "big") + b"\x90" * 2_000_000
    big = b"\xc6" + (33 * 2**20).to_bytes(4, "big") + bytes(33 * 2**20)
    with sqlite3.connect(path) as db:
        (first, second) = [r[0] for r in db.execute(
            "SELECT rowid FROM writes WHERE type = 'msgpack' ORDER BY rowid LIMIT 2")]
        db.execute("UPDATE writes SET value = ? WHERE rowid = ?", (many, first))
        db.execute("UPDATE writes SET value = ? WHERE rowid = ?", (big, second))
    result = check("checkpoints", _load(path), source=str(path))
    assert isinstance(result, LoadResult) and len(result.rows)
    said = _messages_named(result)
    assert "more than 1,000,000 lists and maps; skipped" in said
    assert "blob is 33 MiB, more than the 32 MiB twice decodes; skipped" in said


@pytest.mark.parametrize("wal", ["dev_zero", "sparse", "fifo", "dangling"])
def test_a_wal_that_is_no_regular_file_within_the_cap_is_not_copied(
        tmp_path: Path, wal: str) -> None:
    path = _copy(tmp_path)
    beside = path.with_name(path.name + "-wal")
    if wal == "dev_zero":
        beside.symlink_to("/dev/zero")
    elif wal == "sparse":
        with open(beside, "wb") as out:
            out.truncate(20 * 2**30)
    elif wal == "fifo":
        os.mkfifo(beside)
    else:
        beside.symlink_to(tmp_path / "nowhere")
    result = check("checkpoints", _load(path), source=str(path))
    assert isinstance(result, LoadResult) and len(result.rows)
    assert any("its -wal file" in w.detail and "read without it" in w.detail
               for w in result.warnings)
    temp = Path(tempfile.gettempdir())
    assert not list(temp.glob("twice-sqlite-*"))  # nothing copied was left behind


_PG_ROW_DAMAGE = {
    "metadata_past_a_double": "UPDATE checkpoints SET metadata = '{\"step\": 1e400}'",
    "metadata_2000_deep": "UPDATE checkpoints SET metadata = ('{\"x\": ' || repeat('[', 2000)"
                          " || repeat(']', 2000) || '}')::jsonb",
    "versions_200_deep": "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, "
                         "'{channel_versions}', (repeat('[', 200) || repeat(']', 200))::jsonb)",
}


@pytest.mark.parametrize("damage", sorted(_PG_ROW_DAMAGE))
def test_postgres_a_bad_jsonb_value_is_a_warning_for_its_row(pg_source: str,
                                                             damage: str) -> None:
    with _damaged_copy(pg_source, damage) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_PG_ROW_DAMAGE[damage] + " WHERE checkpoint_id = "  # type: ignore
                         "(SELECT min(checkpoint_id) FROM checkpoints)")
        result = check("checkpoints_postgres", lambda: checkpoints.load(dsn))
    assert isinstance(result, LoadResult) and len(result.rows), result
    assert sum("is not readable JSON" in w.detail for w in result.warnings) == 1


@pytest.mark.parametrize("shape", sorted(BAD_TOOL_CALLS))
def test_postgres_messages_of_the_wrong_shape_are_warnings(pg_source: str, shape: str) -> None:
    with _damaged_copy(pg_source, f"shape_{shape}") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table in ("checkpoint_blobs", "checkpoint_writes"):
                rows = conn.execute(f"SELECT ctid::text, blob FROM {table} "  # type: ignore
                                    "WHERE type = 'msgpack'").fetchall()
                for ctid, blob in rows:
                    conn.execute(f"UPDATE {table} SET blob = %s WHERE ctid = %s::tid",  # type: ignore
                                 (reshaped_blob(blob, BAD_TOOL_CALLS[shape]), ctid))
        result = check("checkpoints_postgres", lambda: checkpoints.load(dsn))
    assert isinstance(result, LoadResult), result
    if shape != "null":
        assert result.warnings


@contextmanager
def _damaged_copy(pg_source: str, name: str) -> Iterator[str]:
    base, _, good = pg_source.rpartition("/")
    copy = f"fuzz_{name}".lower()
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{copy}"')  # type: ignore[arg-type]
        admin.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{good}"')  # type: ignore[arg-type]
    try:
        yield f"{base}/{copy}"
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')  # type: ignore
