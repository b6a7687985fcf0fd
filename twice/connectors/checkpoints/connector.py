"""LangGraph checkpoints: the agent's own record of which tool calls it asked for and got back.

`load(target)` reads a SqliteSaver file or a PostgresSaver database (`postgresql://` DSN) and
emits, per source:
- `checkpoint`: one row per checkpoint (time, thread, step, metadata source, worker/host);
- `tool_call`: one row per tool call id, at the first checkpoint whose messages hold it;
- `tool_result`: one row per answered tool call id (ToolMessage), at the first checkpoint
  holding it, or at the checkpoint its pending write hangs off when no checkpoint holds it.

Rows 1-4 of the duplicate table re-execute one tool call id; row 5 is a new id with the same
arguments after a failed/timed-out result: both show up here as tool_call/tool_result rows.
The table readers live in `checkpoints_sqlite` / `checkpoints_postgres`; blob decoding and
message handling in `checkpoints_decode`. `parse_checkpoints` is the pure part.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from twice.connectors.base import LoadResult, SourceWarning, Warnings, fits_int64, redact
from twice.connectors.checkpoints.decode import (
    CheckpointRecord,
    ToolCallFact,
    ToolResultFact,
    Window,
    WriteRecord,
    message_facts,
    messages_in,
    outcome_of,
    parse_ts,
    uuid6_time_ns,
)
from twice.formats import utc
from twice.timeline import Kind, canonical_json, fingerprint, make_timeline

name = "checkpoints"

_WORKER_KEYS = ("worker", "host", "hostname", "host.name")
_SUBJECT_KEYS = ("customer", "customer_id")
_TS_TOLERANCE_NS = 1_000_000_000  # ts and the id's own time are minted microseconds apart
DETAIL_CHARS = 300


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
    warnings: list[SourceWarning] = Warnings()
    if is_dsn(target):
        from twice.connectors.checkpoints.postgres import read_postgres

        source = redact(str(target))
        checkpoints, writes = read_postgres(
            str(target), window, warnings, statement_timeout_s=statement_timeout_s)
    else:
        from twice.connectors.checkpoints.sqlite import read_sqlite

        source = str(target)
        checkpoints, writes = read_sqlite(Path(target), window, warnings)
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


# --- the pure part -------------------------------------------------------------------------


def parse_checkpoints(
    checkpoints: Iterable[CheckpointRecord],
    writes: Iterable[WriteRecord],
    source: str,
    *,
    window: Window | None = None,
    warnings: list[SourceWarning] | None = None,
) -> LoadResult:
    """Timeline rows from checkpoint and pending-write records of one source."""
    window = window or Window()
    warns = Warnings(warnings or [])
    parser = _Parser(source, window, warns)
    for cp in sorted(checkpoints, key=lambda c: (c.thread_id, c.checkpoint_id)):
        parser.checkpoint(cp)
    for w in sorted(writes, key=lambda w: (w.thread_id, w.checkpoint_id, w.task_id)):
        parser.write(w)
    parser.finish()
    frame = make_timeline(parser.rows)
    frame = frame.sort_values("at", kind="stable", ignore_index=True)
    return LoadResult(source=name, rows=frame, warnings=warns)


class _Parser:
    def __init__(self, source: str, window: Window, warnings: list[SourceWarning]) -> None:
        self.source = source
        self.window = window
        self.warnings = warnings
        self.rows: list[dict[str, Any]] = []
        self.at_of: dict[tuple[str, str, str], tuple[int, dict[str, Any]]] = {}
        self.called: dict[tuple[str, str], str | None] = {}
        self.answered: set[tuple[str, str]] = set()
        self.thread: str | None = None
        self.scanned: set[int] = set()  # ids of message objects already read in this thread
        self.last_list: dict[tuple[str, str], list[Any] | tuple[Any, ...]] = {}
        self.ts_mismatch: list[str] = []

    def origin(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        where = f"{thread_id}/{ns}/{checkpoint_id}" if ns else f"{thread_id}/{checkpoint_id}"
        return f"{self.source}#{where}"

    def _enter_thread(self, thread_id: str) -> None:
        if thread_id != self.thread:
            # Decoded messages are shared between checkpoints (same bytes, same object), so a
            # message object read once in this thread need not be read again.
            self.thread = thread_id
            self.scanned = set()
            self.last_list = {}

    def _new_items(self, key: tuple[str, str], value: list[Any] | tuple[Any, ...]) -> Any:
        """The part of a channel's list not already read at the previous checkpoint.

        Message lists only grow between steps, and the decoder hands back the same object for
        the same message bytes, so when the previous list is an identical prefix only the tail
        is new. Anything else (messages removed or edited) is read in full.
        """
        prev = self.last_list.get(key)
        self.last_list[key] = value
        if prev is None:
            return value
        if len(value) >= len(prev) and all(map(operator.is_, value, prev)):
            return value[len(prev):]
        return value

    def checkpoint(self, cp: CheckpointRecord) -> None:
        self._enter_thread(cp.thread_id)
        origin = self.origin(cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id)
        ts_ns = parse_ts(cp.ts)
        id_ns = uuid6_time_ns(cp.checkpoint_id)
        at = ts_ns if ts_ns is not None else id_ns
        if at is None:
            self.warnings.append(SourceWarning(
                origin, "checkpoint has no readable `ts` and its id is not a UUIDv6 (times "
                        "outside 2000-2100 are not read); skipped"))
            return
        if ts_ns is not None and id_ns is not None and abs(ts_ns - id_ns) > _TS_TOLERANCE_NS:
            self.ts_mismatch.append(origin)
        meta = cp.metadata if isinstance(cp.metadata, Mapping) else {}
        base = {
            "source": name, "at": at, "thread_id": cp.thread_id,
            "checkpoint_id": cp.checkpoint_id, "step": _int(meta.get("step")),
            "worker": _worker(meta),
        }
        self.at_of[(cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id)] = (at, base)
        emit = not cp.context_only and self.window.contains(at)
        if emit:
            source = meta.get("source")
            self.rows.append({**base, "kind": Kind.CHECKPOINT.value, "origin": origin,
                              "name": source if isinstance(source, str) else None})
        for channel, value in cp.values.items():
            if isinstance(value, _DeltaSnapshot):
                value = value.value
            if isinstance(value, list | tuple):
                value = self._new_items((cp.checkpoint_ns, channel), value)
            self._messages(value, base, origin, emit)

    def write(self, w: WriteRecord) -> None:
        self._enter_thread(w.thread_id)
        known = self.at_of.get((w.thread_id, w.checkpoint_ns, w.checkpoint_id))
        origin = self.origin(w.thread_id, w.checkpoint_ns, w.checkpoint_id) + "/writes"
        if known is None:  # writes whose checkpoint is gone: the id still tells the time
            at = uuid6_time_ns(w.checkpoint_id)
            if at is None:
                return
            base: dict[str, Any] = {"source": name, "at": at, "thread_id": w.thread_id,
                                    "checkpoint_id": w.checkpoint_id}
        else:
            at, base = known
        self._messages(w.value, base, origin, self.window.contains(at))

    def _messages(self, value: Any, base: dict[str, Any], origin: str, emit: bool) -> None:
        thread_id = base["thread_id"]
        for msg in messages_in(value):
            if id(msg) in self.scanned:
                continue
            self.scanned.add(id(msg))
            problems: list[str] = []
            calls, result = message_facts(msg, problems)
            self.warnings.extend(SourceWarning(origin, f"{p}") for p in problems)
            for call in calls:
                key = (thread_id, call.tool_call_id)
                if key in self.called:
                    continue
                self.called[key] = call.tool_name
                if emit:
                    self.rows.append(_call_row(call, base, origin))
            if result is not None:
                key = (thread_id, result.tool_call_id)
                if key in self.answered:
                    continue
                self.answered.add(key)
                if emit:
                    self.rows.append(_result_row(result, base, origin,
                                                 self.called.get(key)))

    def finish(self) -> None:
        if self.ts_mismatch:
            self.warnings.append(SourceWarning(
                self.source,
                f"{len(self.ts_mismatch)} checkpoint(s) have a `ts` more than 1 s away from the "
                f"time in their UUIDv6 id (first: {self.ts_mismatch[0]}); `at` uses `ts`",
            ))


def _call_row(call: ToolCallFact, base: dict[str, Any], origin: str) -> dict[str, Any]:
    args = call.args
    row = {**base, "kind": Kind.TOOL_CALL.value, "origin": origin,
           "tool_call_id": call.tool_call_id, "tool_name": call.tool_name}
    if args is not None:
        row["args"] = canonical_json(args)
        row["args_fingerprint"] = fingerprint(args)
    if isinstance(args, Mapping):
        for key in _SUBJECT_KEYS:
            if isinstance(args.get(key), str):
                row["subject"] = args[key]
                break
        row["amount"] = _int(args.get("amount"))
        currency = args.get("currency")
        if isinstance(currency, str):
            row["currency"] = currency.lower()
    return row


def _result_row(result: ToolResultFact, base: dict[str, Any], origin: str,
                called_name: str | None) -> dict[str, Any]:
    return {**base, "kind": Kind.TOOL_RESULT.value, "origin": origin,
            "tool_call_id": result.tool_call_id, "tool_name": result.tool_name or called_name,
            "outcome": outcome_of(result), "detail": result.content[:DETAIL_CHARS]}


def _int(value: Any) -> int | None:
    """An integer, or None: amounts are minor units, so 19.99 is not an amount we can keep."""
    if isinstance(value, bool):
        return None
    number = None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isascii() \
            and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 20:
        number = int(value)
    return number if number is not None and fits_int64(number) else None


def _worker(meta: Mapping[str, Any]) -> str | None:
    for key in _WORKER_KEYS:
        value = meta.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return None
