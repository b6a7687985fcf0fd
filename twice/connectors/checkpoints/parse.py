"""The pure part of the checkpoints connector: timeline rows from checkpoint records.

Records come in (thread, checkpoint id) order; a thread's tool call is emitted at the first
checkpoint whose messages hold it, its result likewise. Rows are kept column-wise (no dict per
row) and times are read for the whole column at the end (`times.ts_column_ns`,
`times.uuid6_column_ns`): only a `ts` that is not in the form LangGraph writes is read one by
one as it comes. How a channel's values are read as messages is the `MessageReader`'s part:
LangChain objects rebuilt by LangGraph's serializer (`decode.LangChainMessages`), or message
fields read straight from the msgpack (`rawpack.RawMessages`).
"""

from __future__ import annotations

import hashlib
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from twice.connectors.base import LoadResult, SourceWarning, Warnings, fits_int64
from twice.connectors.checkpoints.facts import Facts, ToolCallFact, ToolResultFact, outcome_of
from twice.connectors.checkpoints.times import (
    Window,
    parse_ts,
    ts_column_ns,
    uuid6_column_ns,
    uuid6_time_ns,
)
from twice.timeline import Kind, canonical_json, fingerprint, from_columns

name = "checkpoints"

_WORKER_KEYS = ("worker", "host", "hostname", "host.name")
_SUBJECT_KEYS = ("customer", "customer_id")
_TS_TOLERANCE_NS = 1_000_000_000  # ts and the id's own time are minted microseconds apart
DETAIL_CHARS = 300

# `ts` as LangGraph writes it (datetime.now(UTC).isoformat()) and with fields that always make a
# date between 2000 and 2100 (a day past the 28th, a whole second or another offset is read one
# by one): such texts are read for the whole column at once.
_CANONICAL_TS = re.compile(
    r"20[0-9][0-9]-(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])T(?:[01][0-9]|2[0-3])"
    r":[0-5][0-9]:[0-5][0-9]\.[0-9]{6}\+00:00").fullmatch


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One checkpoint row as read from a saver's tables, blobs already decoded."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    ts: Any  # the checkpoint's own `ts` (ISO 8601 text), None if unreadable
    metadata: Mapping[str, Any]
    values: Mapping[str, Any]  # channel -> decoded value
    context_only: bool = False  # read only to know what came before the window


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """One pending write (a task's output saved against the checkpoint it started from)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    channel: str
    value: Any


class MessageReader(Protocol):
    """How decoded channel values are read as messages."""

    def unwrap(self, value: Any) -> Any:
        """A channel value without its delta-snapshot wrapper."""

    def messages(self, value: Any) -> Iterable[Any]:
        """The message-like items of a channel value (a list, a single message, a delta
        snapshot); the same message decoded from the same bytes is the same object."""

    def facts(self, msg: Any, problems: list[str]) -> Facts:
        """The tool calls or tool result of one message; what does not fit goes to
        `problems`."""


def parse_checkpoints(
    checkpoints: Iterable[CheckpointRecord],
    writes: Iterable[WriteRecord],
    source: str,
    *,
    window: Window | None = None,
    warnings: list[SourceWarning] | None = None,
    reader: MessageReader | None = None,
) -> LoadResult:
    """Timeline rows from checkpoint and pending-write records of one source (values decoded
    by LangGraph's serializer unless `reader` says how they were decoded)."""
    if reader is None:
        from twice.connectors.checkpoints.decode import LangChainMessages

        reader = LangChainMessages()
    parser = Parser(source, window or Window(), Warnings(warnings or []), reader)
    for cp in sorted(checkpoints, key=lambda c: (c.thread_id, c.checkpoint_id)):
        parser.checkpoint(cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id, cp.ts, cp.metadata,
                          cp.values, cp.context_only)
    for w in sorted(writes, key=lambda w: (w.thread_id, w.checkpoint_id, w.task_id)):
        parser.write(w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.value)
    return parser.result()


class Parser:
    """Rows of one source, fed its checkpoints in (thread, checkpoint id) order, then its
    pending writes in (thread, checkpoint id, task) order."""

    def __init__(self, source: str, window: Window, warnings: list[SourceWarning],
                 reader: MessageReader) -> None:
        self.source = source
        self.window = window
        self.warnings = warnings
        self.reader = reader
        # a time window decides which rows are emitted, so then each `at` is read at once
        self.timed = window.since_ns is not None or window.until_ns is not None
        # Bases: one per checkpoint read (and per write whose checkpoint is gone), the fields
        # a checkpoint's rows share. A base's time is its canonical `ts` text (read at the end
        # for all), else `b_ts_ns` read at once (None: the id's time).
        self.b_thread: list[str] = []
        self.b_ns: list[str] = []
        self.b_cid: list[str] = []
        self.b_step: list[int | None] = []
        self.b_worker: list[str | None] = []
        self.b_ts_text: list[str | None] = []
        self.b_ts_ns: list[int | None] = []
        self.b_at: list[int | None] = []  # the time, when `timed`
        self.b_checkpoint: list[bool] = []  # a checkpoint's base (not a write's)
        # checkpoint rows: base, origin, metadata source, position among all rows
        self.c_base: list[int] = []
        self.c_origin: list[str] = []
        self.c_name: list[str | None] = []
        self.c_seq: list[int] = []
        # tool_call / tool_result rows
        self.e_base: list[int] = []
        self.e_kind: list[str] = []
        self.e_origin: list[str] = []
        self.e_call_id: list[str] = []
        self.e_tool_name: list[str | None] = []
        self.e_args: list[str | None] = []
        self.e_fingerprint: list[str | None] = []
        self.e_subject: list[str | None] = []
        self.e_amount: list[int | None] = []
        self.e_currency: list[str | None] = []
        self.e_outcome: list[str | None] = []
        self.e_detail: list[str | None] = []
        self.e_seq: list[int] = []
        self.rows = 0
        self.at_of: dict[tuple[str, str, str], int] | None = None  # built at the first write
        self.called: dict[tuple[str, str], str | None] = {}
        self.answered: set[tuple[str, str]] = set()
        self.thread: str | None = None
        # message objects already read in this thread, by id (held, so no id is reused)
        self.scanned: dict[int, Any] = {}
        self.last_list: dict[tuple[str, Any], list[Any] | tuple[Any, ...]] = {}

    def origin(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        where = f"{thread_id}/{ns}/{checkpoint_id}" if ns else f"{thread_id}/{checkpoint_id}"
        return f"{self.source}#{where}"

    def _enter_thread(self, thread_id: str) -> None:
        # Decoded messages are shared between checkpoints (same bytes, same object), so a
        # message object read once in this thread need not be read again.
        self.thread = thread_id
        self.scanned = {}
        self.last_list = {}

    def _new_items(self, key: tuple[str, Any], value: list[Any] | tuple[Any, ...]) -> Any:
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

    def checkpoint(self, thread_id: str, ns: str, checkpoint_id: str, ts: Any,
                   metadata: Any, values: Mapping[Any, Any], context_only: bool = False) -> None:
        if thread_id != self.thread:
            self._enter_thread(thread_id)
        origin = self.origin(thread_id, ns, checkpoint_id)
        ts_text = ts if type(ts) is str and _CANONICAL_TS(ts) else None
        ts_ns = at = None
        if ts_text is None or self.timed:
            ts_ns = parse_ts(ts)
            at = ts_ns if ts_ns is not None else uuid6_time_ns(checkpoint_id)
            if at is None:
                self.warnings.append(SourceWarning(
                    origin, "checkpoint has no readable `ts` and its id is not a UUIDv6 (times "
                            "outside 2000-2100 are not read); skipped"))
                return
            if ts_text is not None:
                ts_ns = None  # read with the column
        meta = metadata if isinstance(metadata, Mapping) else {}
        base = len(self.b_thread)
        self._base(thread_id, ns, checkpoint_id, _int(meta.get("step")), _worker(meta),
                   ts_text, ts_ns, at, True)
        emit = not context_only and (not self.timed or self.window.contains(at))  # type: ignore[arg-type]
        if emit:
            source = meta.get("source")
            self.c_base.append(base)
            self.c_origin.append(origin)
            self.c_name.append(source if isinstance(source, str) else None)
            self.c_seq.append(self.rows)
            self.rows += 1
        unwrap = self.reader.unwrap
        for channel, value in values.items():
            value = unwrap(value)
            if isinstance(value, list | tuple):
                value = self._new_items((ns, channel), value)
            self._messages(value, base, origin, emit)

    def _base(self, thread_id: str, ns: str, checkpoint_id: str, step: int | None,
              worker: str | None, ts_text: str | None, ts_ns: int | None, at: int | None,
              checkpoint: bool) -> None:
        self.b_thread.append(thread_id)
        self.b_ns.append(ns)
        self.b_cid.append(checkpoint_id)
        self.b_step.append(step)
        self.b_worker.append(worker)
        self.b_ts_text.append(ts_text)
        self.b_ts_ns.append(ts_ns)
        self.b_at.append(at)
        self.b_checkpoint.append(checkpoint)

    def write(self, thread_id: str, ns: str, checkpoint_id: str, value: Any) -> None:
        if thread_id != self.thread:
            self._enter_thread(thread_id)
        if self.at_of is None:
            self.at_of = {key: i for i, key in enumerate(zip(self.b_thread, self.b_ns,
                                                             self.b_cid, strict=True))}
        base = self.at_of.get((thread_id, ns, checkpoint_id))
        origin = self.origin(thread_id, ns, checkpoint_id) + "/writes"
        if base is None:  # writes whose checkpoint is gone: the id still tells the time
            at = uuid6_time_ns(checkpoint_id)
            if at is None:
                return
            base = len(self.b_thread)
            self._base(thread_id, ns, checkpoint_id, None, None, None, None, at, False)
        at = self.b_at[base]
        self._messages(value, base, origin,
                       not self.timed or self.window.contains(at))  # type: ignore[arg-type]

    def _messages(self, value: Any, base: int, origin: str, emit: bool) -> None:
        thread_id = self.b_thread[base]
        scanned = self.scanned
        for msg in self.reader.messages(value):
            if id(msg) in scanned:
                continue
            scanned[id(msg)] = msg
            problems: list[str] = []
            calls, result = self.reader.facts(msg, problems)
            if problems:
                self.warnings.extend(SourceWarning(origin, f"{p}") for p in problems)
            for call in calls:
                key = (thread_id, call.tool_call_id)
                if key in self.called:
                    continue
                self.called[key] = call.tool_name
                if emit:
                    self._call_row(call, base, origin)
            if result is not None:
                key = (thread_id, result.tool_call_id)
                if key in self.answered:
                    continue
                self.answered.add(key)
                if emit:
                    self._result_row(result, base, origin, self.called.get(key))

    def _event(self, kind: str, base: int, origin: str, call_id: str,
               tool_name: str | None) -> None:
        self.e_kind.append(kind)
        self.e_base.append(base)
        self.e_origin.append(origin)
        self.e_call_id.append(call_id)
        self.e_tool_name.append(tool_name)
        self.e_seq.append(self.rows)
        self.rows += 1

    def _call_row(self, call: ToolCallFact, base: int, origin: str) -> None:
        args = call.args
        self._event(Kind.TOOL_CALL.value, base, origin, call.tool_call_id, call.tool_name)
        text = fp = subject = amount = currency = None
        if args is not None:
            text = canonical_json(args)
            fp = fingerprint(args) if isinstance(args, str) else \
                hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()[:16]
        if isinstance(args, Mapping):
            for key in _SUBJECT_KEYS:
                if isinstance(args.get(key), str):
                    subject = args[key]
                    break
            amount = _int(args.get("amount"))
            value = args.get("currency")
            if isinstance(value, str):
                currency = value.lower()
        self.e_args.append(text)
        self.e_fingerprint.append(fp)
        self.e_subject.append(subject)
        self.e_amount.append(amount)
        self.e_currency.append(currency)
        self.e_outcome.append(None)
        self.e_detail.append(None)

    def _result_row(self, result: ToolResultFact, base: int, origin: str,
                    called_name: str | None) -> None:
        self._event(Kind.TOOL_RESULT.value, base, origin, result.tool_call_id,
                    result.tool_name or called_name)
        self.e_args.append(None)
        self.e_fingerprint.append(None)
        self.e_subject.append(None)
        self.e_amount.append(None)
        self.e_currency.append(None)
        self.e_outcome.append(outcome_of(result))
        self.e_detail.append(result.content[:DETAIL_CHARS])

    def _times(self) -> tuple[np.ndarray, np.ndarray]:
        """Every base's time (ns), and where a checkpoint's `ts` is more than 1 s from its
        id's time."""
        n = len(self.b_thread)
        ts = np.zeros(n, dtype=np.int64)
        has_ts = np.zeros(n, dtype=bool)
        texts = [(i, t) for i, t in enumerate(self.b_ts_text) if t is not None]
        if texts:
            where, text = zip(*texts, strict=True)
            ts[list(where)] = ts_column_ns(list(text))
            has_ts[list(where)] = True
        exact = [(i, v) for i, v in enumerate(self.b_ts_ns) if v is not None]
        if exact:
            where, values = zip(*exact, strict=True)
            ts[list(where)] = values
            has_ts[list(where)] = True
        ids, has_id = uuid6_column_ns(self.b_cid)
        at = np.where(has_ts, ts, ids)
        mismatch = has_ts & has_id & (np.abs(ts - ids) > _TS_TOLERANCE_NS)
        return at, mismatch & np.array(self.b_checkpoint, dtype=bool)

    def result(self) -> LoadResult:
        at, mismatch = self._times()
        if mismatch.any():
            first = int(np.flatnonzero(mismatch)[0])
            self.warnings.append(SourceWarning(
                self.source,
                f"{int(mismatch.sum())} checkpoint(s) have a `ts` more than 1 s away from the "
                "time in their UUIDv6 id (first: "
                f"{self.origin(self.b_thread[first], self.b_ns[first], self.b_cid[first])}); "
                "`at` uses `ts`",
            ))
        return LoadResult(source=name, rows=self._frame(at), warnings=self.warnings)

    def _frame(self, at: np.ndarray) -> pd.DataFrame:
        n_c, n_e = len(self.c_base), len(self.e_base)
        n = n_c + n_e
        if not n:
            return from_columns({}, 0)
        base = np.array(self.c_base + self.e_base, dtype=np.int64)
        seq = np.array(self.c_seq + self.e_seq, dtype=np.int64)
        threads = _take(self.b_thread, base)
        step = _take(self.b_step, base)
        columns: dict[str, Any] = {
            "source": [name] * n,
            "at": at[base],
            "kind": [Kind.CHECKPOINT.value] * n_c + self.e_kind,
            "thread_id": threads,
            "checkpoint_id": _take(self.b_cid, base),
            "step": step,
            "worker": _take(self.b_worker, base),
            "origin": self.c_origin + self.e_origin,
            "name": self.c_name + [None] * n_e,
            "tool_call_id": [None] * n_c + self.e_call_id,
            "tool_name": [None] * n_c + self.e_tool_name,
            "args": [None] * n_c + self.e_args,
            "args_fingerprint": [None] * n_c + self.e_fingerprint,
            "subject": [None] * n_c + self.e_subject,
            "amount": [None] * n_c + self.e_amount,
            "currency": [None] * n_c + self.e_currency,
            "outcome": [None] * n_c + self.e_outcome,
            "detail": [None] * n_c + self.e_detail,
        }
        frame = from_columns(columns, n)
        # rows in the order they were found, then by time (stable): what sorting the rows
        # as found by `at` gives
        order = np.lexsort((seq, at[base]))
        return frame.take(order).reset_index(drop=True)


def _take(values: list[Any], index: np.ndarray) -> list[Any]:
    return list(map(values.__getitem__, index.tolist()))


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
