"""What spans mean for the timeline, decided on columns: the rows `SpanRows` gives, a block of
spans at a time, with no Python object per span.

Each rule of `twice.connectors.spans.interpret` is a mask or a coalesce over the pivoted
attributes: a row's kind from which keys are there, its fields the first key of a list that has
a value. Values in the exporters' usual form (text with nothing to strip, an int, a header's list
of text) are read by Arrow; any other is read by the per-span functions themselves, one value
at a time. What is worked out per value (a tool's arguments, a URL's path, an error's words) is
worked out once per distinct value. The thread and tool call ids a row takes from its ancestors
are found by a join on (trace id, parent id), pointer jumping up the parents. Anything these
columns cannot give exactly as `SpanRows` would (Langfuse's attributes, a count or arguments
given in an unusual type, a span given twice, a parent cycle) raises Decline: the file then goes
the per-span way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from twice.connectors.base import redact
from twice.connectors.spans.columnar.columns import Attribute, Decline, SpanColumns
from twice.connectors.spans.interpret import (
    _DETAIL_MAX,
    _TIMEOUT,
    _TOOL_MARKER_KEYS,
    ARGUMENT_KEYS,
    HOST_KEYS,
    HTTP_METHOD_KEYS,
    HTTP_STATUS_KEYS,
    IDEMPOTENCY_KEY_KEYS,
    LANGFUSE_TYPE,
    PROXY_ATTEMPT_KEYS,
    REPLAYED_KEYS,
    REQUEST_ID_KEYS,
    SOURCE,
    THREAD_KEYS,
    TOOL_CALL_ID_KEYS,
    TOOL_NAME_KEYS,
    URL_KEYS,
    Options,
    SpanRows,
    _arguments,
    _delivery_offset,
    _effect_fields,
    _first,
    _first_int,
    _keys,
    _Row,
    _url_path,
    int_value,
    tool_message_call_id,
)
from twice.connectors.spans.model import INT64
from twice.timeline import Kind, fingerprint, from_columns

_ASCII_SPACE = "".join(c for c in map(chr, range(128)) if c.isspace())  # what strip() strips
_INTS = ("at", "end", "amount", "delivery_count", "status", "resend_count", "proxy_attempt")
# text as the timeline keeps it (`timeline.from_columns`): no copy there
ROW_TYPES = {name: pa.int64() if name in _INTS else pa.large_string() for name in _Row._fields}
_OUTCOMES = pa.array(["ok", "timeout", "error", "unknown", "replayed"])
_CLIENT = 3  # OTLP's SPAN_KIND_CLIENT
_STRING = pa.string()


def _nulls(n: int, kind: pa.DataType = _STRING) -> pa.Array:
    return pa.nulls(n, kind)


def _valid(values: pa.Array) -> np.ndarray:
    return pc.is_valid(values).to_numpy(zero_copy_only=False)


def _true(mask: pa.Array) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _patched(values: pa.Array, where: np.ndarray, found: list[Any]) -> pa.Array:
    """`values` with those at positions `where` replaced by `found` (a few, read in Python)."""
    if not len(where):
        return values
    out = values.to_pylist()
    for at, value in zip(where.tolist(), found, strict=True):
        out[at] = value
    return pa.array(out, values.type)


def _first_items(lists: pa.Array) -> pa.Array:
    """The first text of each list (null for an empty or absent one)."""
    first = pc.list_slice(lists, 0, 1)
    items = pc.list_flatten(first)
    slot = np.full(len(lists), -1, dtype=np.int64)
    slot[pc.list_parent_indices(first).to_numpy()] = np.arange(len(items))
    return items.take(pa.array(slot, mask=slot < 0))


def _plain(texts: pa.Array) -> pa.Array:
    """The texts that read as themselves: ASCII, not empty, nothing for Python's `strip()` at
    either end, not "[" first (`text_value` would read JSON); null for the others."""
    plain = pc.and_(pc.and_(pc.string_is_ascii(texts), pc.not_equal(texts, "")),
                    pc.and_(pc.equal(pc.ascii_trim(texts, _ASCII_SPACE), texts),
                            pc.invert(pc.starts_with(texts, "["))))
    return pc.if_else(plain, texts, pa.scalar(None, pa.string()))


def _text(attr: Attribute, key: str) -> pa.Array:
    """`_first(attrs, (key,))` of every span."""
    out = _plain(attr.text)
    if attr.number.null_count < len(attr.number):
        out = pc.coalesce(out, pc.cast(attr.number, pa.string()))
    if attr.array.null_count < len(attr.array):
        out = pc.coalesce(out, _plain(_first_items(attr.array)))
    odd = np.flatnonzero(attr.present & ~_valid(out))
    return _patched(out, odd, [_first({key: v}, (key,)) for v in attr.python(odd)])


def _int(attr: Attribute, key: str) -> pa.Array:
    """`_first_int(attrs, (key,))` of every span (an intValue is read already)."""
    odd = np.flatnonzero(_valid(attr.text) | _valid(attr.array))
    return _patched(attr.number, odd, [_first_int({key: v}, (key,)) for v in attr.python(odd)])


def _each_distinct(values: pa.Array, read: Callable[[Any], Any], kind: pa.DataType
                   ) -> pa.Array:
    """`read` of each value, called once per distinct value (null stays null)."""
    coded = pc.dictionary_encode(values)
    found = pa.array([read(v) for v in coded.dictionary.to_pylist()], kind)
    return found.take(coded.indices)


class _Spans:
    """One block's spans, each attribute read once, as it is asked for."""

    def __init__(self, cols: SpanColumns) -> None:
        self.cols = cols
        self.n = len(cols.start_ns)
        self.keys = cols.spans.keys()
        self._attributes: dict[str, Attribute] = {}
        self._texts: dict[str, pa.Array] = {}

    def attribute(self, key: str) -> Attribute:
        if key not in self._attributes:
            self._attributes[key] = self.cols.attribute(key)
        return self._attributes[key]

    def present(self, key: str | None) -> np.ndarray:
        if key is None or key not in self.keys:
            return np.zeros(self.n, dtype=bool)
        return self.attribute(key).present

    def text(self, keys: Sequence[str]) -> pa.Array:
        """`_first(attrs, keys)` of every span."""
        found = [self._text(key) for key in keys if key in self.keys]
        return pc.coalesce(*found) if found else _nulls(self.n)

    def _text(self, key: str) -> pa.Array:
        if key not in self._texts:
            self._texts[key] = _text(self.attribute(key), key)
        return self._texts[key]

    def int(self, keys: Sequence[str]) -> pa.Array:
        """`_first_int(attrs, keys)` of every span."""
        found = [_int(self.attribute(key), key) for key in keys if key in self.keys]
        return pc.coalesce(*found) if found else _nulls(self.n, pa.int64())


@dataclass
class Block:
    """A block's rows (columns in `_Row`'s order, thread and call ids not yet inherited) and
    every span's link: (trace id, span id, parent span id, own thread id, own tool call id)."""

    rows: dict[str, pa.Array]
    line: np.ndarray  # each row's line in the file (0-based)
    lines: range  # the lines of the file the block holds
    link: np.ndarray  # each row's span among the links, -1: it inherits nothing
    links: tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array]


def _delivery_counts(spans: _Spans) -> pa.Array:
    """`_delivery_count(attrs)` of every span: the largest count among the attributes that
    are one (an intValue read here, a value of another type by `int_value`)."""
    counts = []
    for key in sorted(spans.keys):
        offset = _delivery_offset(key)
        if offset is None:
            continue
        attr = spans.attribute(key)
        odd = np.flatnonzero(_valid(attr.text) | _valid(attr.array))
        counts.append(_patched(pc.add(attr.number, offset),  # an intValue has 18 digits at most
                               odd, [_count(value, offset) for value in attr.python(odd)]))
    if not counts:
        return _nulls(spans.n, pa.int64())
    return pc.max_element_wise(*counts, skip_nulls=True)


def _count(value: Any, offset: int) -> int | None:
    number = int_value(value)
    return number + offset if number is not None and number + offset in INT64 else None


def _is_tool(spans: _Spans, tool_attribute: str | None) -> np.ndarray:
    """`interpret._is_tool` of every span."""
    tool = np.zeros(spans.n, dtype=bool)
    for key in (*sorted(_TOOL_MARKER_KEYS), tool_attribute):
        tool |= spans.present(key)
    tool |= _true(pc.equal(spans.text(("gen_ai.operation.name",)), "execute_tool"))
    span_kind = spans.text(("openinference.span.kind",))
    tool |= _true(_each_distinct(span_kind, lambda v: str(v or "").upper() == "TOOL",
                                 pa.bool_()))
    return tool


def _tool_names(spans: _Spans, at: pa.Array) -> pa.Array:
    """The tool's name: its attribute, else what follows "execute_tool " in the span's name."""
    names = spans.text(TOOL_NAME_KEYS).take(at)
    span_names = spans.cols.name.take(at)
    missing = np.flatnonzero(~_valid(names) & _true(pc.starts_with(span_names,
                                                                   "execute_tool ")))
    return _patched(names, missing, [
        name.removeprefix("execute_tool ").strip() or None
        for name in span_names.take(pa.array(missing, type=pa.int64())).to_pylist()])


def _tool_arguments(spans: _Spans, at: pa.Array) -> list[pa.Array]:
    """(args, args_fingerprint, subject, amount, currency) of tool rows: the first argument key
    that gives arguments, each distinct text read once by `interpret._arguments` (a value of
    another type read on its own)."""
    fields = ("args", "args_fingerprint", "subject", "amount", "currency")
    out = [_nulls(len(at), ROW_TYPES[name]) for name in fields]
    for key in reversed(ARGUMENT_KEYS):  # the first key wins: it is laid on last
        if key not in spans.keys:
            continue

        def read(value: Any, key: str = key) -> tuple[Any, ...]:
            text, parsed = _arguments({key: value})
            return (text, fingerprint(text) if text else None, *_effect_fields(parsed))

        attr = spans.attribute(key)
        coded = pc.dictionary_encode(attr.text.take(at))
        found = [read(v) for v in coded.dictionary.to_pylist()]
        odd = np.flatnonzero(_valid(attr.number.take(at)) | _valid(attr.array.take(at)))
        odd_found = [read(v) for v in attr.python(at.to_numpy()[odd])]
        values = [_patched(pa.array([f[k] for f in found], ROW_TYPES[name]).take(coded.indices),
                           odd, [f[k] for f in odd_found]) for k, name in enumerate(fields)]
        given = pa.array(_valid(values[0]))
        out = [pc.if_else(given, new, old) for new, old in zip(values, out, strict=True)]
    return out


def _timed_out(texts: pa.Array) -> np.ndarray:
    """Per text: it holds a timeout's words (`interpret._TIMEOUT`); False where null."""
    return _true(_each_distinct(texts, lambda t: bool(_TIMEOUT.search(t)), pa.bool_()))


def _said(texts: pa.Array) -> pa.Array:
    """The texts, null where empty (an empty text says nothing, as in `interpret._outcome`)."""
    return pc.if_else(pc.equal(texts, ""), pa.scalar(None, texts.type), texts)


def _exceptions(cols: SpanColumns) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """(has an exception event, one of them holds a timeout's words, the last one's words as
    the detail `interpret._outcome` gives: "type: message", or the one given) of every span.
    An exception's type and message are its attributes' when they are text, else none."""
    n = len(cols.start_ns)
    span = cols.exception_span
    kind = cols.exceptions.attribute("exception.type").text
    message = cols.exceptions.attribute("exception.message").text
    has = np.zeros(n, dtype=bool)
    has[span] = True
    timed_out = np.zeros(n, dtype=bool)
    timed_out[span[_timed_out(kind) | _timed_out(message)]] = True
    last = span[1:] != span[:-1]  # the events are in their spans' order
    last = np.append(last, True) if len(span) else last
    slot = np.full(n, -1, dtype=np.int64)
    slot[span[last]] = np.flatnonzero(last)
    index = pa.array(slot, mask=slot < 0)
    kind, message = _said(kind.take(index)), _said(message.take(index))
    words = pc.coalesce(pc.binary_join_element_wise(kind, message, ": "), kind, message)
    return has, timed_out, words


def _outcomes(spans: _Spans, at: pa.Array, http_status: pa.Array, http: np.ndarray
              ) -> tuple[pa.Array, pa.Array]:
    """(outcome, detail) of rows, as `interpret._outcome` and the replayed rule after it: the
    detail is the last exception event's words, else the status message, else `error.type`;
    any of them (and any exception event's) may say the call timed out."""
    error_type = spans.text(("error.type",)).take(at)
    message = _said(spans.cols.status_message.take(at))
    has, has_timed_out, words = _exceptions(spans.cols)
    rows = at.to_numpy()
    has_exception, exception_timed_out, words = has[rows], has_timed_out[rows], words.take(at)
    detail = _each_distinct(pc.coalesce(words, message, error_type),
                            lambda t: redact(t)[:_DETAIL_MAX], pa.string())
    timed_out = _timed_out(error_type) | _timed_out(message) | exception_timed_out
    code = spans.cols.status_code.take(at)
    failed = _true(pc.equal(code, 2)) | _valid(error_type) | \
        _true(pc.greater_equal(http_status, 400))
    replayed = http & _true(pc.is_in(spans.text(REPLAYED_KEYS).take(at),
                                     pa.array(["true", "True", "1"])))
    ok = _true(pc.equal(code, 1))
    choice = np.select([ok, timed_out & (failed | has_exception), failed, _valid(http_status)],
                       [0, 1, 2, 0], 3)
    choice[(choice == 0) & replayed] = 4
    return _OUTCOMES.take(pa.array(choice)), detail


def _links(spans: _Spans, tool: np.ndarray, call_keys: tuple[str, ...]
           ) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array]:
    cols = spans.cols
    thread, call = spans.text(THREAD_KEYS), spans.text(call_keys)
    if "output.value" in spans.keys:  # OpenInference: the id only in the returned ToolMessage
        odd = np.flatnonzero(tool & ~_valid(call) & spans.present("output.value"))
        call = _patched(call, odd, [tool_message_call_id(v) for v in
                                    spans.attribute("output.value").python(odd)])
    return cols.trace_id, cols.span_id, cols.parent_span_id, thread, call


def block_rows(cols: SpanColumns, options: Options, origin: Callable[[int], str],
               first_line: int) -> Block:
    """The rows of one block's spans (`interpret.SpanRows.add` on each, in order)."""
    spans = _Spans(cols)
    if LANGFUSE_TYPE in spans.keys:
        raise Decline("Langfuse's attributes")
    n = spans.n
    tool = _is_tool(spans, options.tool_attribute)
    counts = _delivery_counts(spans)
    queue = ~tool & _valid(counts)
    kind = cols.kind.fill_null(0).to_numpy(zero_copy_only=False)
    client_or_unknown = (kind == _CLIENT) | ~np.isin(kind, (1, 2, 3, 4, 5))
    http = ~tool & ~queue & client_or_unknown
    has_method = np.zeros(n, dtype=bool)
    for key in HTTP_METHOD_KEYS:
        has_method |= spans.present(key)
    http &= has_method
    at = np.flatnonzero(tool | queue | http)
    take = pa.array(at, type=pa.int64())
    is_tool, is_queue, is_http = tool[at], queue[at], http[at]
    m = len(at)
    rows: dict[str, pa.Array] = {}
    line = cols.line[at] + first_line
    distinct = np.unique(line)
    rows["origin"] = pa.array([origin(k) for k in distinct.tolist()]).take(
        pa.array(np.searchsorted(distinct, line)))
    rows["kind"] = pa.array(np.select([is_tool, is_queue], [Kind.TOOL_SPAN.value,
                                                            Kind.QUEUE_RECEIVE.value],
                                      Kind.HTTP_SPAN.value).astype(object), pa.string())
    rows["at"], rows["end"] = pa.array(cols.start_ns[at]), pa.array(cols.end_ns[at])
    rows["trace_id"], rows["span_id"] = cols.trace_id.take(take), cols.span_id.take(take)
    rows["parent_span_id"], rows["name"] = (cols.parent_span_id.take(take),
                                            cols.name.take(take))
    worker = [_text(cols.resource_attribute(key), key) for key in HOST_KEYS
              if key in cols.resources.keys()]
    rows["worker"] = pc.coalesce(*worker).take(take) if worker else _nulls(m)
    http_status = pc.if_else(pa.array(is_http), spans.int(HTTP_STATUS_KEYS).take(take),
                             pa.scalar(None, pa.int64()))
    rows["outcome"], rows["detail"] = _outcomes(spans, take, http_status, is_http)

    def only(mask: np.ndarray, values: pa.Array) -> pa.Array:
        return pc.if_else(pa.array(mask), values, pa.scalar(None, values.type))

    tools = pa.array(np.flatnonzero(is_tool), type=pa.int64())
    at_tools = take.take(tools)
    spread = np.full(m, -1, dtype=np.int64)
    spread[np.flatnonzero(is_tool)] = np.arange(len(tools))
    back = pa.array(spread, mask=spread < 0)  # a tool row's place among the tool rows
    own_thread = spans.text(THREAD_KEYS).take(take)
    rows["thread_id"] = only(is_queue, own_thread)
    rows["tool_call_id"] = _nulls(m)
    rows["tool_name"] = _tool_names(spans, at_tools).take(back)
    for name, values in zip(("args", "args_fingerprint", "subject", "amount", "currency"),
                            _tool_arguments(spans, at_tools), strict=True):
        rows[name] = values.take(back)
    rows["delivery_count"] = only(is_queue, counts.take(take))
    rows["message_id"] = only(is_queue, spans.text(("messaging.message.id",)).take(take))
    method = spans.text(HTTP_METHOD_KEYS).take(take)
    rows["method"] = only(is_http, _each_distinct(method, lambda v: v.upper(), pa.string()))
    path = spans.text(URL_KEYS).take(take)
    rows["path"] = only(is_http, _each_distinct(path, _url_path, pa.string()))
    rows["status"] = http_status
    resend = spans.int(("http.request.resend_count",)).take(take)
    stable = is_http & (kind[at] == _CLIENT) & spans.present("http.request.method")[at]
    rows["resend_count"] = only(is_http, pc.if_else(
        pa.array(stable & ~_valid(resend)), pa.scalar(0, pa.int64()), resend))
    call_keys = _keys(TOOL_CALL_ID_KEYS, options.tool_attribute)
    request_keys = _keys(REQUEST_ID_KEYS, options.request_id_attribute)
    rows["request_id"] = only(is_http, spans.text(request_keys).take(take))
    rows["idempotency_key"] = only(is_http, spans.text(IDEMPOTENCY_KEY_KEYS).take(take))
    rows["proxy_attempt"] = only(is_http, spans.int(PROXY_ATTEMPT_KEYS).take(take))
    link = np.where(is_queue, -1, at)
    return Block({name: rows[name].cast(ROW_TYPES[name]) for name in _Row._fields}, line,
                 range(first_line, first_line + cols.lines), link, _links(spans, tool, call_keys))


def _inherited(links: list[tuple[pa.Array, ...]]) -> tuple[pa.Array, pa.Array]:
    """(thread id, tool call id) of every span: its own, else its nearest ancestor's, as
    `interpret._inherited`. Decline when a span is given twice or the parents loop."""
    trace, span, parent, *own = (pa.concat_arrays([link[k] for link in links])
                                 for k in range(5))
    # a span as one integer: its trace's code and its span id's code (no text joined or hashed
    # twice); its parent found by a binary search for the same trace's parent's code
    if not len(trace):
        return own[0], own[1]
    traces, span_ids = pc.dictionary_encode(trace), pc.dictionary_encode(span)
    width = len(span_ids.dictionary) + 1
    trace_code = traces.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    key = trace_code * width + span_ids.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    if (ordered[1:] == ordered[:-1]).any():
        raise Decline("a span given twice")
    parent_code = pc.index_in(parent, value_set=span_ids.dictionary).fill_null(-1).to_numpy(
        zero_copy_only=False)
    wanted = trace_code * width + parent_code
    place = np.minimum(np.searchsorted(ordered, wanted), len(key) - 1)
    pointer = np.where((parent_code >= 0) & (ordered[place] == wanted), order[place], -1)
    every = np.arange(len(key))
    found = [np.where(_valid(ids), every, -1) for ids in own]
    reach = 1
    while (pointer >= 0).any():
        if reach > len(key):
            raise Decline("parent span ids that loop")
        up_ok = pointer >= 0
        for source in found:
            need = (source < 0) & up_ok
            source[need] = source[pointer[need]]
        pointer[up_ok] = pointer[pointer[up_ok]]
        reach *= 2
    return tuple(ids.take(pa.array(source, mask=source < 0))  # type: ignore[return-value]
                 for ids, source in zip(own, found, strict=True))


def _general_block(rows: SpanRows, lines: list[int]) -> Block:
    """The rows `SpanRows` made of the lines the columnar reader left to the general way."""
    columns, inherits, links = rows.unresolved()
    place = {key: n for n, key in enumerate(links)}
    link = np.array([-1 if key is None else place[key] for key in inherits], dtype=np.int64)
    keys = list(links)
    values = list(links.values())
    return Block(
        {name: pa.array(columns[name], ROW_TYPES[name]) for name in _Row._fields},
        np.array(lines, dtype=np.int64), range(0), link,
        (pa.array([k[0] for k in keys], pa.string()), pa.array([k[1] for k in keys], pa.string()),
         *(pa.array([v[k] for v in values], pa.string()) for k in range(3))))


def frame(blocks: list[Block], general: SpanRows, general_lines: list[int]) -> pd.DataFrame:
    """The timeline of every block's rows and those of `general`, in the file's order: the rows
    of a line read the general way go into the block that holds the line."""
    spare = _general_block(general, general_lines)
    thread, call = _inherited([block.links for block in (*blocks, spare)])  # with no rows too
    spare_rows = pa.table(spare.rows)
    pieces, links = [], []
    offset = 0
    for block in (*blocks, spare):
        block.link[block.link >= 0] += offset
        offset += len(block.links[0])
    for block in blocks:
        table, line, link = pa.table(block.rows), block.line, block.link
        low, high = np.searchsorted(spare.line, (block.lines.start, block.lines.stop))
        if high > low:  # lines of this block read the general way: their rows put in place
            line = np.concatenate([line, spare.line[low:high]])
            order = np.argsort(line, kind="stable")
            table = pa.concat_tables([table, spare_rows.slice(low, high - low)]).take(order)
            link = np.concatenate([link, spare.link[low:high]])[order]
        pieces.append(table)
        links.append(link)
    n = sum(len(link) for link in links)
    if not n:
        return from_columns({}, 0)
    table = pa.concat_tables(pieces).combine_chunks()  # one chunk a column, as from lists
    link = np.concatenate(links)
    inherits = pa.array(link, mask=link < 0)
    columns: dict[str, Any] = {name: table.column(name) for name in _Row._fields}
    text = ROW_TYPES["thread_id"]
    columns["thread_id"] = pc.if_else(pa.array(link >= 0), thread.take(inherits).cast(text),
                                      columns["thread_id"])
    columns["tool_call_id"] = call.take(inherits).cast(text)
    return from_columns({"source": [SOURCE] * n, **columns}, n)
