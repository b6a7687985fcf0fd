"""OTLP JSON spans (camelCase, as the OpenTelemetry SDK's exporter writes them) in the form
Phoenix's REST API answers them: `GET /v1/projects/{p}/spans/otlpv1` gives `{"data": [span],
"next_cursor": ...}`, each span snake_case OTLP as its pydantic models print it (Arize-ai/phoenix
`OtlpSpan`, `OtlpAnyValue`): every field of an AnyValue present, all but one null; ints and times
as numbers; no resource (a project holds the spans). The one home of that conversion: the lab's
trace server serves it, and tests write files of it.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["phoenix_any", "phoenix_attributes", "phoenix_span"]

_ANY_FIELDS = ("string_value", "bool_value", "int_value", "double_value", "array_value",
               "kvlist_value", "bytes_value")


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()


def phoenix_any(value: dict[str, Any]) -> dict[str, Any]:
    """An OTLP AnyValue with every typed field printed, the unset ones null."""
    out: dict[str, Any] = dict.fromkeys(_ANY_FIELDS)
    for key, inner in value.items():
        if key == "arrayValue":
            inner = {"values": [phoenix_any(v) for v in inner.get("values", [])]}
        elif key == "intValue":
            inner = int(inner)
        out[_snake(key)] = inner
    return out


def phoenix_attributes(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"key": kv["key"], "value": phoenix_any(kv["value"])} for kv in items]


def phoenix_span(span: dict[str, Any]) -> dict[str, Any]:
    status = span.get("status") or {}
    return {
        "trace_id": span["traceId"], "span_id": span["spanId"],
        "parent_span_id": span.get("parentSpanId"), "name": span["name"],
        "kind": span.get("kind", 0), "trace_state": None, "flags": span.get("flags"),
        "start_time_unix_nano": int(span["startTimeUnixNano"]),
        "end_time_unix_nano": int(span["endTimeUnixNano"]),
        "attributes": phoenix_attributes(span.get("attributes", [])),
        "dropped_attributes_count": 0, "dropped_events_count": 0, "dropped_links_count": 0,
        "events": [{"name": e["name"], "time_unix_nano": int(e["timeUnixNano"]),
                    "attributes": phoenix_attributes(e.get("attributes", [])),
                    "dropped_attributes_count": 0} for e in span.get("events", [])],
        "links": None,
        "status": {"code": status.get("code", 0), "message": status.get("message", "")},
    }
