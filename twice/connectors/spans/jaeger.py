"""Jaeger JSON (the UI's trace download / the query API's `/api/traces`) into `SpanRecord`s.

Shape (jaeger's `model/json`): `{"data": [trace]}` or a bare list of traces, a trace being
`{"traceID", "spans": [...], "processes": {"p1": {"serviceName", "tags"}}}` and a span
`{"traceID", "spanID", "operationName", "references": [{"refType", "traceID", "spanID"}],
"startTime" (us), "duration" (us), "tags": [{"key", "type", "value"}], "logs":
[{"timestamp", "fields"}], "processID"}`. Jaeger prints trace ids without leading zeros
(`%x%016x`), so they are left-padded to 32 hex digits to match the OTLP form of the same trace.
OTel data exported to Jaeger keeps its attribute names as tags, the span kind in `span.kind`,
the status in `otel.status_code` / `otel.status_description` (and `error=true`), exceptions as
logs with `event=exception`; arrays become JSON text.
"""

from __future__ import annotations

from typing import Any

from twice.connectors._parsing import as_int, epoch_ns, span_id_hex, trace_id_hex
from twice.connectors.base import SourceWarning
from twice.connectors.spans.interpret import text_value
from twice.connectors.spans.model import (
    INT64,
    LATEST_NS,
    MIN_NS,
    SpanKind,
    SpanRecord,
    SpanStatus,
)

_KINDS = {k.value: k for k in SpanKind if k != SpanKind.UNKNOWN}


def tags(items: Any, bad: list[str]) -> dict[str, Any]:
    """`[{"key", "type", "value"}]` as a dict; names of unreadable entries go to `bad`."""
    out: dict[str, Any] = {}
    if not isinstance(items, list):
        bad.append("(tags is not a list)")
        return out
    for item in items:
        key = item.get("key") if isinstance(item, dict) else None
        if not isinstance(key, str) or "value" not in item or isinstance(item["value"], dict):
            bad.append(key if isinstance(key, str) else "(entry without a key)")
            continue
        value = item["value"]
        if item.get("type") == "int64" and ((number := as_int(value)) is None
                                            or number not in INT64):
            bad.append(key)  # an int64 tag that is no int64 (JSON readers make 2**64 a float)
            continue
        out[key] = value
    return out


def _status(attrs: dict[str, Any]) -> tuple[SpanStatus, str | None]:
    code = (text_value(attrs.get("otel.status_code")) or "").upper()
    message = text_value(attrs.get("otel.status_description"))
    if code == "ERROR" or text_value(attrs.get("error")) == "true":
        return SpanStatus.ERROR, message
    return (SpanStatus.OK if code == "OK" else SpanStatus.UNSET), message


def _exceptions(logs: Any, bad: list[str]) -> list[tuple[str | None, str | None]]:
    out: list[tuple[str | None, str | None]] = []
    for log in logs if isinstance(logs, list) else []:
        if not isinstance(log, dict):
            continue
        fields = tags(log.get("fields", []), bad)
        event = text_value(fields.get("event"))
        if event == "exception":
            out.append((text_value(fields.get("exception.type")),
                        text_value(fields.get("exception.message"))))
        elif event == "error":  # OpenTracing's error log
            message = text_value(fields.get("message")) or text_value(fields.get("error.object"))
            out.append((text_value(fields.get("error.kind")), message))
    return out


def _parent(span: dict[str, Any], trace_id: str) -> str | None:
    references = span.get("references")
    for ref in references if isinstance(references, list) else []:
        if (isinstance(ref, dict) and ref.get("refType") == "CHILD_OF"
                and trace_id_hex(ref.get("traceID")) in (trace_id, None)):
            return span_id_hex(ref.get("spanID"))
    return span_id_hex(span.get("parentSpanID"))  # deprecated field, still written by some


def _processes(trace: dict[str, Any], bad: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    processes = trace.get("processes")
    for pid, process in (processes.items() if isinstance(processes, dict) else []):
        if isinstance(process, dict):
            resource = tags(process.get("tags", []), bad)
            if isinstance(process.get("serviceName"), str):
                resource.setdefault("service.name", process["serviceName"])
            out[pid] = resource
    return out


def _span(
    span: Any, trace: dict[str, Any], processes: dict[str, dict[str, Any]], origin: str,
    where: str, warnings: list[SourceWarning],
) -> SpanRecord | None:
    def warn(detail: str) -> None:
        warnings.append(SourceWarning(origin, f"{where}: {detail}"))

    if not isinstance(span, dict):
        warn("not a span object; skipped")
        return None
    trace_id = trace_id_hex(span.get("traceID") or trace.get("traceID"))
    span_id = span_id_hex(span.get("spanID"))
    if trace_id is None or span_id is None:
        warn("no valid traceID/spanID; skipped")
        return None
    start = epoch_ns(span.get("startTime"), scale=1000)
    if start is None:
        warn(f"span {span_id}: no readable startTime; skipped")
        return None
    if start < MIN_NS:
        warn(f"span {span_id}: startTime {start // 1000} is before 1973: not microseconds "
             "(seconds or ms?); skipped")
        return None
    if start >= LATEST_NS:
        warn(f"span {span_id}: startTime {start // 1000} is after 2100: not a real time; "
             "skipped")
        return None
    duration = as_int(span.get("duration"))
    # past pandas' last nanosecond (year 2262) the end is as unreadable as a garbled duration
    end = epoch_ns(start + duration * 1000) if duration is not None and duration >= 0 else None
    if end is None and span.get("duration") is not None:
        warn(f"span {span_id}: unreadable duration; end left empty")
    elif end is not None and end >= LATEST_NS:
        warn(f"span {span_id}: duration {duration} ends after 2100: not a real time; "
             "end left empty")
        end = None
    bad: list[str] = []
    attrs = tags(span.get("tags", []), bad)
    exceptions = _exceptions(span.get("logs"), bad)
    resource = processes.get(str(span.get("processID")), {})
    if not resource and isinstance(span.get("process"), dict):
        resource = _processes({"processes": {"_": span["process"]}}, bad).get("_", {})
    if bad:
        warn(f"span {span_id}: unreadable tags ({', '.join(bad[:5])}); ignored")
    status, message = _status(attrs)
    kind = _KINDS.get((text_value(attrs.get("span.kind")) or "").lower(), SpanKind.UNKNOWN)
    name = span.get("operationName")
    return SpanRecord(
        origin=origin, trace_id=trace_id, span_id=span_id, parent_span_id=_parent(span, trace_id),
        name=name if isinstance(name, str) else None, kind=kind, start_ns=start, end_ns=end,
        attributes=attrs, resource=resource, status=status, status_message=message,
        exceptions=exceptions,
    )


def jaeger_spans(traces: list[Any], origin: str, warnings: list[SourceWarning]) -> list[SpanRecord]:
    """Every readable span of a list of Jaeger traces; unreadable parts become warnings."""
    out: list[SpanRecord] = []
    for i, trace in enumerate(traces):
        if not isinstance(trace, dict) or not isinstance(trace.get("spans"), list):
            warnings.append(SourceWarning(origin, f"data[{i}] is not a Jaeger trace; skipped"))
            continue
        bad: list[str] = []
        processes = _processes(trace, bad)
        if bad:
            warnings.append(SourceWarning(
                origin, f"data[{i}]: unreadable process tags ({', '.join(bad[:5])}); ignored"))
        for k, span in enumerate(trace["spans"]):
            rec = _span(span, trace, processes, origin, f"data[{i}].spans[{k}]", warnings)
            if rec is not None:
                out.append(rec)
    return out
