"""LangGraph checkpoints: the agent's own record of which tool calls it asked for and got back.

`load(target)` reads a SqliteSaver file or a PostgresSaver database (`postgresql://` DSN) and
emits, per source:
- `checkpoint`: one row per checkpoint (time, thread, step, metadata source, worker/host);
- `tool_call`: one row per tool call id, at the first checkpoint whose messages hold it;
- `tool_result`: one row per answered tool call id (ToolMessage), at the first checkpoint
  holding it, or at the checkpoint its pending write hangs off when no checkpoint holds it.

Rows 1-4 of the duplicate table re-execute one tool call id; row 5 is a new id with the same
arguments after a failed/timed-out result: both show up here as tool_call/tool_result rows.
The table readers live in `sqlite` / `postgres`; blob decoding with LangGraph's serializer in
`decode`, without it (the fast path for whole SqliteSaver files) in `rawpack` / `sqlite_raw`;
`parse_checkpoints` (`parse`) is the pure part.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from pathlib import Path

import pandas as pd

from twice.connectors.base import LoadResult, SourceWarning, Warnings, redact
from twice.connectors.checkpoints.parse import parse_checkpoints
from twice.connectors.checkpoints.times import Window
from twice.formats import utc

__all__ = ["is_dsn", "load", "make_window", "name", "parse_checkpoints", "sniff"]

name = "checkpoints"



def is_dsn(target: str | Path) -> bool:
    return isinstance(target, str) and target.lower().startswith(
        ("postgresql://", "postgres://"))


def sniff(path: Path, head: bytes) -> bool:
    """A SQLite file whose schema (on its first page) has SqliteSaver's `checkpoints` table."""
    return head.startswith(b"SQLite format 3\x00") and b"CREATE TABLE checkpoints" in head


def load(
    target: str | Path,
    thread_ids: Iterable[str] | str | None = None,
    since: datetime | pd.Timestamp | str | None = None,
    until: datetime | pd.Timestamp | str | None = None,
    *,
    statement_timeout_s: float = 60.0,
) -> LoadResult:
    """Read checkpoints from a SqliteSaver file or a PostgresSaver DSN.

    `thread_ids` and the `since`/`until` window (inclusive, UTC if naive) are pushed down into
    the queries (the window as a `checkpoint_id` range: ids are UUIDv6, time-ordered).
    """
    window = make_window(thread_ids, since, until)
    with _collector_paused():
        return _load(target, window, statement_timeout_s)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a source is read: reading makes hundreds of
    thousands of small objects that live until the rows are built, and the collector would walk
    all of them again and again (a fifth of the time at 100k checkpoints). Nothing read here
    makes a cycle; whatever else does is collected once it is back on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _load(target: str | Path, window: Window, statement_timeout_s: float) -> LoadResult:
    """The raw msgpack path first (`rawpack`: no LangChain object built), LangGraph's
    serializer when it declines. A whole SqliteSaver file streams one thread at a time
    (`sqlite_raw`); a database or a window reads the savers' tables as LangGraph's path does,
    blobs decoded raw."""
    from twice.connectors.checkpoints.rawpack import Decline, RawMessages

    if is_dsn(target):
        from twice.connectors.checkpoints.postgres import read_postgres

        source = redact(str(target))
        read = partial(read_postgres, str(target), window,
                       statement_timeout_s=statement_timeout_s)
    else:
        from twice.connectors.checkpoints import sqlite_raw
        from twice.connectors.checkpoints.sqlite import read_sqlite

        source = str(target)
        if window.everything:
            fast = sqlite_raw.load(Path(target), window, source)
            if fast is not None:
                return fast
        read = partial(read_sqlite, Path(target), window)
    if not window.everything or is_dsn(target):
        warnings: list[SourceWarning] = Warnings()
        try:
            checkpoints, writes = read(warnings, raw=True)
            return parse_checkpoints(checkpoints, writes, source, window=window,
                                     warnings=warnings, reader=RawMessages())
        except Decline:
            pass  # read again, with LangGraph's serializer
    warnings = Warnings()
    checkpoints, writes = read(warnings, raw=False)
    return parse_checkpoints(checkpoints, writes, source, window=window, warnings=warnings)


def make_window(
    thread_ids: Iterable[str] | str | None,
    since: datetime | pd.Timestamp | str | None,
    until: datetime | pd.Timestamp | str | None,
) -> Window:
    threads = None
    if thread_ids is not None:
        threads = (thread_ids,) if isinstance(thread_ids, str) else tuple(map(str, thread_ids))
    return Window(threads, _utc_ns(since), _utc_ns(until))


def _utc_ns(value: datetime | pd.Timestamp | str | None) -> int | None:
    return None if value is None else int(utc(value).value)
