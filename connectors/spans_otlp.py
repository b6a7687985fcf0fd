"""OTLP JSON (`{"resourceSpans": [...]}`) into `SpanRecord`s.

Written by the Collector's file exporter and by `opentelemetry-exporter-otlp-json-file`
(`FileSpanExporter(path)` appends one export object per line; checked against 0.66b1): ids are
hex, times decimal strings of ns, `kind` an int, `status` `{}` when unset, attribute values
AnyValue objects with `intValue` as a string. Tolerated too: base64 ids, int times, enum names
(`SPAN_KIND_CLIENT`, `STATUS_CODE_ERROR`), proto field names in snake_case.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from connectors.base import SourceWarning
from connectors.spans_model import (
    SpanKind,
    SpanRecord,
    SpanStatus,
    as_int,
    epoch_ns,
    span_id_hex,
    trace_id_hex,
)

# proto enum values: 0 is SPAN_KIND_UNSPECIFIED / STATUS_CODE_UNSET
_KINDS = dict(enumerate((SpanKind.INTERNAL, SpanKind.SERVER, SpanKind.CLIENT, SpanKind.PRODUCER,
                         SpanKind.CONSUMER), start=1))
_KIND_NAMES = {name: kind for kind in _KINDS.values()
               for name in (f"SPAN_KIND_{kind.upper()}", kind.upper())}
_STATUS = dict(enumerate((SpanStatus.UNSET, SpanStatus.OK, SpanStatus.ERROR)))
_STATUS_NAMES = {name: status for status in _STATUS.values()
                 for name in (f"STATUS_CODE_{status.upper()}", status.upper())}


class _Bad(Exception):
    """An attribute value that is not an AnyValue."""


@functools.lru_cache(maxsize=64)
def _tag(key: str) -> str:
    """An AnyValue's key, whatever its spelling (`stringValue`, `string_value`): `stringvalue`."""
    return key.replace("_", "").lower()


@functools.cache
def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()


_ABSENT = object()


def _get(obj: dict[str, Any], camel: str) -> Any:
    """A field by its JSON (lowerCamelCase) name, or by its proto (snake_case) name."""
    value = obj.get(camel, _ABSENT)
    return obj.get(_snake(camel)) if value is _ABSENT else value


def any_value(value: Any) -> Any:
    """Plain Python value of an OTLP AnyValue; raises _Bad for a shape that is not one."""
    if not isinstance(value, dict) or len(value) > 1:
        raise _Bad
    if not value:
        return None
    ((key, inner),) = value.items()
    if key == "stringValue" and isinstance(inner, str):  # by far the most common: no more work
        return inner
    tag = _tag(key)
    if tag == "stringvalue" and isinstance(inner, str):
        return inner
    if tag == "boolvalue" and isinstance(inner, bool):
        return inner
    if tag == "intvalue" and (number := as_int(inner)) is not None:
        return number
    if tag == "doublevalue":
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return float(inner)
        if inner in ("NaN", "Infinity", "-Infinity"):  # proto3 JSON spelling of non-finites
            return float(inner)
    if tag == "bytesvalue" and isinstance(inner, str):
        return inner  # base64 text: kept as is
    if tag == "arrayvalue" and isinstance(inner, dict):
        values = _get(inner, "values") or []
        if isinstance(values, list):
            return [any_value(v) for v in values]
    if tag == "kvlistvalue" and isinstance(inner, dict):
        return attributes(_get(inner, "values") or [], [])
    raise _Bad


def attributes(items: Any, bad: list[str]) -> dict[str, Any]:
    """`[{"key", "value": AnyValue}]` as a dict; names of unreadable entries go to `bad`."""
    out: dict[str, Any] = {}
    if not isinstance(items, list):
        bad.append("(attributes is not a list)")
        return out
    for item in items:
        key = item.get("key") if isinstance(item, dict) else None
        if not isinstance(key, str):
            bad.append("(entry without a key)")
            continue
        value = item.get("value", {})
        text = value.get("stringValue") if type(value) is dict and len(value) == 1 else None
        if type(text) is str:
            out[key] = text  # the usual attribute, a string: no need for the general reader
            continue
        try:
            out[key] = any_value(value)
        except _Bad:
            bad.append(key)
    return out


def _kind(value: Any) -> SpanKind:
    if isinstance(value, int) and not isinstance(value, bool):
        return _KINDS.get(value, SpanKind.UNKNOWN)
    if isinstance(value, str):
        return _KIND_NAMES.get(value.upper(), SpanKind.UNKNOWN)
    return SpanKind.UNKNOWN


def _status(value: Any) -> tuple[SpanStatus, str | None]:
    if not isinstance(value, dict):
        return SpanStatus.UNSET, None
    code = _get(value, "code")
    number = as_int(code)
    status = (_STATUS.get(number, SpanStatus.UNSET) if number is not None
              else _STATUS_NAMES.get(str(code).upper(), SpanStatus.UNSET))
    message = _get(value, "message")
    return status, message if isinstance(message, str) and message else None


def _exceptions(events: Any, bad: list[str]) -> list[tuple[str | None, str | None]]:
    out: list[tuple[str | None, str | None]] = []
    for event in events if isinstance(events, list) else []:
        if isinstance(event, dict) and event.get("name") == "exception":
            attrs = attributes(_get(event, "attributes") or [], bad)
            kind, message = attrs.get("exception.type"), attrs.get("exception.message")
            out.append((kind if isinstance(kind, str) else None,
                        message if isinstance(message, str) else None))
    return out


def _span(
    span: Any, resource: dict[str, Any], origin: str, where: tuple[int, int, int],
    warnings: list[SourceWarning],
) -> SpanRecord | None:
    def warn(detail: str) -> None:
        i, j, k = where  # the path is only spelled out for a warning: most spans have none
        warnings.append(SourceWarning(
            origin, f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]: {detail}"))

    if not isinstance(span, dict):
        warn("not a span object; skipped")
        return None
    trace_id, span_id = trace_id_hex(_get(span, "traceId")), span_id_hex(_get(span, "spanId"))
    if trace_id is None or span_id is None:
        warn("no valid traceId/spanId; skipped")
        return None
    start = epoch_ns(_get(span, "startTimeUnixNano"))
    if start is None:
        warn(f"span {span_id}: no readable startTimeUnixNano; skipped")
        return None
    raw_end = _get(span, "endTimeUnixNano")
    end = epoch_ns(raw_end)
    if end is None and raw_end not in (None, "", "0", 0):
        warn(f"span {span_id}: unreadable endTimeUnixNano; end left empty")
    raw_parent = _get(span, "parentSpanId")
    parent = span_id_hex(raw_parent)
    if parent is None and raw_parent and str(raw_parent).strip("0"):
        warn(f"span {span_id}: unreadable parentSpanId; treated as a root span")
    bad: list[str] = []
    attrs = attributes(_get(span, "attributes") or [], bad)
    events = _get(span, "events")
    exceptions = _exceptions(events, bad) if events else []
    if bad:
        warn(f"span {span_id}: unreadable attribute values ({', '.join(bad[:5])}); ignored")
    status, message = _status(_get(span, "status"))
    name = _get(span, "name")
    return SpanRecord(
        origin=origin, trace_id=trace_id, span_id=span_id, parent_span_id=parent,
        name=name if isinstance(name, str) else None, kind=_kind(_get(span, "kind")),
        start_ns=start, end_ns=end, attributes=attrs, resource=resource, status=status,
        status_message=message, exceptions=exceptions,
    )


def _list(obj: dict[str, Any], *names: str) -> list[Any] | None:
    for name in names:
        value = _get(obj, name)
        if value is not None:
            return value if isinstance(value, list) else None
    return []


def otlp_spans(doc: dict[str, Any], origin: str, warnings: list[SourceWarning]) -> list[SpanRecord]:
    """Every readable span of one OTLP export object; unreadable parts become warnings."""
    out: list[SpanRecord] = []
    resource_spans = _list(doc, "resourceSpans")
    if resource_spans is None:
        warnings.append(SourceWarning(origin, "resourceSpans is not a list; skipped"))
        return out
    for i, rs in enumerate(resource_spans):
        if not isinstance(rs, dict):
            warnings.append(SourceWarning(origin, f"resourceSpans[{i}] is not an object; skipped"))
            continue
        resource_obj = _get(rs, "resource")
        bad: list[str] = []
        resource = attributes(_get(resource_obj, "attributes") or [], bad) if isinstance(
            resource_obj, dict) else {}
        if bad:
            warnings.append(SourceWarning(
                origin, f"resourceSpans[{i}]: unreadable resource attributes ({', '.join(bad[:5])})"
                "; ignored"))
        # `instrumentationLibrarySpans`: the name before OTLP 0.15 (still met in old dumps)
        scope_spans = _list(rs, "scopeSpans", "instrumentationLibrarySpans")
        if scope_spans is None:
            warnings.append(SourceWarning(origin, f"resourceSpans[{i}].scopeSpans is not a list"
                                                  "; skipped"))
            continue
        for j, ss in enumerate(scope_spans):
            spans = _list(ss, "spans") if isinstance(ss, dict) else None
            if spans is None:
                warnings.append(SourceWarning(
                    origin, f"resourceSpans[{i}].scopeSpans[{j}] has no span list; skipped"))
                continue
            for k, span in enumerate(spans):
                rec = _span(span, resource, origin, (i, j, k), warnings)
                if rec is not None:
                    out.append(rec)
    return out
