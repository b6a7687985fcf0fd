"""Grafana Tempo's HTTP query API as a `TraceBackend`.

- `GET /api/v2/traces/{id}` -> `{"trace": {"resourceSpans": [...]}}` (Tempo 2.7+), else the v1
  `GET /api/traces/{id}` -> `{"batches": [...]}`; both OTLP JSON (with `Accept:
  application/json`; protobuf otherwise), ids often base64, enums by name: the spans connector's
  OTLP reader copes. v2 is tried first; a 404 there followed by an answer from v1 means an older
  Tempo, and later calls go to v1 directly. A 404 from both is a missing trace.
- `GET /api/search?q=<TraceQL>&start=<unix s>&end=<unix s>&limit=N` -> `{"traces": [{"traceID",
  ...}], "metrics"}` (`traces` is absent when nothing matched). Tempo trims leading zeros from
  trace ids; they are returned padded to 32 hex digits.

Tags and service become one TraceQL spanset filter, so one span must match all of them (as in
Jaeger): `{ .k = "v" && resource.service.name = "S" }`. Values are compared as strings.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import orjson

from twice.connectors._parsing import trace_id_hex
from twice.connectors.base import LoadResult
from twice.connectors.live.traces import (
    DEFAULT_LIMITS,
    BackendBase,
    Endpoint,
    Limits,
    TraceNotFoundError,
    require_trace_id,
    tempo_export,
    unix_seconds,
)

name = "tempo"

_BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def _literal(value: str) -> str:
    """A TraceQL string literal (Go-style escapes; JSON's escapes are a subset)."""
    return orjson.dumps(value).decode()


def _attribute(key: str) -> str:
    return f".{key}" if _BARE_NAME.fullmatch(key) else f".{_literal(key)}"


def traceql(service: str | None = None, tags: dict[str, str] | None = None) -> str:
    """`{ .k = "v" && resource.service.name = "S" }`; `{}` (every trace) with neither."""
    conditions = [f"{_attribute(k)} = {_literal(str(v))}" for k, v in (tags or {}).items()]
    if service:
        conditions.append(f"resource.service.name = {_literal(service)}")
    return "{ " + " && ".join(conditions) + " }" if conditions else "{}"


class TempoBackend(BackendBase):
    name = "tempo"

    def __init__(self, endpoint: Endpoint, *, limits: Limits = DEFAULT_LIMITS,
                 tool_attribute: str | None = None,
                 request_id_attribute: str | None = None) -> None:
        super().__init__(endpoint, limits=limits, tool_attribute=tool_attribute,
                         request_id_attribute=request_id_attribute)
        self.has_v2: bool | None = None  # unknown until a v2 call answers or 404s before v1 does

    def _fetch(self, trace_id: str) -> tuple[str, Any] | None:
        """(path, document) of a trace, or None when the backend has no such trace."""
        if self.has_v2 is not False:
            path = f"/api/v2/traces/{trace_id}"
            doc = self.http.get_json(path, missing_ok=True)
            if doc is not None:
                self.has_v2 = True
                return path, doc
            if self.has_v2:
                return None
        path = f"/api/traces/{trace_id}"
        doc = self.http.get_json(path, missing_ok=True)
        if doc is None:
            return None
        self.has_v2 = False
        return path, doc

    def get_trace(self, trace_id: str) -> tuple[LoadResult, Any]:
        trace_id = require_trace_id(trace_id)
        fetched = self._fetch(trace_id)
        if fetched is None:
            raise TraceNotFoundError(self.http.endpoint.display, f"trace {trace_id} not found")
        path, doc = fetched
        try:
            export = tempo_export(doc)
        except ValueError as exc:
            raise self.http.fail(f"GET {path}: {exc}") from None
        if not export["resourceSpans"]:
            raise TraceNotFoundError(self.http.endpoint.display, f"trace {trace_id} not found")
        locator = f"{self.http.endpoint.display}{path}"
        return self.parsed(locator, export), doc

    def find_traces(self, *, service: str | None = None, tags: dict[str, str] | None = None,
                    start: datetime, end: datetime, limit: int = 20) -> list[str]:
        params = {"q": traceql(service, tags), "start": unix_seconds(start),
                  "end": unix_seconds(end, up=True), "limit": limit}
        doc = self.http.get_json("/api/search", params)
        traces = doc.get("traces", []) if isinstance(doc, dict) else None
        if not isinstance(traces, list):
            raise self.http.fail("GET /api/search: not a Tempo answer (no 'traces' list)")
        found: list[str] = []
        for trace in traces:
            trace_id = trace_id_hex(trace.get("traceID")) if isinstance(trace, dict) else None
            if trace_id is not None and trace_id not in found:
                found.append(trace_id)
        return found[:limit]
