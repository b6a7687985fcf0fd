"""The raw msgpack path for SqliteSaver files gives exactly the LangGraph path's rows and
warnings, or declines (None) and leaves the file to the LangGraph path.

The files are written by LangGraph's own SqliteSaver (the samples, `write_incident`); the
mutated ones keep LangGraph's encoding of every record and change the fields of one message
(hypothesis), so whatever LangChain's classes would make of those fields is compared with what
the raw path reads."""

from __future__ import annotations

import datetime as dt
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ormsgpack
import pandas as pd
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.connectors.fuzz_inputs import json_values, mutate
from tests.connectors.fuzz_summary import fuzz_settings
from tests.connectors.test_checkpoints import write_incident, write_sqlite
from twice.connectors import checkpoints
from twice.connectors.base import LoadResult, Warnings, redact
from twice.connectors.checkpoints import sqlite_raw
from twice.connectors.checkpoints.parse import parse_checkpoints
from twice.connectors.checkpoints.sqlite import read_sqlite
from twice.connectors.checkpoints.times import (
    Window,
    parse_ts,
    ts_column_ns,
    uuid6_column_ns,
    uuid6_time_ns,
)

SAMPLES = sorted((Path(__file__).parents[2] / "sample_data").glob("*/checkpoints.sqlite"))
SAMPLE = Path(__file__).parents[2] / "sample_data" / "sdk_retry" / "checkpoints.sqlite"
AI = ["langchain_core.messages.ai", "AIMessage"]
TOOL = ["langchain_core.messages.tool", "ToolMessage"]
OPTION = ormsgpack.OPT_NON_STR_KEYS | ormsgpack.OPT_REPLACE_SURROGATES  # as LangGraph packs
UNPACK = ormsgpack.OPT_NON_STR_KEYS


def langgraph_path(path: Path) -> LoadResult:
    """The file read with LangGraph's serializer and LangChain's classes."""
    warnings = Warnings()
    found, writes = read_sqlite(path, Window(), warnings)
    return parse_checkpoints(found, writes, str(path), warnings=warnings)


def raw_path(path: Path) -> LoadResult | None:
    return sqlite_raw.load(path, Window(), str(path))


def same(fast: LoadResult, slow: LoadResult) -> None:
    assert list(fast.rows.columns) == list(slow.rows.columns)
    for col in slow.rows.columns:
        assert str(fast.rows[col].dtype) == str(slow.rows[col].dtype), col
    pd.testing.assert_frame_equal(fast.rows, slow.rows, check_exact=True)
    assert fast.warnings == slow.warnings


# --- a blob's records, kept as LangGraph encoded them, to change one message ----------------

def _keep(code: int, data: bytes) -> tuple[str, int, bytes]:
    return ("ext", code, data)


def _packable(value: Any) -> Any:
    if isinstance(value, tuple) and value[:1] == ("ext",):
        return ormsgpack.Ext(value[1], value[2])
    if isinstance(value, dict):
        return {k: _packable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_packable(v) for v in value]
    return value


def _replace(value: Any, old: bytes, new: bytes) -> Any:
    if isinstance(value, tuple) and value[:1] == ("ext",):
        return (*value[:2], new) if value[2] == old else value
    if isinstance(value, dict):
        return {k: _replace(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, old, new) for v in value]
    return value


def _blobs(db: sqlite3.Connection) -> list[tuple[str, int, Any]]:
    rows = [("checkpoints", rowid, ormsgpack.unpackb(blob, ext_hook=_keep, option=UNPACK))
            for rowid, blob in db.execute("SELECT rowid, checkpoint FROM checkpoints "
                                          "WHERE type = 'msgpack' ORDER BY rowid")]
    rows += [("writes", rowid, ormsgpack.unpackb(blob, ext_hook=_keep, option=UNPACK))
             for rowid, blob in db.execute("SELECT rowid, value FROM writes "
                                           "WHERE type = 'msgpack' ORDER BY rowid")]
    return rows


def _messages(rows: list[tuple[str, int, Any]]) -> list[bytes]:
    """Each distinct message record's bytes, in the order first met."""
    found: dict[bytes, None] = {}

    def walk(value: Any) -> None:
        if isinstance(value, tuple) and value[:1] == ("ext",) and value[1] == 5:
            found.setdefault(value[2])
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for _, _, value in rows:
        walk(value)
    return list(found)


def change_message(path: Path, pick: int, change: Callable[[list[Any]], Any],
                   everywhere: bool = True) -> None:
    """Rewrite one message record ([module, class, fields, method] -> `change`'s, or bytes),
    in every blob that holds it or only in the first."""
    with sqlite3.connect(path) as db:
        old = _messages(_blobs(db))[pick]
    record = change(ormsgpack.unpackb(old, option=UNPACK))
    replace_record(path, old, record if isinstance(record, bytes)
                   else ormsgpack.packb(record, option=OPTION), everywhere)


def replace_record(path: Path, old: bytes, new: bytes, everywhere: bool = True) -> None:
    with sqlite3.connect(path) as db:
        for table, rowid, value in _blobs(db):
            changed = _replace(value, old, new)
            if changed == value:
                continue
            column = "checkpoint" if table == "checkpoints" else "value"
            db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?",
                       (ormsgpack.packb(_packable(changed), option=OPTION), rowid))
            if not everywhere:
                break


def _copy(tmp_path: Path, source: Path = SAMPLE) -> Path:
    path = tmp_path / "cp.sqlite"
    shutil.copyfile(source, path)
    return path


def assert_declines(path: Path, reason: str) -> None:
    assert raw_path(path) is None
    assert sqlite_raw.last_decline is not None and reason in sqlite_raw.last_decline, \
        sqlite_raw.last_decline
    same(checkpoints.load(path), langgraph_path(path))  # what the connector answers


# --- files LangGraph wrote ------------------------------------------------------------------

@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.parent.name)
def test_the_samples_are_read_raw_exactly_as_by_langgraph(sample: Path) -> None:
    fast = raw_path(sample)
    assert fast is not None, sqlite_raw.last_decline
    same(fast, langgraph_path(sample))
    assert len(fast.rows) and fast.rows["kind"].eq("tool_call").any()


def test_an_incident_with_an_error_result_and_a_second_call_is_read_raw(tmp_path: Path) -> None:
    path = write_sqlite(tmp_path / "agent.sqlite", write_incident)
    fast = raw_path(path)
    assert fast is not None, sqlite_raw.last_decline
    same(fast, langgraph_path(path))
    assert set(fast.rows["outcome"].dropna()) == {"error", "ok"}


def test_the_raw_path_imports_no_langchain(tmp_path: Path) -> None:
    """Importing LangChain is a third of a second: a whole file is read without it."""
    code = ("import sys; from twice.connectors import checkpoints; "
            f"r = checkpoints.load({str(SAMPLE)!r}); assert len(r.rows); "
            "print(sorted(m for m in sys.modules if m.startswith('langchain')"
            " or m.endswith('jsonplus')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_class_off_the_allow_list_is_not_built_and_is_named_as_before(tmp_path: Path) -> None:
    """A message record naming `builtins.open` (with a marker path) keeps its raw fields and
    is reported, as LangGraph's strict mode does; nothing is called."""
    marker = tmp_path / "code-ran"
    path = _copy(tmp_path)
    change_message(path, 1, lambda r: ["builtins", "open",
                                       {"file": str(marker), "mode": "w"}, r[3]])
    fast = raw_path(path)
    assert fast is not None, sqlite_raw.last_decline
    same(fast, langgraph_path(path))
    assert any("builtins.open" in w.detail for w in fast.warnings)
    assert not marker.exists()


def test_a_message_dict_with_tool_calls_off_the_allow_list_gives_its_calls(
        tmp_path: Path) -> None:
    """A message class LangGraph does not build keeps its fields: a dict with `tool_calls`,
    whose calls are read as LangChain's dict form."""
    path = _copy(tmp_path)
    change_message(path, 1, lambda r: ["my_agent.messages", "Reply", r[2], r[3]])
    fast = raw_path(path)
    assert fast is not None, sqlite_raw.last_decline
    same(fast, langgraph_path(path))


# --- mutated messages ------------------------------------------------------------------------

def _ext(code: int, record: list[Any]) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(record, option=OPTION))


_odd = (st.binary(max_size=4) | st.sampled_from([
    [], {}, "", None, 7, 7.5, True, "toolu_1",
    [{"name": "charge", "args": {"amount": 1}, "id": "c1"}],
    [{"name": "charge", "args": {"amount": 1}, "id": "c1", "type": "tool_call", "extras": {}}],
    [{"name": "charge", "args": {b"amount": 1}, "id": "c1"}],
    [{"name": b"charge", "args": {}, "id": "c1"}],
    [{"name": "charge", "args": {}, "id": b"c1"}],
    [{"name": "charge", "args": {}, "id": 5}],
    [{"name": "charge", "args": "{}", "id": "c1"}],
    [{"id": "c2", "function": {"name": "charge", "arguments": '{"amount": 2}'}}],
    [{"name": "charge", "args": {}, "id": "c1", "index": 0}],
    {"tool_calls": [{"id": "c3", "type": "function",
                     "function": {"name": "charge", "arguments": "{}"}}]},
    [{"type": "text", "text": "hi"}, "there"], [1, "x"], {"text": "x"},
    "success", "error", "timeout",
    _ext(5, [*AI, {"content": "", "tool_calls": []}, "model_validate_json"]),
    _ext(3, ["datetime", "datetime", "2025-03-04T10:00:00+00:00", "fromisoformat"]),
    _ext(0, ["uuid", "UUID", "12345678123456781234567812345678"]),
    _ext(7, [1, 2]),
])) | json_values
_fields = ["tool_calls", "tool_call_id", "content", "additional_kwargs", "name", "status",
           "invalid_tool_calls", "usage_metadata", "type", "id", "content_blocks",
           "tool_call_chunks", "artifact", "response_metadata"]
_classes = st.sampled_from([
    AI, TOOL, ["langchain_core.messages.ai", "AIMessageChunk"],
    ["langchain_core.messages.human", "HumanMessage"],
    ["langchain_core.messages.system", "SystemMessage"],
    ["langchain_core.messages.tool", "ToolMessageChunk"], ["my_agent", "Msg"]])


with sqlite3.connect(SAMPLE) as _db:
    SAMPLE_MESSAGES = _messages(_blobs(_db))


def _in_64_bits(value: Any) -> Any:
    """msgpack holds no integer past 64 bits: such a value becomes its text."""
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return str(value)
    if isinstance(value, dict):
        return {_in_64_bits(k): _in_64_bits(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_in_64_bits(v) for v in value]
    return value


@st.composite
def changed_records(draw: st.DrawFn, messages: list[bytes] = SAMPLE_MESSAGES
                    ) -> tuple[bytes, bytes]:
    """One message record (of the sample's) and a change of it: its fields mutated, some set
    to odd values, maybe its class changed, or its bytes cut."""
    old = draw(st.sampled_from(messages))
    record = ormsgpack.unpackb(old, option=UNPACK)
    fields = draw(mutate(record[2])) if draw(st.booleans()) else record[2]
    if isinstance(fields, dict):
        for key, value in draw(st.lists(st.tuples(st.sampled_from(_fields), _odd),
                                        max_size=3)):
            fields[key] = value
    new = ormsgpack.packb(_in_64_bits([*(draw(st.none() | _classes) or record[:2]), fields,
                                       *record[3:]]), option=OPTION)
    if draw(st.integers(0, 9)) == 0:
        new = new[:draw(st.integers(0, len(new) - 1))]
    return old, new


@fuzz_settings(60)
@given(change=changed_records(), everywhere=st.booleans())
def test_mutated_messages_are_read_raw_as_by_langgraph_or_declined(
        tmp_path_factory: pytest.TempPathFactory, change: tuple[bytes, bytes],
        everywhere: bool) -> None:
    path = _copy(tmp_path_factory.mktemp("mutated"))
    replace_record(path, *change, everywhere)
    slow = langgraph_path(path)
    fast = raw_path(path)
    event("raw path" if fast is not None else "declined")
    if fast is not None:
        same(fast, slow)
    same(checkpoints.load(path), slow)


@pytest.mark.parametrize("change", [
    lambda r: [*AI, {**r[2], "tool_calls": [{"name": "charge", "args": {"amount": 1},
                                             "id": 5, "extras": {"x": 1}}]}, r[3]],
    lambda r: [*AI, {**r[2], "tool_calls": "not a list"}, r[3]],
    lambda r: [*AI, {**r[2], "tool_calls": None, "name": b"bytes elsewhere"}, r[3]],
    lambda r: [*TOOL, {**r[2], "tool_call_id": [1, 2], "status": "error"}, r[3]],
    lambda r: [*TOOL, {**r[2], "tool_call_id": "t9", "content": ["a", {"text": "b"}]}, r[3]],
    lambda r: [*TOOL, {k: v for k, v in r[2].items() if k != "status"}, r[3]],
], ids=["int-id", "calls-not-a-list", "bytes-outside-calls", "id-a-list", "content-blocks",
        "no-status"])
def test_odd_messages_that_langchain_keeps_as_stored_are_read_raw(
        tmp_path: Path, change: Callable[[list[Any]], Any]) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as db:
        messages = _messages(_blobs(db))
    kinds = [ormsgpack.unpackb(m, option=UNPACK)[1] for m in messages]
    target = "AIMessage" if change(["", "", {}, ""])[1] == "AIMessage" else "ToolMessage"
    change_message(path, kinds.index(target), change)
    fast = raw_path(path)
    assert fast is not None, sqlite_raw.last_decline
    same(fast, langgraph_path(path))


# --- each reason to decline ------------------------------------------------------------------

def _ai(fields: dict[str, Any]) -> Callable[[list[Any]], Any]:
    return lambda r: [*AI, {**r[2], **fields}, r[3]]


def _tool(fields: dict[str, Any]) -> Callable[[list[Any]], Any]:
    return lambda r: [*TOOL, {**r[2], "tool_call_id": "toolu_9", **fields}, r[3]]


@pytest.mark.parametrize(("change", "reason"), [
    (_ai({"tool_calls": [], "additional_kwargs": {"tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}),
     "additional_kwargs"),
    (_ai({"tool_calls": [{"name": "f", "args": {}, "id": b"c1"}]}), "hold bytes"),
    (_ai({"content_blocks": [{"type": "text", "text": "x"}]}), "content blocks"),
    (_ai({"when": _ext(3, ["datetime", "datetime", "2025-03-04T10:00:00", "fromisoformat"])}),
     "AIMessage holding ext records"),
    (lambda r: ["langchain_core.messages.ai", "AIMessageChunk", r[2], r[3]], "AIMessageChunk"),
    (lambda r: [*AI, {1: "x", **r[2]}, r[3]], "not stored as a pydantic model's fields"),
    (_tool({"tool_call_id": 12}), "tool_call_id LangChain would convert"),
    (_tool({"content": {"status": "ok"}}), "content LangChain would convert"),
    (_tool({"content": None}), "content LangChain would convert"),
    (lambda r: ["langchain_core.messages.human", "HumanMessage",
                {**r[2], "tool_calls": []}, r[3]], "with tool call fields"),
    (lambda r: ["my_agent", "Msg", {"inner": _ext(5, r)}, r[3]], "holds ext records"),
    (lambda r: [*AI], "not (module, name, data)"),
    (lambda r: ["datetime", "datetime", {"when": _ext(5, r)}, r[3]], "holding ext records"),
    (lambda r: ormsgpack.packb(r, option=OPTION)[:-3], "would not decode"),
], ids=["openai-additional-kwargs", "bytes-id", "content-blocks", "ext-inside", "chunk",
        "key-not-text", "number-id", "content-object", "content-null", "human-with-calls",
        "blocked-holding-ext", "short-record", "built-holding-ext", "cut"])
def test_each_message_the_raw_path_cannot_read_exactly_is_declined(
        tmp_path: Path, change: Callable[[list[Any]], Any], reason: str) -> None:
    path = _copy(tmp_path)
    change_message(path, 1, change)
    assert_declines(path, reason)


def test_a_numpy_array_is_declined(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as db:
        rowid, blob = db.execute("SELECT rowid, checkpoint FROM checkpoints "
                                 "ORDER BY rowid LIMIT 1").fetchone()
        value = ormsgpack.unpackb(blob, ext_hook=_keep, option=UNPACK)
        value["channel_values"]["array"] = ("ext", 6, ormsgpack.packb(["<i8", [1], "C", b"1"]))
        db.execute("UPDATE checkpoints SET checkpoint = ? WHERE rowid = ?",
                   (ormsgpack.packb(_packable(value), option=OPTION), rowid))
    assert_declines(path, "numpy array")


def test_a_message_dict_holding_records_is_declined(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as db:
        rowid, blob = db.execute("SELECT rowid, checkpoint FROM checkpoints "
                                 "ORDER BY rowid LIMIT 1").fetchone()
        value = ormsgpack.unpackb(blob, ext_hook=_keep, option=UNPACK)
        value["channel_values"]["messages"] = [{"type": "ai", "tool_calls": [
            ("ext", 5, ormsgpack.packb([*AI, {"content": ""}, "m"]))]}]
        db.execute("UPDATE checkpoints SET checkpoint = ? WHERE rowid = ?",
                   (ormsgpack.packb(_packable(value), option=OPTION), rowid))
    assert_declines(path, "dict form holding ext records")


def _sql(statement: str, *params: Any) -> Callable[[sqlite3.Connection], object]:
    return lambda db: db.execute(statement, params)


@pytest.mark.parametrize(("edit", "reason"), [
    (_sql("UPDATE checkpoints SET type = 'pickle' WHERE rowid = 3"), "of type 'pickle'"),
    (_sql("UPDATE checkpoints SET type = 'json', checkpoint = ? WHERE rowid = 3",
          b'{"ts": "2025-03-04T10:00:00+00:00"}'), "of type 'json'"),
    (_sql("UPDATE checkpoints SET checkpoint = 'text' WHERE rowid = 3"), "(str)"),
    (_sql("UPDATE checkpoints SET checkpoint = ? WHERE rowid = 3",
          b"\xdd\x00\x0f\x42\x41" + b"\x90" * 1_000_001), "past the size caps"),
    (_sql("UPDATE checkpoints SET metadata = '{not json' WHERE rowid = 3"),
     "metadata that is not JSON"),
    (_sql("UPDATE checkpoints SET thread_id = X'742d31' WHERE rowid = 3"),
     "thread ids that are not"),
    (_sql("UPDATE checkpoints SET checkpoint_id = X'3432' WHERE rowid = 3"), "checkpoint ids"),
    (_sql("UPDATE checkpoints SET thread_id = CAST(? AS TEXT) WHERE rowid = 3", b"t-\xff"),
     "SQLite"),
    (_sql("UPDATE writes SET type = 'pickle'"), "of type 'pickle'"),
    (_sql('ALTER TABLE checkpoints ADD COLUMN "oid" TEXT'), "named like the rowid"),
], ids=["pickle", "json", "text-blob", "too-many-containers", "metadata", "bytes-thread",
        "bytes-id", "not-utf8", "pickle-write", "rowid-column"])
def test_each_table_the_raw_path_cannot_read_exactly_is_declined(
        tmp_path: Path, edit: Callable[[sqlite3.Connection], object], reason: str) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as db:
        edit(db)
    assert_declines(path, reason)


def test_a_window_is_left_to_the_langgraph_path() -> None:
    window = checkpoints.make_window(None, "2020-01-01", None)
    assert sqlite_raw.load(SAMPLE, window, str(SAMPLE)) is None
    assert "window" in (sqlite_raw.last_decline or "")


# --- whole columns of times ------------------------------------------------------------------

_ids = st.sampled_from(["1f1f1210-2f3d-6b4e-bffe-9f1eaa79dfb8",
                        "1eff80fb-cd1b-6744-8000-552df54156ac"])


@fuzz_settings(200)
@given(ids=st.lists(
    _ids | _ids.map(str.upper) | _ids.map(lambda i: i[:14] + "4" + i[15:])
    | _ids.map(lambda i: i[:19] + "c" + i[20:]) | _ids.map(lambda i: "{" + i + "}")
    | _ids.map(lambda i: i + "\x00") | _ids.map(lambda i: i.replace("-", ""))
    | st.sampled_from(["ffffffff-ffff-6fff-bfff-ffffffffffff",
                       "00000000-0000-6000-8000-000000000000", "é" * 36, ""])
    | st.text(max_size=40), max_size=6))
def test_uuid6_times_of_a_column_are_each_ids_time(ids: list[str]) -> None:
    times, valid = uuid6_column_ns(ids)
    assert [int(t) if v else None for t, v in zip(times, valid, strict=True)] == \
        [uuid6_time_ns(i) for i in ids]


@fuzz_settings(200)
@given(st.lists(st.datetimes(min_value=dt.datetime(2000, 1, 1),
                             max_value=dt.datetime(2099, 12, 28)), min_size=1, max_size=5))
def test_ts_of_a_column_are_each_ts(times: list[dt.datetime]) -> None:
    texts = [t.replace(tzinfo=dt.UTC, day=min(t.day, 28)).isoformat(timespec="microseconds")
             for t in times]
    assert ts_column_ns(texts).tolist() == [parse_ts(t) for t in texts]


# --- PostgresSaver: the same decoding over its blob tables -----------------------------------

def postgres_paths(dsn: str, window: Window) -> tuple[LoadResult, LoadResult]:
    """(raw, LangGraph's) readings of a PostgresSaver database."""
    from twice.connectors.checkpoints.postgres import read_postgres
    from twice.connectors.checkpoints.rawpack import RawMessages

    results = []
    for raw in (True, False):
        warnings = Warnings()
        found, writes = read_postgres(dsn, window, warnings, statement_timeout_s=60, raw=raw)
        results.append(parse_checkpoints(found, writes, dsn, window=window, warnings=warnings,
                                         reader=RawMessages() if raw else None))
    return results[0], results[1]


def test_a_postgres_saver_is_read_raw_exactly_as_by_langgraph(fresh_postgres_dsn: str) -> None:
    from tests.connectors.test_checkpoints import T1, write_postgres

    write_postgres(fresh_postgres_dsn, write_incident)
    for window in (Window(), checkpoints.make_window(["t-renewal-1"], None, None),
                   checkpoints.make_window(None, T1, None)):
        fast, slow = postgres_paths(fresh_postgres_dsn, window)
        same(fast, slow)
        assert len(fast.rows)


def test_a_postgres_blob_the_raw_path_cannot_read_is_left_to_langgraph(
        fresh_postgres_dsn: str) -> None:
    from psycopg import connect

    from tests.connectors.test_checkpoints import write_postgres
    from twice.connectors.checkpoints.rawpack import Decline

    write_postgres(fresh_postgres_dsn, write_incident)
    with connect(fresh_postgres_dsn, autocommit=True) as db:
        db.execute("UPDATE checkpoint_blobs SET blob = %s WHERE channel = 'messages' AND "
                   "version = (SELECT min(version) FROM checkpoint_blobs "
                   "WHERE channel = 'messages')",
                   (ormsgpack.packb([_ext(5, [*AI, {"content": "", "tool_calls": [],
                                                    "content_blocks": []}, "m"])]),))
    with pytest.raises(Decline, match="content blocks"):
        postgres_paths(fresh_postgres_dsn, Window())
    same(checkpoints.load(fresh_postgres_dsn), postgres_langgraph_path(fresh_postgres_dsn))


def postgres_langgraph_path(dsn: str) -> LoadResult:
    """What the connector answered before the raw path: LangGraph's serializer."""
    from twice.connectors.checkpoints.postgres import read_postgres

    warnings = Warnings()
    found, writes = read_postgres(dsn, Window(), warnings, statement_timeout_s=60)
    return parse_checkpoints(found, writes, redact(dsn), warnings=warnings)


def test_a_table_of_rows_turned_into_columns_in_chunks_gives_them_back_in_order() -> None:
    """The parser's rows go to Arrow every `chunk` rows; text Arrow cannot hold (a lone
    surrogate) stays Python's, for `from_columns` to convert as before."""
    import numpy as np
    import pyarrow as pa

    from twice.connectors.checkpoints.parse import Table

    rows = [(f"t-{i}", i if i % 3 else None, "\ud800" if i == 5 else f"x{i}", i * 10)
            for i in range(23)]
    table = Table([pa.large_string(), pa.int64(), pa.large_string(), None],
                  {3: lambda v: np.array(v, dtype=np.int64)}, chunk=4)
    for row in rows:
        table.append(row)
    assert len(table) == 23
    assert [table.row(i) for i in range(23)] == rows
    assert table.keys() == [r[:3] for r in rows]
    threads, numbers, texts, tens = table.columns()
    assert isinstance(threads, pa.Array) and threads.to_pylist() == [r[0] for r in rows]
    assert numbers.to_pylist() == [r[1] for r in rows]
    assert isinstance(texts, list) and texts == [r[2] for r in rows]
    assert tens.tolist() == [r[3] for r in rows]


@pytest.fixture(scope="module")
def postgres_incident(new_postgres_database: Callable[[], str]) -> str:
    from tests.connectors.test_checkpoints import write_postgres

    return write_postgres(new_postgres_database(), write_incident)


def _postgres_blobs(dsn: str) -> list[tuple[str, tuple[Any, ...], bytes]]:
    """(table, key, blob) of every msgpack blob of the database."""
    from psycopg import connect

    with connect(dsn) as db:
        rows = [("checkpoint_blobs", tuple(r[:4]), r[4]) for r in db.execute(
            "SELECT thread_id, checkpoint_ns, channel, version, blob FROM checkpoint_blobs "
            "WHERE type = 'msgpack' ORDER BY 1, 2, 3, 4")]
        rows += [("checkpoint_writes", tuple(r[:5]), r[5]) for r in db.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, blob "
            "FROM checkpoint_writes WHERE type = 'msgpack' ORDER BY 1, 2, 3, 4, 5")]
    return rows


def _put_postgres_blobs(dsn: str, rows: list[tuple[str, tuple[Any, ...], bytes]]) -> None:
    from psycopg import connect

    keys = {"checkpoint_blobs": "thread_id = %s AND checkpoint_ns = %s AND channel = %s "
                                "AND version = %s",
            "checkpoint_writes": "thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s "
                                 "AND task_id = %s AND idx = %s"}
    with connect(dsn, autocommit=True) as db:
        for table, key, blob in rows:
            db.execute(f"UPDATE {table} SET blob = %s WHERE {keys[table]}", (blob, *key))


@fuzz_settings(25)
@given(data=st.data(), everywhere=st.booleans())
def test_mutated_postgres_messages_are_read_raw_as_by_langgraph_or_declined(
        postgres_incident: str, data: st.DataObject, everywhere: bool) -> None:
    from twice.connectors.checkpoints.rawpack import Decline

    original = _postgres_blobs(postgres_incident)
    decoded = [ormsgpack.unpackb(blob, ext_hook=_keep, option=UNPACK) for _, _, blob in original]
    old, new = data.draw(changed_records(sorted(_messages([("", 0, v) for v in decoded]))))
    changed = []
    for (table, key, _), value in zip(original, decoded, strict=True):
        replaced = _replace(value, old, new)
        if replaced != value:
            changed.append((table, key, ormsgpack.packb(_packable(replaced), option=OPTION)))
            if not everywhere:
                break
    _put_postgres_blobs(postgres_incident, changed)
    try:
        try:
            fast, slow = postgres_paths(postgres_incident, Window())
        except Decline:
            event("declined")
        else:
            event("raw path")
            same(fast, slow)
        same(checkpoints.load(postgres_incident), postgres_langgraph_path(postgres_incident))
    finally:
        _put_postgres_blobs(postgres_incident, original)
