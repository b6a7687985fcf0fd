"""LangSmith's REST API as a `TraceBackend`: `langsmith://PROJECT` (LangSmith's own API) or
`langsmith+https://host[/base-path]/PROJECT` (a self-hosted or compatible one; the URL's last
path segment is the project, URL-quoted if need be).

- The API key is read from the environment (`LANGSMITH_API_KEY`, as LangSmith's SDK reads it)
  when the backend is made, unless one is given (the web form's), sent as `x-api-key`, and
  never stored or shown (masked in every message, whatever a server echoes).
- `GET {base}/sessions?name=PROJECT&limit=1` -> `[project]`: the project's id (a "session").
- `POST {base}/runs/query` `{"session": [id], "start_time", "filter", "trace", "select",
  "limit", "cursor"}` -> `{"runs": [...], "cursors": {"next": ...}}`, as the SDK's
  `Client.list_runs` asks (`langsmith/client.py`, `_get_cursor_paginated_list`). The runs are
  those the spans connector reads from an export (twice.connectors.spans.langsmith).
- `find_traces`: the window's runs of the thread (the filter asks the server for the
  `metadata.thread_id` LangGraph stamps; the runs are checked here too, for a server that does
  not filter); `get_trace`: one trace's runs.
- Paging is bounded (`MAX_PAGES`): a cursor that never ends costs at most that many requests,
  and the runs read so far are kept with a warning.
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import unquote

import orjson

from twice.connectors.base import LoadResult, SourceError, SourceWarning
from twice.connectors.live import LANGSMITH_KEY_ENV
from twice.connectors.live.traces import (
    DEFAULT_LIMITS,
    LANGSMITH_CLOUD,
    BackendBase,
    Endpoint,
    HttpSource,
    Limits,
    TraceNotFoundError,
    require_trace_id,
)
from twice.connectors.spans.langsmith import iso_ns, uuid_hex
from twice.formats import utc

name = "langsmith"
KEY_ENV = LANGSMITH_KEY_ENV
PAGE = 100  # the runs API's largest page
MAX_PAGES = 50
# what a run needs to be read (the API answers fewer fields when asked for these)
SELECT = ["id", "trace_id", "parent_run_id", "name", "run_type", "start_time", "end_time",
          "error", "status", "extra", "inputs", "outputs", "session_id"]
# the tags investigate asks by, as LangGraph writes them into a run's metadata
_METADATA_KEYS = {"gen_ai.conversation.id": "thread_id"}


def _quoted(text: str) -> str:
    return orjson.dumps(text).decode()  # a JSON string is a filter string literal


class LangSmithBackend(BackendBase):
    name = "langsmith"

    def __init__(self, endpoint: Endpoint, *, limits: Limits = DEFAULT_LIMITS,
                 tool_attribute: str | None = None, request_id_attribute: str | None = None,
                 page_size: int = PAGE, api_key: str | None = None) -> None:
        super().__init__(endpoint, limits=limits, tool_attribute=tool_attribute,
                         request_id_attribute=request_id_attribute)
        base, _, project = endpoint.base_url.rpartition("/")
        if "://" not in base or not project:
            raise SourceError(endpoint.display, "name the project: langsmith://PROJECT or "
                              "langsmith+https://host/PROJECT")
        self.project = unquote(project)
        key = (os.environ.get(KEY_ENV, "") if api_key is None else api_key).strip()
        if not key and base == LANGSMITH_CLOUD:
            raise SourceError(endpoint.display, "no LangSmith API key" + (
                f" (environment variable {KEY_ENV} holds none)" if api_key is None else ""))
        self.http = HttpSource(Endpoint(base, endpoint.display, endpoint.auth,
                                        (*endpoint.secrets, *([key] if key else []))),
                               limits, headers={"x-api-key": key} if key else None)
        self.page_size = page_size
        self._project_id: str | None = None

    def project_id(self) -> str:
        """The project's id, asked once."""
        if self._project_id is None:
            found = self.http.get_json("/sessions", {"name": self.project, "limit": 1})
            match = [p for p in found if isinstance(p, dict) and p.get("name") == self.project
                     and isinstance(p.get("id"), str)] if isinstance(found, list) else []
            if not match:
                raise self.http.fail(f"no project named {self.project!r}")
            self._project_id = match[0]["id"]
        return self._project_id

    def _runs(self, body: dict[str, Any]) -> list[Any]:
        """Every run the query matches, at most MAX_PAGES pages of them."""
        query = {"session": [self.project_id()], "select": SELECT, "limit": self.page_size,
                 **body}
        runs: list[Any] = []
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            doc = self.http.post_json("/runs/query", query)
            if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
                raise self.http.fail("POST /runs/query: not a LangSmith answer (no 'runs' list)")
            runs.extend(doc["runs"])
            cursors = doc.get("cursors")
            cursor = cursors.get("next") if isinstance(cursors, dict) else None
            if not isinstance(cursor, str) or not cursor or cursor in seen or not doc["runs"]:
                return runs
            seen.add(cursor)
            query["cursor"] = cursor
        self.warnings.append(SourceWarning(self.http.endpoint.display, (
            f"stopped after {MAX_PAGES} pages of runs; later runs not read")))
        return runs

    def get_trace(self, trace_id: str) -> tuple[LoadResult, Any]:
        trace_id = require_trace_id(trace_id)
        runs = self._runs({"trace": str(uuid.UUID(trace_id))})
        if not runs:
            raise TraceNotFoundError(self.http.endpoint.display, f"trace {trace_id} not found")
        doc = {"runs": runs}
        locator = f"{self.http.endpoint.display}/runs/query?trace={trace_id}"
        return self.parsed(locator, doc), doc

    def find_traces(self, *, service: str | None = None, tags: dict[str, str] | None = None,
                    start: datetime, end: datetime, limit: int = 20) -> list[str]:
        """`service` is the project's business here: a run carries no service."""
        wanted = {_METADATA_KEYS.get(k, k): str(v) for k, v in (tags or {}).items()}
        body: dict[str, Any] = {"start_time": utc(start).isoformat()}
        if wanted:
            body["filter"] = "and(" + ", ".join(
                f"and(eq(metadata_key, {_quoted(k)}), eq(metadata_value, {_quoted(v)}))"
                for k, v in wanted.items()) + ")"
        lo, hi = utc(start).value, utc(end).value
        found: list[str] = []
        for run in self._runs(body):
            if not isinstance(run, dict):
                continue
            at = iso_ns(run.get("start_time"))
            extra = run.get("extra")
            metadata = extra.get("metadata") if isinstance(extra, dict) else None
            metadata = metadata if isinstance(metadata, dict) else {}
            if at is None or not lo <= at < hi or any(
                    str(metadata.get(k)) != v for k, v in wanted.items()):
                continue
            trace_id = uuid_hex(run.get("trace_id")) or uuid_hex(run.get("id"))
            if trace_id is not None and trace_id not in found:
                found.append(trace_id)
        return found[:limit]
