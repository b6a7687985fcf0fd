"""OTLP JSON lines (what a lab worker writes) as a Jaeger JSON file: exactly what Jaeger's query
API answers to `GET /api/traces?service=...` (the HTTP JSON API the Jaeger UI uses), i.e. what a
user saves from Jaeger.

The envelope is Jaeger's `structuredResponse` as its search handler fills it (jaeger v2.9.0
`cmd/query/app/http_handler.go`, `search` -> `tracesToResponse`; the same in v1.60): `data`
(the traces, each `{"traceID", "spans", "processes", "warnings"}`), `total`, `limit` and
`offset` left 0, `errors` null (a nil slice). The traces come from
`twice.lab.trace_server.OtlpStore`, the same OTLP -> Jaeger conversion the lab's trace server serves
(ids as Jaeger prints them, times in microseconds, tags typed, kind and status as `span.kind` /
`otel.status_code` / `error`, events as logs, arrays as JSON text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twice.lab.trace_server import OtlpStore, read_exports

__all__ = ["jaeger_response", "write_jaeger"]


def jaeger_response(otlp_jsonl: Path, service: str | None = None) -> dict[str, Any]:
    """The search answer for `service` (None: every service's traces, as one search per service
    would list them together), most recent trace first."""
    traces = OtlpStore(read_exports(otlp_jsonl)).jaeger_search(service)
    return {"data": traces, "total": 0, "limit": 0, "offset": 0, "errors": None}


def write_jaeger(otlp_jsonl: Path, out: Path, *, service: str | None = None) -> Path:
    """Write the Jaeger search answer for the spans of `otlp_jsonl` to `out`; returns `out`."""
    out.write_text(json.dumps(jaeger_response(otlp_jsonl, service)))
    return out
