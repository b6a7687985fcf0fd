"""Trace backends: fetch spans from a Jaeger, Grafana Tempo, Phoenix, LangSmith or Langfuse query
API into timeline rows.

`backend_from_url("jaeger+http://host:16686")` or `("tempo+https://user:token@host/tempo")` gives
a `TraceBackend`: `find_traces` turns a service / tags / time window into trace ids,
`get_trace` turns one id into the same rows the spans connector makes from a file (it reuses its
parsers), plus the JSON document as the backend returned it; `save_traces` writes those documents
in a form the spans connector reads back (Jaeger: `{"data": [traces]}`; Tempo: OTLP JSON lines).

Credentials in the URL are sent as HTTP basic auth (Phoenix: its API key, the URL's password
or lone user name, as a bearer token; LangSmith: the key in LANGSMITH_API_KEY as `x-api-key`,
never in the URL; Langfuse: its public and secret key as basic auth, from the URL or
LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY) and never shown: errors and row origins name
the URL with the password masked, and a backend's answer quoted in an error (a 401 page that
echoes the Authorization header or the URL) goes through `redact` with the URL's credentials.
Every failure to get an answer (unreachable, timeout, HTTP error, a body that is not JSON) is
a `SourceError`; a trace the backend does not hold is a `TraceNotFoundError` (a
`SourceError`), since the user asked for that trace by id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import orjson

from twice.connectors import spans
from twice.connectors._parsing import trace_id_hex
from twice.connectors.base import LoadResult, SourceError, SourceWarning, credentials, redact
from twice.connectors.jsonfile import TooDeep, loads
from twice.connectors.live.http import (
    DEFAULT_LIMITS,
    Answer,
    HttpRefused,
    Limits,
    excerpt,
    fetch,
)
from twice.formats import utc

__all__ = ["ACCEPTED_FORMS", "Endpoint", "HttpSource", "Limits", "TraceBackend",
           "TraceNotFoundError", "backend_from_url", "epoch_us", "save_traces", "unix_seconds"]

ACCEPTED_FORMS = ("jaeger+http://host:16686", "jaeger+https://host", "tempo+http://host:3200",
                  "tempo+https://user:token@host/base-path",
                  "phoenix+https://:api-key@host/project", "langsmith://project",
                  "langsmith+https://host/base-path/project",
                  "langfuse+https://host", "langfuse+http://public-key:secret-key@host:3000")
BACKENDS = ("jaeger", "tempo", "phoenix", "langsmith", "langfuse")
# `langsmith://PROJECT`: LangSmith's own API (its key from LANGSMITH_API_KEY, never in the URL)
LANGSMITH_CLOUD = "https://api.smith.langchain.com"
_REASON_MAX = 300


class TraceBackend(Protocol):
    name: str  # "jaeger" | "tempo" | "phoenix" | "langsmith" | "langfuse"

    def get_trace(self, trace_id: str) -> tuple[LoadResult, Any]:
        """Rows of one trace, and the raw JSON document the backend returned (for saving)."""
        ...

    def find_traces(self, *, service: str | None = None, tags: dict[str, str] | None = None,
                    start: datetime, end: datetime, limit: int = 20) -> list[str]:
        """Ids (32 lower-case hex) of traces with a span matching service and tags in the
        window, most recent first as the backend orders them."""
        ...


class TraceNotFoundError(SourceError):
    """The backend answered, and holds no trace with that id."""


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # scheme://host[:port][/base-path], no credentials
    display: str  # what messages and rows name: "<backend>+<url>" with the password masked
    auth: tuple[str, str] | None = field(default=None, repr=False)  # from the URL's userinfo
    secrets: tuple[str, ...] = field(default=(), repr=False)  # masked in every message


def parse_url(url: str) -> tuple[str, Endpoint]:
    """(backend name, endpoint) of a `jaeger+`, `tempo+`, `phoenix+`, `langsmith+` or
    `langfuse+http(s)://` URL, or `langsmith://PROJECT`."""
    if url.strip().lower().startswith("langsmith://"):
        url = f"langsmith+{LANGSMITH_CLOUD}/{url.strip()[len('langsmith://'):]}"
    backend, plus, rest = url.strip().partition("+")
    why = ""
    try:
        parts = urlsplit(rest) if plus else None
        hostname = parts.hostname if parts is not None else None
        if parts is not None:
            parts.port  # noqa: B018 (raises for a port out of range or not a number)
    except ValueError as exc:  # urlsplit's own words, e.g. "Invalid IPv6 URL"
        parts, hostname, why = None, None, f" ({exc})"
    if (parts is None or backend.lower() not in BACKENDS
            or parts.scheme.lower() not in ("http", "https") or not hostname):
        raise ValueError(f"not a trace backend URL{why}: {redact(url, credentials(url))!r}; "
                         "accepted forms: "
                         + ", ".join(ACCEPTED_FORMS))
    backend = backend.lower()
    host = parts.netloc.rpartition("@")[2]
    path = parts.path.rstrip("/")
    auth = None
    shown_user = ""
    if parts.username is not None or parts.password is not None:
        auth = (unquote(parts.username or ""), unquote(parts.password or ""))
        # a user with no password is most likely a token: mask it whole
        shown_user = f"{parts.username}:***@" if parts.password is not None else "***@"
    secrets = tuple(credentials(rest))
    if backend == "langfuse" and auth is not None:
        shown_user = "***@"  # Langfuse's public key is half of its credentials: shown by neither
        secrets = (*secrets, *credentials(f"http://{auth[0]}@host"))
    display = redact(f"{backend}+{parts.scheme}://{shown_user}{host}{path}", secrets)
    return backend, Endpoint(f"{parts.scheme}://{host}{path}", display, auth, secrets)


def backend_from_url(url: str, *, timeout_s: float = 10.0, limits: Limits | None = None,
                     tool_attribute: str | None = None,
                     request_id_attribute: str | None = None,
                     api_key: str | None = None) -> TraceBackend:
    """A Jaeger, Tempo, Phoenix, LangSmith or Langfuse backend for `url`; ValueError naming the
    accepted forms otherwise.

    `timeout_s`: the longest wait for a read (`limits` sets every bound at once);
    `tool_attribute` / `request_id_attribute`: as for `twice.connectors.spans.load`;
    `api_key`: LangSmith's key (None: from LANGSMITH_API_KEY; "": none, as the web app asks, so
    the server's own key is never lent to a user of its form); for Langfuse, None lets the keys
    come from LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY when the URL has none, and any string
    (the web form's) keeps to the URL's."""
    backend, endpoint = parse_url(url)
    bounds = limits or Limits(connect_s=min(5.0, timeout_s), read_s=timeout_s)
    options: dict[str, Any] = {"limits": bounds, "tool_attribute": tool_attribute,
                               "request_id_attribute": request_id_attribute}
    if backend == "jaeger":
        from twice.connectors.live.jaeger import JaegerBackend

        return JaegerBackend(endpoint, **options)
    if backend == "phoenix":
        from twice.connectors.live.phoenix import PhoenixBackend

        return PhoenixBackend(endpoint, **options)
    if backend == "langsmith":
        from twice.connectors.live.langsmith import LangSmithBackend

        return LangSmithBackend(endpoint, api_key=api_key, **options)
    if backend == "langfuse":
        from twice.connectors.live.langfuse import LangfuseBackend

        return LangfuseBackend(endpoint, from_environment=api_key is None, **options)
    from twice.connectors.live.tempo import TempoBackend

    return TempoBackend(endpoint, **options)


def require_trace_id(trace_id: str) -> str:
    """32 lower-case hex digits of a trace id given as hex (leading zeros may be missing)."""
    text = trace_id.strip() if isinstance(trace_id, str) else ""
    hex_id = trace_id_hex(text) if 0 < len(text) <= 32 else None
    if hex_id is None:
        raise ValueError(f"not a trace id (up to 32 hex digits): {trace_id!r}")
    return hex_id


def epoch_us(moment: datetime) -> int:
    """Microseconds since the epoch (a time without a zone is UTC)."""
    return int(utc(moment).value) // 1000


def unix_seconds(moment: datetime, *, up: bool = False) -> int:
    seconds = int(utc(moment).value) / 10**9  # int / int: correctly rounded
    return math.ceil(seconds) if up else math.floor(seconds)


class HttpSource:
    """GET JSON from one backend within `limits` (twice.connectors.live.http: no redirect to
    another host, time limits, a size cap); every failure is a SourceError naming the masked
    URL, quoting at most a short redacted excerpt of what the backend said."""

    def __init__(self, endpoint: Endpoint, limits: Limits, *, bearer: bool = False,
                 headers: dict[str, str] | None = None) -> None:
        self.endpoint = endpoint
        self.limits = limits
        self.bearer = bearer  # the URL's credentials as a bearer token (Phoenix), not basic auth
        self.headers = headers or {}  # sent with every request (LangSmith's x-api-key)

    def fail(self, reason: str) -> SourceError:
        return SourceError(self.endpoint.display,
                           redact(reason, self.endpoint.secrets)[:_REASON_MAX])

    def get_json(self, path: str, params: dict[str, Any] | None = None, *,
                 missing_ok: bool = False) -> Any:
        """The parsed JSON answer; None for a 404 when `missing_ok`."""
        return self._json("GET", path, params, None, missing_ok=missing_ok)

    def post_json(self, path: str, body: Any) -> Any:
        """The parsed JSON answer to `body` POSTed as JSON."""
        return self._json("POST", path, None, orjson.dumps(body), missing_ok=False)

    def _json(self, method: str, path: str, params: dict[str, Any] | None,
              content: bytes | None, *, missing_ok: bool) -> Any:
        headers = {"Accept": "application/json", **self.headers}
        if content is not None:
            headers["Content-Type"] = "application/json"
        auth = self.endpoint.auth
        if self.bearer and auth is not None:
            headers["Authorization"] = f"Bearer {auth[1] or auth[0]}"
            auth = None
        try:
            answer = fetch(method, self.endpoint.base_url + path, params=params,
                           content=content, headers=headers, auth=auth, limits=self.limits)
        except HttpRefused as exc:
            raise self.fail(f"{method} {path}: {exc}") from None
        if answer.status == 404 and missing_ok:
            return None
        if answer.status >= 400:
            raise self.fail(f"HTTP {answer.status} for {method} {path}: "
                            f"{_error_text(answer, self.endpoint.secrets)}")
        try:
            return loads(answer.content)
        except TooDeep as exc:
            raise self.fail(f"{method} {path}: the answer is {exc.msg}") from None
        except orjson.JSONDecodeError:
            kind = excerpt(answer.headers.get("content-type", "no content type"))
            start = excerpt(answer.text(), self.endpoint.secrets)
            raise self.fail(f"{method} {path} answered {kind}, not JSON: {start!r}") from None


class BackendBase:
    """What every trace backend holds: its HTTP source, how to read tool / request ids, and the
    warnings its paging left for the next trace it reads."""

    def __init__(self, endpoint: Endpoint, *, limits: Limits = DEFAULT_LIMITS,
                 tool_attribute: str | None = None,
                 request_id_attribute: str | None = None) -> None:
        self.http = HttpSource(endpoint, limits)
        self.tool_attribute = tool_attribute
        self.request_id_attribute = request_id_attribute
        self.warnings: list[SourceWarning] = []

    def parsed(self, locator: str, doc: Any) -> LoadResult:
        """One trace's answer read as spans, the pending warnings first (then cleared)."""
        result = spans.parse_spans([(locator, doc)], locator, tool_attribute=self.tool_attribute,
                                   request_id_attribute=self.request_id_attribute)
        result.warnings[:0] = self.warnings
        self.warnings = []
        return result


def _error_text(answer: Answer, secrets: tuple[str, ...]) -> str:
    """The backend's own words for an error, as a short excerpt: Jaeger's `errors[].msg`, else
    the body's start."""
    try:
        body = orjson.loads(answer.content)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("errors"), list):
        msgs = [str(e.get("msg")) for e in body["errors"] if isinstance(e, dict)]
        if msgs:
            return excerpt("; ".join(msgs), secrets)
    return excerpt(answer.text(), secrets) or answer.reason


# -- saving -----------------------------------------------------------------------------------
def _jaeger_traces(doc: Any) -> list[Any]:
    if isinstance(doc, list):
        return [t for d in doc for t in _jaeger_traces(d)]
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        return list(doc["data"])
    if isinstance(doc, dict) and "spans" in doc:
        return [doc]
    raise ValueError("not a Jaeger answer: expected {'data': [traces]} or a trace")


def tempo_export(doc: Any) -> dict[str, Any]:
    """`{"resourceSpans": [...]}` of a Tempo answer (v2 `{"trace": ...}`, v1 `{"batches"}`)."""
    if isinstance(doc, dict):
        if isinstance(doc.get("trace"), dict):
            doc = doc["trace"]
        if isinstance(doc.get("batches"), list):
            return {"resourceSpans": doc["batches"]}
        if isinstance(doc.get("resourceSpans"), list):
            return {"resourceSpans": doc["resourceSpans"]}
    raise ValueError("not a Tempo answer: expected {'trace': {'resourceSpans'}} or {'batches'}")


def save_traces(docs: list[Any], backend: str, path: Path) -> None:
    """Write fetched documents so the spans connector reads them back: Jaeger ->
    `{"data": [traces]}`; Tempo -> OTLP JSON lines (one export object per trace); Phoenix ->
    its pages of spans, one a line; LangSmith -> `{"runs": [...]}` of each trace, one a line;
    Langfuse -> `{"data": [observations], "meta": {}}` of each trace, one a line."""
    if backend in ("phoenix", "langsmith", "langfuse"):
        data = b"".join(orjson.dumps(d) + b"\n" for d in docs)
    elif backend == "jaeger":
        data = orjson.dumps({"data": [t for d in docs for t in _jaeger_traces(d)]})
    elif backend == "tempo":
        exports = [tempo_export(d) for d in docs] or [{"resourceSpans": []}]
        data = b"".join(orjson.dumps(e) + b"\n" for e in exports)
    else:
        raise ValueError(f"unknown trace backend {backend!r}; expected one of {BACKENDS}")
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise SourceError(str(path), f"cannot write: {exc.strerror or exc}") from None
