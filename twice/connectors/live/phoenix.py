"""Arize Phoenix's REST API as a `TraceBackend`: `phoenix+https://:API_KEY@host[/base]/PROJECT`
(the URL's last path segment is the project; without a path, Phoenix's `default` project).

- `GET /v1/projects/{project}/spans/otlpv1` (`start_time` inclusive, `end_time` exclusive, ISO;
  `trace_id` repeatable; `limit` at most 1000; `cursor`) -> `{"data": [span], "next_cursor"}`,
  each span snake_case OTLP with every AnyValue field printed (the spans connector reads it).
  Phoenix answers spans, not traces: `find_traces` lists the window's spans and keeps the trace
  ids of those carrying the tags (a thread id given as `gen_ai.conversation.id` also matches
  OpenInference's `session.id`), `get_trace` lists one trace's spans page by page.
- The API key is sent as `Authorization: Bearer` (Phoenix's scheme), never shown.
- Paging is bounded (`MAX_PAGES`): a server whose cursor never ends costs at most that many
  requests, and the spans read so far are kept with a warning.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

from twice.connectors._parsing import trace_id_hex
from twice.connectors.base import LoadResult, SourceWarning
from twice.connectors.live.traces import (
    DEFAULT_LIMITS,
    BackendBase,
    Endpoint,
    HttpSource,
    Limits,
    TraceNotFoundError,
    require_trace_id,
)
from twice.connectors.spans.interpret import text_value
from twice.formats import utc

name = "phoenix"
PAGE = 1000  # Phoenix's maximum
MAX_PAGES = 50
_THREAD_ALIASES = {"gen_ai.conversation.id": ("gen_ai.conversation.id", "session.id")}


def _iso(moment: datetime) -> str:
    return utc(moment).isoformat()


def _attribute_texts(span: Any) -> dict[str, str]:
    """A Phoenix span's attributes whose values are text (or print as text)."""
    out: dict[str, str] = {}
    items = span.get("attributes") if isinstance(span, dict) else None
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            continue
        value = item.get("value")
        if isinstance(value, dict):
            given = [v for v in value.values() if v is not None and not isinstance(v, dict)]
            if len(given) == 1 and (text := text_value(given[0])) is not None:
                out[item["key"]] = text
    return out


class PhoenixBackend(BackendBase):
    name = "phoenix"

    def __init__(self, endpoint: Endpoint, *, limits: Limits = DEFAULT_LIMITS,
                 tool_attribute: str | None = None,
                 request_id_attribute: str | None = None, page_size: int = PAGE) -> None:
        super().__init__(endpoint, limits=limits, tool_attribute=tool_attribute,
                         request_id_attribute=request_id_attribute)
        self.page_size = page_size
        # the URL's last path segment names the project; none: Phoenix's "default" project
        base, _, project = endpoint.base_url.rpartition("/")
        if "://" not in base or not project:
            base, project = endpoint.base_url, "default"
        self.project = project
        self.http = HttpSource(Endpoint(base, endpoint.display, endpoint.auth, endpoint.secrets),
                               limits, bearer=True)

    @property
    def _path(self) -> str:
        return f"/v1/projects/{quote(self.project, safe='')}/spans/otlpv1"

    def _pages(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Every page for `params`, at most MAX_PAGES of them."""
        pages: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        while len(pages) < MAX_PAGES:
            query = {**params, "limit": self.page_size,
                     **({"cursor": cursor} if cursor else {})}
            doc = self.http.get_json(self._path, query)
            if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
                raise self.http.fail(f"GET {self._path}: not a Phoenix answer (no 'data' list)")
            pages.append(doc)
            cursor = doc.get("next_cursor") if isinstance(doc.get("next_cursor"), str) else None
            if not cursor or cursor in seen:
                return pages
            seen.add(cursor)
        self.warnings.append(SourceWarning(self.http.endpoint.display, (
            f"stopped after {MAX_PAGES} pages of spans; later spans not read")))
        return pages

    def get_trace(self, trace_id: str) -> tuple[LoadResult, Any]:
        trace_id = require_trace_id(trace_id)
        pages = self._pages({"trace_id": trace_id})
        found = [span for page in pages for span in page["data"]]
        if not found:
            raise TraceNotFoundError(self.http.endpoint.display, f"trace {trace_id} not found")
        doc = {"data": found, "next_cursor": None}
        locator = f"{self.http.endpoint.display}{self._path}?trace_id={trace_id}"
        return self.parsed(locator, doc), doc

    def find_traces(self, *, service: str | None = None, tags: dict[str, str] | None = None,
                    start: datetime, end: datetime, limit: int = 20) -> list[str]:
        """`service` is the project's business here: a Phoenix span carries no resource."""
        wanted = {key: (str(value), _THREAD_ALIASES.get(key, (key,)))
                  for key, value in (tags or {}).items()}
        found: list[str] = []
        for page in self._pages({"start_time": _iso(start), "end_time": _iso(end)}):
            for span in page["data"]:
                texts = _attribute_texts(span)
                if not all(any(texts.get(k) == value for k in keys)
                           for value, keys in wanted.values()):
                    continue
                trace_id = trace_id_hex(span.get("trace_id"))
                if trace_id is not None and trace_id not in found:
                    found.append(trace_id)
        return found[:limit]
