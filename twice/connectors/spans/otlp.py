"""OTLP JSON (`{"resourceSpans": [...]}`) into `SpanRecord`s.

Written by the Collector's file exporter and by `opentelemetry-exporter-otlp-json-file`
(`FileSpanExporter(path)` appends one export object per line; checked against 0.66b1): ids are
hex, times decimal strings of ns, `kind` an int, `status` `{}` when unset, attribute values
AnyValue objects with `intValue` as a string. Tolerated too: base64 ids, int times, enum names
(`SPAN_KIND_CLIENT`, `STATUS_CODE_ERROR`), proto field names in snake_case, and AnyValues with
every typed field present and all but one null (`{"string_value": "x", "int_value": null, ...}`:
Phoenix's REST API, whose pydantic models print every field).
"""

from __future__ import annotations

import functools
import operator
import re
from typing import Any

from twice.connectors._parsing import as_int, epoch_ns, span_id_hex, trace_id_hex
from twice.connectors.base import SourceWarning
from twice.connectors.spans.model import (
    INT64,
    LATEST_NS,
    MIN_NS,
    SpanKind,
    SpanRecord,
    SpanStatus,
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
    if not isinstance(value, dict):
        raise _Bad
    if len(value) > 1:  # every oneof field printed, the unset ones null (Phoenix)
        value = {k: v for k, v in value.items() if v is not None}
        if len(value) > 1:
            raise _Bad
    if not value:
        return None
    ((key, inner),) = value.items()
    if key == "stringValue" and isinstance(inner, str):  # by far the most common: no more work
        return inner
    if key == "intValue" and type(inner) is str and inner.isdigit() and inner.isascii() and len(
            inner) < 19:
        return int(inner)  # the SDK's int: a short decimal string (so within int64)
    if key == "arrayValue" and type(inner) is dict and len(inner) == 1:
        values = inner.get("values")
        if type(values) is list:  # captured headers: an array of strings
            texts = [v.get("stringValue") if type(v) is dict and len(v) == 1 else None
                     for v in values]
            if all(type(t) is str for t in texts):
                return texts
    tag = _tag(key)
    if tag == "stringvalue" and isinstance(inner, str):
        return inner
    if tag == "boolvalue" and isinstance(inner, bool):
        return inner
    if tag == "intvalue" and (number := as_int(inner)) is not None and number in INT64:
        return number  # past int64 is no OTLP int
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
    try:  # the usual list, all strings, read in one comprehension and then checked
        strings = {item["key"]: item["value"]["stringValue"] for item in items}
    except (KeyError, TypeError):
        pass  # some other value (or something unreadable): read item by item below
    else:
        if (all(type(text) is str for text in strings.values())
                and all(type(key) is str for key in strings)
                and all(len(item["value"]) == 1 for item in items)):
            return strings
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
    if not value:
        return SpanStatus.UNSET, None
    if len(value) == 1 and type(code := value.get("code")) is int and code in _STATUS:
        return _STATUS[code], None  # the SDK's usual `{"code": n}`
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
    # `_get` spelled out: this runs for every span of a file
    get = span.get
    if (value := get("traceId", _ABSENT)) is _ABSENT:
        value = get("trace_id")
    trace_id = trace_id_hex(value)
    if (value := get("spanId", _ABSENT)) is _ABSENT:
        value = get("span_id")
    span_id = span_id_hex(value)
    if trace_id is None or span_id is None:
        warn("no valid traceId/spanId; skipped")
        return None
    if (value := get("startTimeUnixNano", _ABSENT)) is _ABSENT:
        value = get("start_time_unix_nano")
    start = epoch_ns(value)
    if start is None:
        warn(f"span {span_id}: no readable startTimeUnixNano; skipped")
        return None
    if start < MIN_NS:
        warn(f"span {span_id}: startTimeUnixNano {start} is before 1973: not nanoseconds "
             "(seconds, ms or us?); skipped")
        return None
    if start >= LATEST_NS:
        warn(f"span {span_id}: startTimeUnixNano {start} is after 2100: not a real time; "
             "skipped")
        return None
    if (raw_end := get("endTimeUnixNano", _ABSENT)) is _ABSENT:
        raw_end = get("end_time_unix_nano")
    end = epoch_ns(raw_end)
    if end is None and raw_end not in (None, "", "0", 0):
        warn(f"span {span_id}: unreadable endTimeUnixNano; end left empty")
    elif end is not None and end < start:
        warn(f"span {span_id}: endTimeUnixNano is before startTimeUnixNano; end left empty")
        end = None
    elif end is not None and end >= LATEST_NS:
        warn(f"span {span_id}: endTimeUnixNano {end} is after 2100: not a real time; "
             "end left empty")
        end = None
    if (raw_parent := get("parentSpanId", _ABSENT)) is _ABSENT:
        raw_parent = get("parent_span_id")
    parent = span_id_hex(raw_parent) if raw_parent else None
    if parent is None and raw_parent and str(raw_parent).strip("0"):
        warn(f"span {span_id}: unreadable parentSpanId; treated as a root span")
    bad: list[str] = []
    attrs = attributes(_get(span, "attributes") or [], bad)
    events = _get(span, "events")
    exceptions = _exceptions(events, bad) if events else []
    if bad:
        warn(f"span {span_id}: unreadable attribute values ({', '.join(bad[:5])}); ignored")
    status, message = _status(_get(span, "status"))
    name = get("name")
    kind = get("kind")
    return SpanRecord(
        origin, trace_id, span_id, parent, name if isinstance(name, str) else None,
        _KINDS.get(kind, SpanKind.UNKNOWN) if type(kind) is int else _kind(kind),
        start, end, attrs, resource, status, message, exceptions,
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
            fast = _canonical_spans(spans, resource, origin, (i, j), warnings)
            if fast is not None:
                out.extend(fast)
                continue
            for k, span in enumerate(spans):
                rec = _span(span, resource, origin, (i, j, k), warnings)
                if rec is not None:
                    out.append(rec)
    return out


_HEX_DIGITS = "0123456789abcdef"
_NO_TRACE, _NO_SPAN = "0" * 32, "0" * 16


def _all_ids(values: list[Any], width: int, zero: str) -> bool:
    """Whether every value is an id in canonical form (lower-case hex of `width`, not zeros)."""
    try:
        joined = "".join(values)
    except TypeError:
        return False
    return (len(joined) == width * len(values) and not joined.strip(_HEX_DIGITS)
            and set(map(len, values)) == {width} and zero not in values)


def _all_times(values: list[Any]) -> list[int] | None:
    """The values as ns when every one is a decimal string of a time before 2100."""
    try:
        joined = "".join(values)
    except TypeError:
        return None
    if not (joined.isdigit() and joined.isascii()) or min(map(len, values)) == 0:
        return None
    if max(map(len, values)) > 19:
        return None
    numbers = list(map(int, values))
    return numbers if min(numbers) > 0 and max(numbers) < LATEST_NS else None


def _canonical_spans(
    spans: list[Any], resource: dict[str, Any], origin: str, where: tuple[int, int],
    warnings: list[SourceWarning],
) -> list[SpanRecord] | None:
    """The spans of one scope the fast way, when all of them have ids and times in the form the
    SDK's exporter writes (hex ids, decimal-string ns): the checks run over the whole batch at
    once instead of span by span. None when any span differs: `_span` then reads each one,
    with its own warnings. Gives exactly what `_span` would."""
    if not spans:
        return []
    try:
        trace_ids = [span["traceId"] for span in spans]
        span_ids = [span["spanId"] for span in spans]
        starts = [span["startTimeUnixNano"] for span in spans]
        ends = [span["endTimeUnixNano"] for span in spans]
    except (KeyError, TypeError, IndexError):  # not all dicts, or a field missing
        return None
    if type(spans[0]) is not dict or not all(type(span) is dict for span in spans):
        return None
    parents = [span.get("parentSpanId", _ABSENT) for span in spans]
    if _ABSENT in parents:  # absent: the snake_case spelling may be there instead
        parents = [p if p is not _ABSENT else span.get("parent_span_id")
                   for p, span in zip(parents, spans, strict=True)]
    given = [p for p in parents if p]
    if not (_all_ids(trace_ids, 32, _NO_TRACE) and _all_ids(span_ids, 16, _NO_SPAN)
            and (not given or _all_ids(given, 16, _NO_SPAN))):
        return None
    start_ns, end_ns = _all_times(starts), _all_times(ends)
    if (start_ns is None or end_ns is None or min(start_ns) < MIN_NS
            or not all(map(operator.ge, end_ns, start_ns))):
        return None
    out: list[SpanRecord] = []
    i, j = where
    for k, span in enumerate(spans):
        bad: list[str] = []
        attrs = attributes(span.get("attributes") or [], bad)
        events = span.get("events")
        exceptions = _exceptions(events, bad) if events else []
        if bad:
            warnings.append(SourceWarning(
                origin, f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]: span {span_ids[k]}: "
                        f"unreadable attribute values ({', '.join(bad[:5])}); ignored"))
        status, message = _status(span.get("status"))
        name = span.get("name")
        kind = span.get("kind")
        out.append(SpanRecord(
            origin, trace_ids[k], span_ids[k], parents[k] or None,
            name if isinstance(name, str) else None,
            _KINDS.get(kind, SpanKind.UNKNOWN) if type(kind) is int else _kind(kind),
            start_ns[k], end_ns[k], attrs, resource, status, message, exceptions,
        ))
    return out
