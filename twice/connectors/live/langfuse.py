"""Langfuse's public API as a `TraceBackend`: `langfuse+https://host[:port][/base-path]` (Langfuse
Cloud is `langfuse+https://cloud.langfuse.com`, or `us.cloud.langfuse.com`; a self-hosted one
its own address).

- The keys: Basic auth with the public key as user and the secret key as password, Langfuse's
  scheme. They come from the URL's userinfo (`langfuse+https://pk-lf-...:sk-lf-...@host`: the
  web form puts its two password fields there) or, when the URL has none and the caller allows
  it (the command line), from `LANGFUSE_PUBLIC_KEY` / `LANGFUSE_SECRET_KEY`, the variables the
  SDK reads. Both are masked in every message, whatever a server echoes; never stored.
- `GET /api/public/v2/observations` (the read path of the SDK's generated client,
  `langfuse/api/observations/raw_client.py`; real-time, where the older endpoints may lag by
  minutes): `type`, `traceId`, `fromStartTime` / `toStartTime`, `fields` (field groups),
  `expandMetadata`, `limit` (at most 1000) and `cursor` -> `{"data": [observations], "meta":
  {"cursor"}}`.
- `find_traces`: the window's TOOL observations, kept when their session id or LangGraph's
  `thread_id` in their metadata is the thread (checked here: Langfuse keeps metadata values as
  the JSON text the SDK sent, so a metadata filter on the server would have to match the quotes);
  `get_trace`: every observation of one trace, with its input and metadata, kept with only the
  fields twice reads (the SDK writes its public key into every span's scope attributes).
- Paging is bounded (`MAX_PAGES`): a cursor that never ends costs at most that many requests,
  and what was read is kept with a warning.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from twice.connectors.base import LoadResult, SourceError, SourceWarning
from twice.connectors.live import LANGFUSE_PUBLIC_KEY_ENV, LANGFUSE_SECRET_KEY_ENV
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
from twice.connectors.spans.langfuse import hex_id, read_fields
from twice.formats import utc

name = "langfuse"
PATH = "/api/public/v2/observations"
PAGE = 1000  # the API's maximum
MAX_PAGES = 50
FIND_FIELDS = "core,basic,metadata"
TRACE_FIELDS = "core,basic,io,metadata"
# metadata values past 200 characters come cut unless named here
EXPAND = "tool_call_id,thread_id,langfuse_session_id"


def _iso(moment: datetime) -> str:
    return utc(moment).isoformat().replace("+00:00", "Z")


def _thread_of(obs: dict[str, Any]) -> set[str]:
    """The thread ids an observation names: its session, LangGraph's `thread_id`."""
    metadata = obs.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    found = set()
    for value in (obs.get("sessionId"), metadata.get("thread_id"),
                  metadata.get("langfuse_session_id")):
        text = text_value(value) if not isinstance(value, dict | list) else None
        if text is not None:
            found.add(text.strip('"'))
    return found


class LangfuseBackend(BackendBase):
    name = "langfuse"

    def __init__(self, endpoint: Endpoint, *, limits: Limits = DEFAULT_LIMITS,
                 tool_attribute: str | None = None, request_id_attribute: str | None = None,
                 page_size: int = PAGE, from_environment: bool = True) -> None:
        super().__init__(endpoint, limits=limits, tool_attribute=tool_attribute,
                         request_id_attribute=request_id_attribute)
        auth = endpoint.auth
        if (auth is None or not all(auth)) and from_environment:
            public = os.environ.get(LANGFUSE_PUBLIC_KEY_ENV, "").strip()
            secret = os.environ.get(LANGFUSE_SECRET_KEY_ENV, "").strip()
            auth = (public, secret) if public and secret else auth
        if auth is None or not all(auth):
            where = (f" (environment variables {LANGFUSE_PUBLIC_KEY_ENV} and "
                     f"{LANGFUSE_SECRET_KEY_ENV} hold none)" if from_environment else "")
            raise SourceError(endpoint.display, "no Langfuse keys: a public and a secret key "
                              "are needed" + where)
        self.http = HttpSource(Endpoint(endpoint.base_url, endpoint.display, auth,
                                        (*endpoint.secrets, *auth)), limits)
        self.page_size = page_size
        self._trace_ids: dict[str, str] = {}  # hex -> the trace id as Langfuse names it

    def _observations(self, params: dict[str, Any]) -> list[Any]:
        """Every observation the query matches, at most MAX_PAGES pages of them."""
        found: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            query = {**params, "limit": self.page_size, **({"cursor": cursor} if cursor else {})}
            doc = self.http.get_json(PATH, query)
            if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
                raise self.http.fail(f"GET {PATH}: not a Langfuse answer (no 'data' list)")
            found.extend(doc["data"])
            meta = doc.get("meta")
            cursor = meta.get("cursor") if isinstance(meta, dict) else None
            if not isinstance(cursor, str) or not cursor or cursor in seen or not doc["data"]:
                return found
            seen.add(cursor)
        self.warnings.append(SourceWarning(self.http.endpoint.display, (
            f"stopped after {MAX_PAGES} pages of observations; later observations not read")))
        return found

    def get_trace(self, trace_id: str) -> tuple[LoadResult, Any]:
        trace_id = require_trace_id(trace_id)
        asked = self._trace_ids.get(trace_id, trace_id)
        found = self._observations({"traceId": asked, "fields": TRACE_FIELDS,
                                    "expandMetadata": EXPAND})
        if not found:
            raise TraceNotFoundError(self.http.endpoint.display, f"trace {trace_id} not found")
        doc = {"data": [read_fields(o) for o in found], "meta": {}}
        locator = f"{self.http.endpoint.display}{PATH}?traceId={trace_id}"
        return self.parsed(locator, doc), doc

    def find_traces(self, *, service: str | None = None, tags: dict[str, str] | None = None,
                    start: datetime, end: datetime, limit: int = 20) -> list[str]:
        """Traces with a tool observation of the thread (`gen_ai.conversation.id`) in the
        window; `service` and other tags are not Langfuse's: an observation carries neither."""
        thread = (tags or {}).get("gen_ai.conversation.id")
        found = self._observations({"type": "TOOL", "fromStartTime": _iso(start),
                                    "toStartTime": _iso(end), "fields": FIND_FIELDS,
                                    "expandMetadata": EXPAND})
        ids: list[str] = []
        for obs in found:
            if not isinstance(obs, dict) or (thread is not None and thread not in _thread_of(obs)):
                continue
            trace_id = hex_id(obs.get("traceId"), 32)
            if trace_id is not None and trace_id not in ids:
                self._trace_ids[trace_id] = str(obs["traceId"])
                ids.append(trace_id)
        return ids[:limit]
