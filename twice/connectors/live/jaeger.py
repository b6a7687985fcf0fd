"""Jaeger's HTTP JSON query API (the one the Jaeger UI uses) as a `TraceBackend`.

- `GET /api/traces/{id}` -> `{"data": [trace], "total", "limit", "offset", "errors"}`; a missing
  trace is a 404 with `errors: [{"code": 404, "msg": "trace not found"}]`;
- `GET /api/traces?service=S&tags={"k":"v"}&start=<us>&end=<us>&limit=N` -> `{"data": [traces]}`.
  Jaeger requires `service`; without one, every service `GET /api/services` lists is searched.

Jaeger prints trace ids without leading zeros; ids are returned padded to 32 hex digits.
Times come in microseconds, so rows from Jaeger are at microsecond precision.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from twice.connectors._parsing import trace_id_hex
from twice.connectors.base import LoadResult
from twice.connectors.live.traces import BackendBase, TraceNotFoundError, epoch_us, require_trace_id

name = "jaeger"


class JaegerBackend(BackendBase):
    name = "jaeger"

    def get_trace(self, trace_id: str) -> tuple[LoadResult, Any]:
        trace_id = require_trace_id(trace_id)
        path = f"/api/traces/{trace_id}"
        doc = self.http.get_json(path, missing_ok=True)
        data = self._data(path, doc) if doc is not None else None
        if not data:
            raise TraceNotFoundError(self.http.endpoint.display, f"trace {trace_id} not found")
        locator = f"{self.http.endpoint.display}{path}"
        return self.parsed(locator, doc), doc

    def _data(self, path: str, doc: Any) -> list[Any]:
        """The `data` list of an answer; errors Jaeger reports (other than "not found") fail."""
        if not isinstance(doc, dict) or "data" not in doc:
            raise self.http.fail(f"GET {path}: not a Jaeger answer (no 'data' list)")
        errors = doc.get("errors")
        failures = [e for e in (errors if isinstance(errors, list) else [])
                    if not (isinstance(e, dict) and e.get("code") == 404)]
        if failures and not doc["data"]:
            msgs = [str(e.get("msg") if isinstance(e, dict) else e) for e in failures]
            raise self.http.fail(f"GET {path}: {'; '.join(msgs)}")
        data = doc["data"]
        if data is not None and not isinstance(data, list):
            raise self.http.fail(f"GET {path}: not a Jaeger answer (no 'data' list)")
        return data or []

    def services(self) -> list[str]:
        names = self._data("/api/services", self.http.get_json("/api/services"))
        return [n for n in names if isinstance(n, str)]

    def find_traces(self, *, service: str | None = None, tags: dict[str, str] | None = None,
                    start: datetime, end: datetime, limit: int = 20) -> list[str]:
        params: dict[str, Any] = {"start": epoch_us(start), "end": epoch_us(end), "limit": limit}
        if tags:
            params["tags"] = orjson.dumps({k: str(v) for k, v in tags.items()}).decode()
        found: list[str] = []
        for svc in [service] if service else self.services():
            doc = self.http.get_json("/api/traces", {**params, "service": svc})
            for trace in self._data("/api/traces", doc):
                trace_id = _trace_id(trace)
                if trace_id is not None and trace_id not in found:
                    found.append(trace_id)
        return found[:limit]


def _trace_id(trace: Any) -> str | None:
    if not isinstance(trace, dict):
        return None
    found = trace_id_hex(trace.get("traceID"))
    if found is None and isinstance(trace.get("spans"), list) and trace["spans"]:
        first = trace["spans"][0]
        found = trace_id_hex(first.get("traceID")) if isinstance(first, dict) else None
    return found
