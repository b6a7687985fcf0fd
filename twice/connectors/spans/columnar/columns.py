"""One table of OTLP lines flattened into a column per span field twice reads.

Every check the general way makes on ids, times and attribute values (the spans' and their
resource's) is made here over whole columns. A line holding any span the general way would warn
about (or read in a way this module does not) is declined: its spans are left out and its number
is given back, so that line goes the general way and gets the same records and warnings as before.
Attributes stay Arrow arrays of (key, value) pairs; `SpanColumns.attribute` pivots one key to a
value per span only when it is asked for. Of a span's events only its exception events are read
(as the general way reads only those): their attributes are pairs too, a slot per exception event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from twice.connectors.spans.model import LATEST_NS, MIN_NS


class Decline(Exception):
    """The columnar reader cannot read this block exactly as the general way would."""


def _true(mask: pa.Array) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _bad_ids(ids: pa.Array, width: int, *, optional: bool = False) -> np.ndarray:
    """Per span: the id is not lower-case hex of `width`, or all zeros, or absent (optional:
    absent or "" is a root)."""
    good = _true(pc.match_substring_regex(ids, f"^[0-9a-f]{{{width}}}$")) & \
        ~_true(pc.equal(ids, "0" * width))
    if optional:
        return ~good & _true(pc.is_valid(ids)) & ~_true(pc.equal(ids, ""))
    return ~good


def _times(times: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(ns, bad) per span: a time must be a decimal string of ns, after 0 and before 2100."""
    bad = _true(pc.invert(pc.match_substring_regex(times, r"^[0-9]{1,19}$"))) | \
        _true(pc.is_null(times))
    readable = pc.if_else(pa.array(bad), "1", times)
    ns = pc.cast(readable, pa.uint64()).to_numpy(zero_copy_only=False)
    bad |= (ns == 0) | (ns >= LATEST_NS)
    return np.where(bad, 0, ns).astype(np.int64), bad


@dataclass(frozen=True)
class Attribute:
    """One attribute key, a slot per span: its value as text (`stringValue`), as a number
    (`intValue`, read) or as a list of texts (`arrayValue`); all three null where the span does
    not have the key."""

    text: pa.Array
    number: pa.Array
    array: pa.Array

    @property
    def present(self) -> np.ndarray:
        return _true(pc.or_(pc.or_(pc.is_valid(self.text), pc.is_valid(self.number)),
                            pc.is_valid(self.array)))

    def python(self, where: np.ndarray) -> list[Any]:
        """The values at positions `where` as `otlp.any_value` gives them (None: absent)."""
        take = pa.array(where, type=pa.int64())
        return [t if t is not None else n if n is not None else a
                for t, n, a in zip(self.text.take(take).to_pylist(),
                                   self.number.take(take).to_pylist(),
                                   self.array.take(take).to_pylist(), strict=True)]


class _Pairs:
    """(key, value) pairs, each owned by one of `count` slots (a span, a resource)."""

    def __init__(self, names: pa.Array, values: pa.Array, owner: np.ndarray, count: int) -> None:
        coded = pc.dictionary_encode(names)  # a key is found by its code: no text compared
        self.codes = coded.indices.to_numpy(zero_copy_only=False)
        self.code = {key: n for n, key in enumerate(coded.dictionary.to_pylist())}
        self.owner, self.count = owner, count
        # the three kinds of value apart, once: a key's values are then taken from each
        self.text = pc.struct_field(values, "stringValue")
        self.number = pc.cast(pc.struct_field(values, "intValue"), pa.int64())  # checked digits
        self.array = _texts(pc.struct_field(pc.struct_field(values, "arrayValue"), "values"))
        self.has_number = _true(pc.is_valid(self.number))
        self.has_array = _true(pc.is_valid(self.array))

    def attribute(self, key: str) -> Attribute:
        """`key`'s value per slot; of a key given twice, the later (as in a dict)."""
        code = self.code.get(key)
        at = np.flatnonzero(self.codes == code) if code is not None else np.zeros(0, np.int64)
        owners = self.owner[at]
        if len(owners) > 1:
            later = np.append(owners[1:] != owners[:-1], True)  # owners are in order
            at, owners = at[later], owners[later]
        slot = np.full(self.count, -1, dtype=np.int64)
        slot[owners] = at
        index = pa.array(slot, mask=slot < 0)

        def taken(values: pa.Array, given: np.ndarray) -> pa.Array:
            return values.take(index) if given[at].any() else pa.nulls(self.count, values.type)

        return Attribute(self.text.take(index), taken(self.number, self.has_number),
                         taken(self.array, self.has_array))

    def keys(self) -> set[str]:
        return set(self.code)


def _texts(lists: pa.Array) -> pa.Array:
    """A list of `{"stringValue"}` structs as a list of strings."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    flat = pc.struct_field(lists.values, "stringValue")
    return pa.ListArray.from_arrays(lists.offsets, flat, mask=lists.is_null())


def _flat(attributes: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray, np.ndarray, pa.Array]:
    """(names, values, owner, pairs without a key, array values' items) of a list column of
    OTLP KeyValues, one pair a row: what `_pairs` and `_exception_pairs` judge."""
    pairs = pc.list_flatten(attributes)
    owner = pc.list_parent_indices(attributes).to_numpy()
    names = pc.struct_field(pairs, "key")
    values = pc.struct_field(pairs, "value")
    arrays = pc.struct_field(pc.struct_field(values, "arrayValue"), "values")
    return names, values, owner, _true(pc.is_null(names)), arrays


def _given(values: pa.Array, fields: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(how many of `fields` each value gives, an intValue given that is not short decimal
    digits) of a struct array of OTLP AnyValues."""
    given = sum(_true(pc.is_valid(pc.struct_field(values, f))).astype(np.int8) for f in fields)
    ints = pc.struct_field(values, "intValue")
    bad_int = _true(pc.and_(pc.is_valid(ints),
                            pc.invert(pc.match_substring_regex(ints, r"^[0-9]{1,18}$"))))
    return np.asarray(given), bad_int


def _pairs(attributes: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray, np.ndarray]:
    """(names, values, owner, bad pair) of a list column of OTLP KeyValues: a pair is bad when
    its value is not exactly one of the types the schema reads, or not one the fast way reads."""
    names, values, owner, bad, arrays = _flat(attributes)
    given, bad_int = _given(values, ("stringValue", "intValue"))
    bad |= (given + _true(pc.is_valid(arrays)) != 1) | bad_int
    holding = pc.struct_field(pc.list_flatten(arrays), "stringValue")
    if holding.null_count:  # an array value holding something other than strings
        item_owner = pc.list_parent_indices(arrays).to_numpy()
        bad[item_owner[_true(pc.is_null(holding))]] = True
    return names, values, owner, bad


_EVENT_SCALARS = ("stringValue", "intValue", "boolValue", "doubleValue", "bytesValue")


def _exception_pairs(attributes: pa.Array
                     ) -> tuple[pa.Array, pa.Array, np.ndarray, np.ndarray]:
    """As `_pairs`, of exception events' attributes (`schema.EVENT_VALUE`): a pair is good when
    its value is exactly one scalar of the schema's (an intValue of short decimal digits), or an
    array of such; every good one `otlp.any_value` reads without a warning. A bytesValue is bad
    too: the general way takes its base64 text for an exception's type or message, and
    `_Pairs` reads only a stringValue as text."""
    names, values, owner, bad, arrays = _flat(attributes)
    given, bad_int = _given(values, _EVENT_SCALARS)
    bad |= (given + _true(pc.is_valid(arrays)) != 1) | bad_int
    bad |= _true(pc.is_valid(pc.struct_field(values, "bytesValue")))
    items = pc.list_flatten(arrays)
    if len(items):
        item_given, item_bad = _given(items, _EVENT_SCALARS)
        item_owner = pc.list_parent_indices(arrays).to_numpy()
        bad[item_owner[(item_given != 1) | item_bad]] = True
    return names, values, owner, bad


def _kept_pairs(names: pa.Array, values: pa.Array, kept: np.ndarray
                ) -> tuple[pa.Array, pa.Array]:
    if kept.all():
        return names, values
    keep = pa.array(kept)
    return names.filter(keep), values.filter(keep)


@dataclass(frozen=True)
class SpanColumns:
    """A block's spans on lines read here, one array per field; `line` is each span's 0-based
    line in the block, `declined` the lines left to the general way."""

    line: np.ndarray
    trace_id: pa.Array
    span_id: pa.Array
    parent_span_id: pa.Array  # null for a root
    name: pa.Array
    kind: pa.Array  # the int; null when not given
    start_ns: np.ndarray
    end_ns: np.ndarray
    status_code: pa.Array  # null when not given
    status_message: pa.Array  # null when not given
    spans: _Pairs  # attributes, a slot per span
    resources: _Pairs  # resource attributes, a slot per ResourceSpans of the block
    resource: pa.Array  # each span's ResourceSpans
    exceptions: _Pairs  # attributes of the exception events, a slot per event
    exception_span: np.ndarray  # each exception event's span, in order
    declined: np.ndarray
    lines: int  # lines in the block

    def attribute(self, key: str) -> Attribute:
        return self.spans.attribute(key)

    def resource_attribute(self, key: str) -> Attribute:
        """`key` of each span's resource, a slot per span."""
        per_resource = self.resources.attribute(key)
        return Attribute(*(values.take(self.resource) for values in (
            per_resource.text, per_resource.number, per_resource.array)))


def span_columns(table: pa.Table, declined: np.ndarray | None = None) -> SpanColumns:
    """The spans of `table`; `declined`: lines (0-based in the block) to leave to the general
    way whatever they hold."""
    lines = table.column("resourceSpans").combine_chunks()
    if lines.null_count:
        raise Decline("a line without resourceSpans")
    resource_spans = pc.list_flatten(lines)
    line_of_rs = pc.list_parent_indices(lines).to_numpy()
    scopes_list = pc.struct_field(resource_spans, "scopeSpans")
    scopes = pc.list_flatten(scopes_list)
    rs_of_scope = pc.list_parent_indices(scopes_list).to_numpy()
    spans_list = pc.struct_field(scopes, "spans")
    spans = pc.list_flatten(spans_list)
    scope_of_span = pc.list_parent_indices(spans_list).to_numpy()
    rs_of_span = rs_of_scope[scope_of_span]
    line = line_of_rs[rs_of_span]
    trace_id, span_id = pc.struct_field(spans, "traceId"), pc.struct_field(spans, "spanId")
    parent = pc.struct_field(spans, "parentSpanId")
    bad = _bad_ids(trace_id, 32) | _bad_ids(parent, 16, optional=True) | _bad_ids(span_id, 16)
    start_ns, bad_start = _times(pc.struct_field(spans, "startTimeUnixNano"))
    end_ns, bad_end = _times(pc.struct_field(spans, "endTimeUnixNano"))
    bad |= bad_start | bad_end | (start_ns < MIN_NS) | (end_ns < start_ns)

    # an element that is null (`[null]`): the general way warns of it
    bad |= _true(pc.is_null(spans))
    null_scope = rs_of_scope[_true(pc.is_null(scopes))]
    null_rs = np.flatnonzero(_true(pc.is_null(resource_spans)))
    names, values, owner, bad_pair = _pairs(pc.struct_field(spans, "attributes"))
    bad[owner[bad_pair]] = True
    # exception events: one whose attributes the general way warns about declines its line
    events = pc.struct_field(spans, "events")
    every_event = pc.list_flatten(events)
    exception = _true(pc.equal(pc.struct_field(every_event, "name"), "exception"))
    exception_span = pc.list_parent_indices(events).to_numpy()[exception]
    e_names, e_values, e_owner, e_bad = _exception_pairs(pc.struct_field(
        every_event.filter(pa.array(exception)), "attributes"))
    bad[exception_span[e_owner[e_bad]]] = True
    declined_lines = np.zeros(len(lines), dtype=bool)
    if declined is not None:
        declined_lines[declined] = True
    declined_lines[line[bad]] = True
    declined_lines[line_of_rs[np.concatenate([null_scope, null_rs])]] = True
    resource = pc.struct_field(pc.struct_field(resource_spans, "resource"), "attributes")
    r_names, r_values, r_owner, r_bad = _pairs(resource)
    declined_lines[line_of_rs[r_owner[r_bad]]] = True  # the general way warns of these

    keep_span = ~declined_lines[line]
    kept_at = np.flatnonzero(keep_span)
    renumber = np.cumsum(keep_span) - 1  # a kept span's slot among the kept
    pair_kept = keep_span[owner]
    r_kept = ~declined_lines[line_of_rs[r_owner]]
    keep = pa.array(keep_span)
    e_kept = keep_span[exception_span]  # an exception event of a span kept
    every = bool(keep_span.all())  # the usual block: nothing to filter, nothing copied

    def kept(array: pa.Array) -> pa.Array:
        return array if every else array.filter(keep)

    parents = kept(parent)
    parents = pc.if_else(pc.equal(parents, ""), pa.scalar(None, pa.string()), parents)
    status = pc.struct_field(spans, "status")
    return SpanColumns(
        line=line[keep_span], trace_id=kept(trace_id), span_id=kept(span_id),
        parent_span_id=parents, name=kept(pc.struct_field(spans, "name")),
        kind=kept(pc.struct_field(spans, "kind")),
        start_ns=start_ns[keep_span], end_ns=end_ns[keep_span],
        status_code=kept(pc.struct_field(status, "code")),
        status_message=kept(pc.struct_field(status, "message")),
        spans=_Pairs(*_kept_pairs(names, values, pair_kept), renumber[owner[pair_kept]],
                     len(kept_at)),
        resources=_Pairs(*_kept_pairs(r_names, r_values, r_kept), r_owner[r_kept],
                         len(resource_spans)),
        resource=pa.array(rs_of_span[kept_at], type=pa.int64()),
        exceptions=_Pairs(*_kept_pairs(e_names, e_values, e_kept[e_owner]),
                          (np.cumsum(e_kept) - 1)[e_owner[e_kept[e_owner]]], int(e_kept.sum())),
        exception_span=renumber[exception_span[e_kept]],
        declined=np.flatnonzero(declined_lines), lines=len(lines))
