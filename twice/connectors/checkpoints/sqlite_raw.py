"""The fast path of reading a SqliteSaver file: blobs read by `rawpack`, one thread at a time.

`connector.load` tries it first for a whole file (no thread or time window). It streams the
checkpoints in the primary key's order, one thread at a time (nothing but that thread's blobs
in memory), and reads them with `rawpack` into the same parser the LangGraph path uses. The
rows and warnings must be exactly the LangGraph path's, so it returns None (and the caller reads
the file with LangGraph's serializer, which says what is wrong record by record) whenever a
record is one it does not read exactly (`rawpack.Decline`), or one the other path warns about
while reading (a blob that is not msgpack, too big or corrupt, metadata that is not JSON), or
the table's order is not the text order of the thread ids (text that is not UTF-8, ids that are
not text, a collation of its own). The reason of the last call is kept in `last_decline`
(for tests and for a look when a big file reads slowly).
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from twice.connectors.base import LoadResult, SourceWarning, Warnings
from twice.connectors.checkpoints.parse import Parser
from twice.connectors.checkpoints.rawpack import Decline, RawBlobs, RawMessages
from twice.connectors.checkpoints.sqlite import (
    _check_file,
    _check_tables,
    open_evidence,
)
from twice.connectors.checkpoints.times import Window

_ROWID_NAMES = {"rowid", "_rowid_", "oid"}
# the primary key's order (its index: no sort), rowid last: the scan order of ties
_CHECKPOINTS = ("SELECT rowid, thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, "
                "metadata FROM checkpoints ORDER BY thread_id, checkpoint_ns, checkpoint_id, "
                "rowid")
# what the LangGraph path reads, in its order (a table scan), sorted here as it sorts them
_WRITES = ("SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value "
           "FROM writes WHERE type IS NOT NULL AND type NOT IN ('null', 'empty')")
_ID_ROWID = operator.itemgetter(3, 0)

last_decline: str | None = None


def load(path: Path, window: Window, source: str) -> LoadResult | None:
    """The rows of a SqliteSaver file, or None when the LangGraph path must read it."""
    global last_decline
    last_decline = None
    if not window.everything:
        last_decline = "a thread or time window (read with the tables' own queries)"
        return None
    warnings: list[SourceWarning] = Warnings()
    _check_file(path)
    try:
        with open_evidence(path, warnings) as conn:
            conn.text_factory = str  # text that is not UTF-8 fails: the other path reads it
            has_writes = _check_tables(conn, source, warnings)
            columns = {r[1] for r in conn.execute("PRAGMA table_info(checkpoints)")}
            if columns & _ROWID_NAMES:
                raise Decline("a column named like the rowid")
            parser = Parser(source, window, Warnings(), RawMessages())
            with RawBlobs(source, warnings, per_thread=True) as decoder:
                _checkpoints(conn, decoder, parser)
                if has_writes:
                    _writes(conn, decoder, parser)
    except Decline as exc:
        last_decline = str(exc)
        return None
    except (sqlite3.Error, UnicodeDecodeError) as exc:  # the other path says what it is
        last_decline = f"SQLite: {exc}"
        return None
    result = parser.result()
    warnings.extend(result.warnings)
    return LoadResult(source=result.source, rows=result.rows, warnings=warnings)


def _checkpoints(conn: sqlite3.Connection, decoder: RawBlobs, parser: Parser) -> None:
    thread: Any = None
    rows: list[tuple[Any, ...]] = []
    for row in conn.execute(_CHECKPOINTS):
        if row[1] != thread:
            _thread(rows, decoder, parser)
            if type(row[1]) is not str or thread is not None and not row[1] > thread:
                raise Decline("thread ids that are not text in the table's order")
            thread, rows = row[1], []
        if type(row[3]) is not str:
            raise Decline("checkpoint ids that are not text")
        rows.append(row)
    _thread(rows, decoder, parser)


def _thread(rows: list[tuple[Any, ...]], decoder: RawBlobs, parser: Parser) -> None:
    """One thread's checkpoints, in the order the LangGraph path sorts them: by id as text,
    ties (namespaces) in the table's order."""
    rows.sort(key=_ID_ROWID)
    decode, checkpoint = decoder.decode, parser.checkpoint
    for _, thread_id, ns, checkpoint_id, type_, blob, raw_meta in rows:
        value = decode(type_, blob, "", thread_id)
        ts: Any = None
        values: Mapping[Any, Any] = {}
        if type(value) is dict or isinstance(value, Mapping):
            ts = value.get("ts")
            channel_values = value.get("channel_values")
            if type(channel_values) is dict or isinstance(channel_values, Mapping):
                values = channel_values
        checkpoint(thread_id, ns if type(ns) is str else str(ns or ""), checkpoint_id, ts,
                   _metadata(raw_meta), values)


def _metadata(raw: Any) -> Any:
    if raw is None:
        return {}
    try:
        meta = orjson.loads(raw)
    except (orjson.JSONDecodeError, TypeError):
        raise Decline("metadata that is not JSON") from None
    return meta if isinstance(meta, dict) else {}


def _writes(conn: sqlite3.Connection, decoder: RawBlobs, parser: Parser) -> None:
    records = [(str(t), str(ns or ""), str(cid), str(task), type_, blob)
               for t, ns, cid, task, _idx, _channel, type_, blob in conn.execute(_WRITES)]
    records.sort(key=lambda w: (w[0], w[2], w[3]))
    for thread_id, ns, checkpoint_id, _task, type_, blob in records:
        parser.write(thread_id, ns, checkpoint_id, decoder.decode(type_, blob, "", thread_id))
