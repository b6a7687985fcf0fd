"""One table of OTLP lines flattened into a column per span field twice reads.

Every check the general way makes on ids, times and attribute values is made here over whole
columns. A line holding any span the general way would warn about (or read in a way this module
does not) is declined: its spans are left out and its number is given back, so that line goes
the general way and gets the same records and warnings as before.
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


@dataclass(frozen=True)
class SpanColumns:
    """A block's spans on lines read here, one array per field; `line` is each span's 0-based
    line in the block, `declined` the lines left to the general way."""

    line: np.ndarray
    trace_id: np.ndarray
    span_id: np.ndarray
    parent_span_id: np.ndarray  # None for a root
    name: np.ndarray
    kind: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    status_code: np.ndarray
    attributes: dict[str, np.ndarray]  # key -> a value per span (None where absent)
    declined: np.ndarray
    lines: int  # lines in the block


def _true(mask: pa.Array) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _bad_ids(ids: pa.Array, width: int, *, optional: bool = False) -> np.ndarray:
    """Per span: the id is not lower-case hex of `width`, or all zeros (optional: "" or absent
    is a root)."""
    wrong = pc.invert(pc.match_substring_regex(ids, f"^[0-9a-f]{{{width}}}$"))
    wrong = pc.or_(wrong, pc.equal(ids, "0" * width))
    if optional:
        return _true(pc.and_(wrong, pc.not_equal(ids, "")))
    return _true(pc.or_(wrong, pc.is_null(ids)))


def _times(times: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(ns, bad) per span: a time must be a decimal string of ns, after 0 and before 2100."""
    bad = _true(pc.invert(pc.match_substring_regex(times, r"^[0-9]{1,19}$"))) | \
        _true(pc.is_null(times))
    readable = pc.if_else(pa.array(bad), "1", times)
    ns = pc.cast(readable, pa.uint64()).to_numpy(zero_copy_only=False)
    bad |= (ns == 0) | (ns >= LATEST_NS)
    return np.where(bad, 0, ns).astype(np.int64), bad


def _value(value: dict[str, Any]) -> Any:
    """One attribute value as `otlp.any_value` gives it (checked: exactly one field given)."""
    if (text := value["stringValue"]) is not None:
        return text
    if (digits := value["intValue"]) is not None:
        return int(digits)
    return [item["stringValue"] for item in value["arrayValue"]["values"]]


def span_columns(table: pa.Table, keys: tuple[str, ...]) -> SpanColumns:
    """The spans of `table`, with the attributes named by `keys` pivoted to columns."""
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
    line = line_of_rs[rs_of_scope[scope_of_span]]
    trace_id, span_id = pc.struct_field(spans, "traceId"), pc.struct_field(spans, "spanId")
    parent = pc.struct_field(spans, "parentSpanId")
    bad = _bad_ids(trace_id, 32) | _bad_ids(span_id, 16) | _bad_ids(parent, 16, optional=True)
    start_ns, bad_start = _times(pc.struct_field(spans, "startTimeUnixNano"))
    end_ns, bad_end = _times(pc.struct_field(spans, "endTimeUnixNano"))
    bad |= bad_start | bad_end | (start_ns < MIN_NS) | (end_ns < start_ns)

    attributes = pc.struct_field(spans, "attributes")
    pairs = pc.list_flatten(attributes)
    owner = pc.list_parent_indices(attributes).to_numpy()
    names = pc.struct_field(pairs, "key")
    values = pc.struct_field(pairs, "value")
    texts, ints = pc.struct_field(values, "stringValue"), pc.struct_field(values, "intValue")
    arrays = pc.struct_field(pc.struct_field(values, "arrayValue"), "values")
    given = sum(_true(pc.is_valid(v)).astype(np.int8) for v in (texts, ints, arrays))
    bad_pair = (given != 1) | _true(pc.is_null(names))
    bad_pair |= _true(pc.and_(pc.is_valid(ints),
                              pc.invert(pc.match_substring_regex(ints, r"^[0-9]{1,18}$"))))
    holding = pc.struct_field(pc.list_flatten(arrays), "stringValue")
    if holding.null_count:  # an array value holding something other than strings
        item_owner = pc.list_parent_indices(arrays).to_numpy()
        bad_pair[item_owner[_true(pc.is_null(holding))]] = True
    np.logical_or.at(bad, owner[bad_pair], True)

    declined_lines = np.zeros(len(lines), dtype=bool)
    np.logical_or.at(declined_lines, line, bad)
    keep_span = ~declined_lines[line]
    pair_kept = keep_span[owner]
    pivoted: dict[str, np.ndarray] = {}
    for key in keys:
        mask = _true(pc.equal(names, key)) & pair_kept
        column = np.full(len(spans), None, dtype=object)
        column[owner[mask]] = [_value(v) for v in pc.filter(values, pa.array(mask)).to_pylist()]
        pivoted[key] = column[keep_span]  # a later pair of one key overwrites, as in a dict

    def kept(array: pa.Array) -> np.ndarray:
        return array.to_numpy(zero_copy_only=False)[keep_span]

    parents = kept(parent)
    parents[parents == ""] = None
    return SpanColumns(
        line=line[keep_span], trace_id=kept(trace_id), span_id=kept(span_id),
        parent_span_id=parents, name=kept(pc.struct_field(spans, "name")),
        kind=kept(pc.struct_field(spans, "kind")),
        start_ns=start_ns[keep_span], end_ns=end_ns[keep_span],
        status_code=kept(pc.struct_field(pc.struct_field(spans, "status"), "code")),
        attributes=pivoted, declined=np.flatnonzero(declined_lines),
        lines=len(lines))
