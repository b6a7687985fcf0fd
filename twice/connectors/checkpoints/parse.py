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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from twice.connectors.base import LoadResult, SourceWarning, Warnings, fits_int64
from twice.connectors.checkpoints.facts import Facts, ToolCallFact, ToolResultFact, outcome_of
from twice.connectors.checkpoints.times import (
    Window,
    parse_ts,
    ts_column_ns,
    uuid6_column_ns,
    uuid6_time_ns,
)
from twice.timeline import COLUMNS, TEXT, Kind, canonical_json, fingerprint, from_columns

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
_DUMMY_TS = "2000-01-01T00:00:00.000000+00:00"  # stands for a `ts` read one by one
_TEXT = pa.large_string()
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_CHECKPOINT, _TOOL_CALL, _TOOL_RESULT = (Kind.CHECKPOINT.value, Kind.TOOL_CALL.value,
                                         Kind.TOOL_RESULT.value)


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

    def messages(self, value: Any) -> list[Any]:
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
        self._unwrap, self._in, self._facts = reader.unwrap, reader.messages, reader.facts
        # a time window decides which rows are emitted, so then each `at` is read at once
        self.timed = window.since_ns is not None or window.until_ns is not None
        # Bases: one per checkpoint read (and per write whose checkpoint is gone), the fields
        # a checkpoint's rows share: (thread, ns, checkpoint id, step, worker, ts text, at when
        # `timed`, origin, metadata source, position among the rows or -1). A base's `ts` is
        # its canonical text (read with the column at the end), else `_DUMMY_TS` and its time
        # in `exact_ts` (None: unreadable, the id's time is used).
        self.bases = Table([_TEXT, _TEXT, _TEXT, pa.int64(), _TEXT, None, None, _TEXT, _TEXT,
                            None], {5: ts_column_ns, 9: _int64s})
        self.exact_ts: dict[int, int | None] = {}
        self.orphans: list[int] = []  # bases of writes whose checkpoint is gone
        # tool_call / tool_result rows: (base, kind, origin, tool_call_id, tool_name, args,
        # args_fingerprint, subject, amount, currency, outcome, detail, position)
        self.events = Table([None, _TEXT, _TEXT, _TEXT, _TEXT, _TEXT, _TEXT, _TEXT,
                             pa.int64(), _TEXT, _TEXT, _TEXT, None], {0: _int64s, 12: _int64s})
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

    def checkpoint(self, thread_id: str, ns: str, checkpoint_id: str, ts: Any,
                   metadata: Any, values: Mapping[Any, Any], context_only: bool = False) -> None:
        # (the loop over every checkpoint: kept to few calls)
        if thread_id != self.thread:
            self._enter_thread(thread_id)
        origin = f"{self.source}#{thread_id}/{ns}/{checkpoint_id}" if ns else \
            f"{self.source}#{thread_id}/{checkpoint_id}"
        ts_text = ts if type(ts) is str and _CANONICAL_TS(ts) else None
        at = None
        if ts_text is None or self.timed:
            ts_ns = parse_ts(ts)
            at = ts_ns if ts_ns is not None else uuid6_time_ns(checkpoint_id)
            if at is None:
                self.warnings.append(SourceWarning(
                    origin, "checkpoint has no readable `ts` and its id is not a UUIDv6 (times "
                            "outside 2000-2100 are not read); skipped"))
                return
            if ts_text is None:
                self.exact_ts[len(self.bases)] = ts_ns
        meta = metadata if type(metadata) is dict or isinstance(metadata, Mapping) else {}
        step = meta.get("step")
        if step is not None:
            step = step if type(step) is int and _INT64_MIN <= step <= _INT64_MAX else _int(step)
        worker = None if meta.keys().isdisjoint(_WORKER_KEYS) else _worker(meta)
        base = len(self.bases)
        emit = not context_only and (not self.timed or self.window.contains(at))  # type: ignore[arg-type]
        if emit:
            source = meta.get("source")
            self.bases.append((thread_id, ns, checkpoint_id, step, worker,
                               ts_text or _DUMMY_TS, at, origin,
                               source if isinstance(source, str) else None, self.rows))
            self.rows += 1
        else:
            self.bases.append((thread_id, ns, checkpoint_id, step, worker,
                               ts_text or _DUMMY_TS, at, origin, None, -1))
        unwrap, last_list, found = self._unwrap, self.last_list, self._in
        for channel, value in values.items():
            value = unwrap(value)
            if isinstance(value, list | tuple):
                # Message lists only grow between steps, and the decoder hands back the same
                # object for the same message bytes, so when the previous list is an identical
                # prefix only the tail is new. Anything else (messages removed or edited) is
                # read in full.
                key = (ns, channel)
                prev = last_list.get(key)
                last_list[key] = value
                if prev is not None and len(value) >= len(prev) \
                        and all(map(operator.is_, value, prev)):
                    value = value[len(prev):]
            messages = found(value)
            if messages:
                self._messages(messages, thread_id, base, origin, emit)

    def write(self, thread_id: str, ns: str, checkpoint_id: str, value: Any) -> None:
        if thread_id != self.thread:
            self._enter_thread(thread_id)
        if self.at_of is None:
            self.at_of = {key: i for i, key in enumerate(self.bases.keys())}
        base = self.at_of.get((thread_id, ns, checkpoint_id))
        origin = self.origin(thread_id, ns, checkpoint_id) + "/writes"
        if base is None:  # writes whose checkpoint is gone: the id still tells the time
            at = uuid6_time_ns(checkpoint_id)
            if at is None:
                return
            base = len(self.bases)
            self.exact_ts[base] = None
            self.orphans.append(base)
            self.bases.append((thread_id, ns, checkpoint_id, None, None, _DUMMY_TS, at, origin,
                               None, -1))
        at = self.bases.row(base)[6]
        messages = self._in(value)
        if messages:
            self._messages(messages, thread_id, base, origin,
                           not self.timed or self.window.contains(at))  # type: ignore[arg-type]

    def _messages(self, messages: list[Any], thread_id: str, base: int, origin: str,
                  emit: bool) -> None:
        scanned = self.scanned
        for msg in messages:
            if id(msg) in scanned:
                continue
            scanned[id(msg)] = msg
            problems: list[str] = []
            calls, result = self._facts(msg, problems)
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

    def _call_row(self, call: ToolCallFact, base: int, origin: str) -> None:
        args = call.args
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
        self.events.append((base, _TOOL_CALL, origin, call.tool_call_id, call.tool_name, text,
                            fp, subject, amount, currency, None, None, self.rows))
        self.rows += 1

    def _result_row(self, result: ToolResultFact, base: int, origin: str,
                    called_name: str | None) -> None:
        self.events.append((base, _TOOL_RESULT, origin, result.tool_call_id,
                            result.tool_name or called_name, None, None, None, None, None,
                            outcome_of(result), result.content[:DETAIL_CHARS], self.rows))
        self.rows += 1

    def _times(self, cids: Any, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every base's time (ns), and where a checkpoint's `ts` is more than 1 s from its
        id's time."""
        has_ts = np.ones(len(ts), dtype=bool)
        for i, ns in self.exact_ts.items():
            if ns is None:
                has_ts[i] = False
            else:
                ts[i] = ns
        ids, has_id = uuid6_column_ns(cids.to_pylist() if isinstance(cids, pa.Array) else cids)
        at = np.where(has_ts, ts, ids)
        mismatch = has_ts & has_id & (np.abs(ts - ids) > _TS_TOLERANCE_NS)
        mismatch[self.orphans] = False
        return at, mismatch

    def result(self) -> LoadResult:
        if not len(self.bases):
            return LoadResult(source=name, rows=from_columns({}, 0), warnings=self.warnings)
        thread, _, cid, step, worker, ts, _, origin, source, seqs = self.bases.columns()
        at, mismatch = self._times(cid, ts)
        if mismatch.any():
            first = int(np.flatnonzero(mismatch)[0])
            self.warnings.append(SourceWarning(
                self.source,
                f"{int(mismatch.sum())} checkpoint(s) have a `ts` more than 1 s away from the "
                f"time in their UUIDv6 id (first: {_item(origin, first)}); `at` uses `ts`",
            ))
        rows = np.flatnonzero(seqs >= 0)  # the bases that are checkpoint rows
        e_base, kind, e_origin, call_id, tool_name, args, fp, subject, amount, currency, \
            outcome, detail, e_seq = self.events.columns()
        n_c, n_e = len(rows), len(e_base)
        n = n_c + n_e
        if not n:
            return LoadResult(source=name, rows=from_columns({}, 0), warnings=self.warnings)
        base = np.concatenate([rows, e_base])
        # rows by time, ties in the order they were found: a stable sort of the rows as found
        order = np.lexsort((np.concatenate([seqs[rows], e_seq]), at[base]))
        base = base[order]
        # each column made in turn, its source let go at once: memory holds one copy
        columns: dict[str, Any] = {"source": [name] * n, "at": at[base]}
        del at
        columns["kind"] = _rows([_CHECKPOINT] * n_c, kind, order)
        columns["thread_id"] = _column(thread, base)
        columns["checkpoint_id"] = _column(cid, base)
        columns["step"] = _column(step, base)
        columns["worker"] = _column(worker, base)
        del thread, cid, step, worker, kind
        columns["origin"] = _rows(_column(origin, rows), e_origin, order)
        del origin, e_origin
        columns["name"] = _rows(_column(source, rows), [None] * n_e, order)
        del source
        for key, values in (("tool_call_id", call_id), ("tool_name", tool_name),
                            ("args", args), ("args_fingerprint", fp), ("subject", subject),
                            ("currency", currency), ("outcome", outcome), ("detail", detail)):
            columns[key] = _rows(n_c, values, order)
        columns["amount"] = _rows(n_c, amount, order, pa.int64())
        del call_id, tool_name, args, fp, subject, currency, outcome, detail, amount, values
        for column in COLUMNS:  # (an Arrow null column is quicker for pandas than none)
            if column.name not in columns and column.dtype == TEXT:
                columns[column.name] = pa.nulls(n, _TEXT)
        return LoadResult(source=name, rows=from_columns(columns, n), warnings=self.warnings)


def _int64s(values: list[Any]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _item(values: Any, i: int) -> Any:
    return values[i].as_py() if isinstance(values, pa.Array) else values[i]


class Table:
    """Rows kept as tuples until `chunk` of them, then as columns: Arrow arrays (numpy for the
    columns `convert` names), a Python list where Arrow cannot hold the values. The same values
    as Python objects take several times the memory."""

    def __init__(self, types: Sequence[pa.DataType | None],
                 convert: Mapping[int, Callable[[list[Any]], np.ndarray]] | None = None,
                 chunk: int = 32_768) -> None:
        self.types = types
        self.chunk = chunk
        self.convert = convert or {}
        self.rows: list[tuple[Any, ...]] = []
        self.chunks: list[list[Any]] = []
        self.done = 0  # rows in chunks

    def __len__(self) -> int:
        return self.done + len(self.rows)

    def append(self, row: tuple[Any, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.chunk:
            self._flush()

    def _flush(self) -> None:
        if not self.rows:
            return
        chunk: list[Any] = []
        for i, (values, type_) in enumerate(zip(zip(*self.rows, strict=True), self.types,
                                                strict=True)):
            if i in self.convert:
                chunk.append(self.convert[i](list(values)))
            elif type_ is None:
                chunk.append(list(values))
            else:
                array = _arrow(values, type_)
                chunk.append(list(values) if array is None else array)
        self.chunks.append(chunk)
        self.done += len(self.rows)
        self.rows = []

    def keys(self) -> list[tuple[Any, ...]]:
        """Each row's first three values."""
        out: list[tuple[Any, ...]] = []
        for chunk in self.chunks:
            out.extend(zip(*((c.to_pylist() if isinstance(c, pa.Array) else c)
                             for c in chunk[:3]), strict=True))
        out.extend(row[:3] for row in self.rows)
        return out

    def row(self, i: int) -> tuple[Any, ...]:
        if i >= self.done:
            return self.rows[i - self.done]
        chunk = self.chunks[i // self.chunk]
        at = i % self.chunk
        return tuple(c[at].as_py() if isinstance(c, pa.Array) else c[at] for c in chunk)

    def columns(self) -> list[Any]:
        """Each column whole (and the table emptied): an Arrow array, a numpy array for the
        converted columns, else a list."""
        self._flush()
        chunks, self.chunks = self.chunks, []
        out: list[Any] = []
        for i in range(len(self.types)):
            parts = [c[i] for c in chunks]
            for c in chunks:  # (each chunk's part is freed once its column is whole)
                c[i] = None
            if i in self.convert:
                out.append(np.concatenate(parts) if parts else np.zeros(0, np.int64))
            elif parts and all(isinstance(p, pa.Array) for p in parts):
                out.append(pa.concat_arrays(parts))
            else:
                out.append([v for p in parts
                            for v in (p.to_pylist() if isinstance(p, pa.Array) else p)])
        return out


def _arrow(values: Sequence[Any], type_: pa.DataType) -> pa.Array | None:
    try:
        return pa.array(values, type=type_)
    except (pa.ArrowException, OverflowError, UnicodeError):
        return None  # (text that is no valid Unicode): `from_columns` converts the values


def _column(values: pa.Array | list[Any], index: np.ndarray) -> pa.Array | list[Any]:
    """`values[index]`: an Arrow array, or Python objects where Arrow could not hold them."""
    if isinstance(values, pa.Array):
        return values.take(index)
    return np.array(values, dtype=object)[index].tolist()  # type: ignore[no-any-return]


def _rows(checkpoints: Sequence[Any] | pa.Array | int, events: Sequence[Any] | pa.Array,
          order: np.ndarray, type_: pa.DataType = _TEXT) -> pa.Array | list[Any]:
    """A column's values on the checkpoint rows (a count: all null) then the event rows,
    in `order`."""
    if isinstance(checkpoints, int):
        first = pa.nulls(checkpoints, type_)
    elif isinstance(checkpoints, pa.Array):
        first = checkpoints
    else:
        first = _arrow(checkpoints, type_)
    second = events if isinstance(events, pa.Array) else _arrow(events, type_)
    if first is None or second is None:  # Python objects, for `from_columns` to convert
        head = [None] * checkpoints if isinstance(checkpoints, int) else \
            checkpoints.to_pylist() if isinstance(checkpoints, pa.Array) else list(checkpoints)
        tail = events.to_pylist() if isinstance(events, pa.Array) else list(events)
        return np.array([*head, *tail], dtype=object)[order].tolist()  # type: ignore[no-any-return]
    return pa.concat_arrays([first, second]).take(order)


def _int(value: Any) -> int | None:
    """An integer, or None: amounts are minor units, so 19.99 is not an amount we can keep."""
    if value is None:
        return None
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
    if meta.keys().isdisjoint(_WORKER_KEYS):
        return None
    for key in _WORKER_KEYS:
        value = meta.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return None
