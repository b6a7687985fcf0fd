"""The fast way through a line of OTLP JSON as the SDK's and the Collector's exporters write it.

A JSON line is decoded straight into typed structs by msgspec (in C, ~1.8x faster than
`orjson.loads` into dicts, and no per-field type checks left to do in Python; `gc=False`: they
hold no cycles, so the collector need not track them), and its spans
become `SpanRecord`s with the ids and times checked a whole batch at a time. This path only
takes lines in the exporters' own form (camelCase fields, hex ids, decimal-string ns, every
attribute value readable); for anything else it answers None and the line goes the general way
(`orjson.loads` + `twice.connectors.spans.otlp`), which reads what can be read and warns about the
rest. So the records are exactly those the general way gives; only the time differs.
"""

from __future__ import annotations

import operator
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from twice.connectors.jsonfile import loads
from twice.connectors.spans.model import MIN_NS, SpanKind, SpanRecord, SpanStatus
from twice.connectors.spans.otlp import (
    _KINDS,
    _NO_SPAN,
    _NO_TRACE,
    _STATUS,
    _all_ids,
    _all_times,
    _Bad,
    _exceptions,
    _kind,
    _status,
    any_value,
)


class _AnyValue(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """An AnyValue: the fields not given are UNSET. A struct, not a dict: faster to decode, and
    a string value is read without a look-up. Values other than a string or a short decimal
    int are put back into the dict `spans_otlp.any_value` reads, as on the general way."""

    stringValue: str | UnsetType = UNSET  # noqa: N815 - OTLP JSON's own field names
    intValue: str | int | UnsetType = UNSET  # noqa: N815
    arrayValue: Any = UNSET  # noqa: N815
    boolValue: Any = UNSET  # noqa: N815
    doubleValue: Any = UNSET  # noqa: N815
    kvlistValue: Any = UNSET  # noqa: N815
    bytesValue: Any = UNSET  # noqa: N815


_VALUE_FIELDS = _AnyValue.__struct_fields__


class _KeyValue(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    key: str
    value: _AnyValue


class _Status(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    code: int | UnsetType = UNSET
    message: Any = UNSET


class _Span(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    traceId: str  # noqa: N815 - OTLP JSON's own field names
    spanId: str  # noqa: N815
    startTimeUnixNano: str  # noqa: N815
    endTimeUnixNano: str  # noqa: N815
    parentSpanId: str = ""  # noqa: N815
    name: Any = None
    kind: Any = None
    attributes: list[_KeyValue] = []
    events: Any = None
    status: _Status | None = None
    traceState: Any = None  # noqa: N815
    flags: Any = None
    droppedAttributesCount: Any = None  # noqa: N815
    droppedEventsCount: Any = None  # noqa: N815
    links: Any = None
    droppedLinksCount: Any = None  # noqa: N815


class _Scope(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    spans: list[_Span] = []
    scope: Any = None
    schemaUrl: Any = None  # noqa: N815


class _Resource(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    attributes: list[_KeyValue] = []
    droppedAttributesCount: Any = None  # noqa: N815
    entityRefs: Any = None  # noqa: N815


class _ResourceSpans(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    resource: _Resource | None = None
    scopeSpans: list[_Scope] = []  # noqa: N815
    schemaUrl: Any = None  # noqa: N815


class _Export(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    resourceSpans: list[_ResourceSpans]  # noqa: N815


_DECODER = msgspec.json.Decoder(_Export)
_new_record = tuple.__new__  # a SpanRecord without its Python-level `__new__` (a call per span)


class FastDocument:
    """One decoded OTLP line, and its bytes in case it has to go the general way."""

    __slots__ = ("export", "line")

    def __init__(self, export: _Export, line: bytes) -> None:
        self.export = export
        self.line = line

    def general(self) -> Any:
        """The line as the general way reads it: `orjson.loads`."""
        return loads(self.line)


def decode(line: bytes) -> FastDocument | None:
    """The line decoded, when it is an OTLP export in the exporters' form; None otherwise."""
    if not line.startswith(b'{"resourceSpans":'):  # the exporters' first key: others go by
        return None
    try:
        return FastDocument(_DECODER.decode(line), line)
    except msgspec.DecodeError:  # also its ValidationError: not this form
        return None


def records(doc: FastDocument, origin: str) -> list[SpanRecord] | None:
    """The spans of a decoded line; None when some part of it needs the general way."""
    out: list[SpanRecord] = []
    for rs in doc.export.resourceSpans:
        resource: dict[str, Any] = {}
        if rs.resource is not None:
            readable = _attributes(rs.resource.attributes)
            if readable is None:
                return None
            resource = readable
        for ss in rs.scopeSpans:
            found = _records(ss.spans, resource, origin)
            if found is None:
                return None
            out.extend(found)
    return out


def _attributes(kvs: list[_KeyValue]) -> dict[str, Any] | None:
    """As `spans_otlp.attributes`; None (the general way) when a value is unreadable."""
    out: dict[str, Any] = {}
    for kv in kvs:
        value = kv.value
        text = value.stringValue
        if text is not UNSET:  # the usual attribute: a string, and nothing else beside it
            if (value.intValue is UNSET and value.arrayValue is UNSET
                    and value.boolValue is UNSET and value.doubleValue is UNSET
                    and value.kvlistValue is UNSET and value.bytesValue is UNSET):
                out[kv.key] = text
                continue
            return None  # two fields: no AnyValue
        digits = value.intValue  # the SDK's ints: short decimal strings
        if (type(digits) is str and digits.isdigit() and digits.isascii() and len(digits) < 19
                and value.arrayValue is UNSET and value.boolValue is UNSET
                and value.doubleValue is UNSET and value.kvlistValue is UNSET
                and value.bytesValue is UNSET):
            out[kv.key] = int(digits)
            continue
        array = value.arrayValue  # captured headers: an array of strings
        if (type(array) is dict and len(array) == 1 and type(values := array.get("values")) is list
                and value.boolValue is UNSET and value.doubleValue is UNSET
                and value.kvlistValue is UNSET and value.bytesValue is UNSET
                and digits is UNSET):
            if len(values) == 1:  # the usual header: one value
                only = values[0]
                if (type(only) is dict and len(only) == 1
                        and type(header := only.get("stringValue")) is str):
                    out[kv.key] = [header]
                    continue
            else:
                texts = [v.get("stringValue") if type(v) is dict and len(v) == 1 else None
                         for v in values]
                if all(type(t) is str for t in texts):
                    out[kv.key] = texts
                    continue
        given = {name: inner for name, inner in zip(_VALUE_FIELDS, msgspec.structs.astuple(value),
                                                     strict=True) if inner is not UNSET}
        try:
            out[kv.key] = any_value(given)
        except _Bad:
            return None
    return out


def _span_status(status: _Status | None) -> tuple[SpanStatus, str | None]:
    """As `spans_otlp._status` on the dict the struct was read from."""
    if status is None:
        return SpanStatus.UNSET, None
    code, message = status.code, status.message
    if message is UNSET:
        if code in _STATUS:  # the SDK's usual `{"code": n}`
            return _STATUS[code], None  # type: ignore[index]
        if code is UNSET:
            return SpanStatus.UNSET, None  # `{}`
    given = {name: inner for name, inner in (("code", code), ("message", message))
             if inner is not UNSET}
    return _status(given)


def _records(spans: list[_Span], resource: dict[str, Any], origin: str
             ) -> list[SpanRecord] | None:
    """As `spans_otlp._canonical_spans`, on structs; None when any span needs a warning."""
    if not spans:
        return []
    trace_ids = [span.traceId for span in spans]
    span_ids = [span.spanId for span in spans]
    parents = [span.parentSpanId for span in spans]
    given = [p for p in parents if p]
    if not (_all_ids(trace_ids, 32, _NO_TRACE) and _all_ids(span_ids, 16, _NO_SPAN)
            and (not given or _all_ids(given, 16, _NO_SPAN))):
        return None
    start_ns = _all_times([span.startTimeUnixNano for span in spans])
    end_ns = _all_times([span.endTimeUnixNano for span in spans])
    if (start_ns is None or end_ns is None or min(start_ns) < MIN_NS
            or not all(map(operator.ge, end_ns, start_ns))):
        return None
    out: list[SpanRecord] = []
    for k, span in enumerate(spans):
        attrs = _attributes(span.attributes)
        if attrs is None:
            return None
        exceptions: list[tuple[str | None, str | None]] = []
        if span.events:
            bad: list[str] = []
            exceptions = _exceptions(span.events, bad)
            if bad:
                return None
        reported = span.status
        if reported is None:
            status, message = SpanStatus.UNSET, None
        elif reported.message is UNSET and reported.code in _STATUS:  # the SDK's `{"code": n}`
            status, message = _STATUS[reported.code], None  # type: ignore[index]
        else:
            status, message = _span_status(reported)
        name, kind = span.name, span.kind
        out.append(_new_record(SpanRecord, (  # every field given: the tuple as is
            origin, trace_ids[k], span_ids[k], parents[k] or None,
            name if isinstance(name, str) else None,
            _KINDS.get(kind, SpanKind.UNKNOWN) if type(kind) is int else _kind(kind),
            start_ns[k], end_ns[k], attrs, resource, status, message, exceptions,
        )))
    return out
