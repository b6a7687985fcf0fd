"""A local trace backend on 127.0.0.1 answering Jaeger's and Grafana Tempo's query APIs.

`TraceServer(spans)` loads OTLP JSON lines (what `opentelemetry-exporter-otlp-json-file`'s
`FileSpanExporter` writes, or the same export objects as a list of dicts) into memory and serves:

Jaeger (the HTTP JSON API the Jaeger UI uses; OTLP converted the way Jaeger's translator does it)
- `GET /api/services` -> `{"data": [service names], ...}`
- `GET /api/traces/{id}` -> `{"data": [trace], "total", "limit", "offset", "errors": null}`;
  404 `{"data": null, "errors": [{"code": 404, "msg": "trace not found"}]}` when missing
- `GET /api/traces?service=S&tags={"k":"v"}&start=<us>&end=<us>&limit=N`: traces with a span of
  service S that starts in the window and carries every tag (span tags, process tags or log
  fields); `service` is required, as in Jaeger (400 otherwise)
  A trace is `{"traceID", "spans", "processes": {"p1": {"serviceName", "tags"}}}`; ids print as
  Jaeger prints them (`%x%016x`: no leading zeros), times in us, tags `{"key", "type", "value"}`
  with span kind / status in `span.kind`, `otel.status_code`, `error`, arrays as JSON text.

Tempo
- `GET /api/traces/{id}` (v1) -> `{"batches": [resourceSpans]}`; `GET /api/v2/traces/{id}` ->
  `{"trace": {"resourceSpans": [...]}}`; 404 "trace not found". As Tempo's JSON does, ids are
  base64 and kind / status code are enum names.
- `GET /api/search?q=<TraceQL>&start=<unix s>&end=<unix s>&limit=N` -> `{"traces": [{"traceID",
  "rootServiceName", "rootTraceName", "startTimeUnixNano", "durationMs", "spanSets"}], "metrics"}`
  for traces overlapping the window with one span matching every condition. TraceQL subset:
  `{}`, `{ cond && cond ... }` with `cond` = `.name`, `span.name` or `resource.name` (a name may
  be quoted: `."a b"`), `=` or `!=`, and a string / int / float / true / false literal.

Phoenix (its REST API's spans search; spans as `twice.lab.phoenix_export` prints them)
- `GET /v1/projects/{project}/spans/otlpv1?start_time=<ISO>&end_time=<ISO>&trace_id=<id>...
  &limit=N&cursor=C` -> `{"data": [snake_case OTLP spans], "next_cursor": C or null}`, newest
  first, `start_time` inclusive and `end_time` exclusive, at most 1000 a page; any project name
  holds every span. With `auth`, the API key is its password, sent as `Authorization: Bearer`.

Where: `url` serves both APIs; the one path they share, `/api/traces/{id}`, answers as Jaeger
there. `url + "/jaeger"` and `url + "/tempo"` serve only that API (a base path, as behind a
reverse proxy or Grafana Cloud's `/tempo`), so `/tempo/api/traces/{id}` is Tempo's v1.

The stored spans and their Jaeger form are `OtlpStore` (with `read_exports`), the one
implementation of the conversion, which `twice.lab.jaeger_export` writes to a file.

Knobs for failure tests: `auth=(user, password)` demands HTTP basic auth (401 otherwise);
`echo_credentials=True` makes that 401 echo what the client sent, as misconfigured proxies and
debug endpoints do: the Authorization header, the decoded `user:password` and the URL with
them in it;
`tempo_v2=False` serves no v2 endpoint (an older Tempo); `outage = (status, text)` answers every
request with that status and body (a proxy error page, a login page). `requests` records
`(path, basic-auth user or None)` per request.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from twice.lab.loopback import LoopbackService
from twice.lab.phoenix_export import phoenix_span

__all__ = ["OtlpStore", "TraceQLError", "TraceServer", "parse_traceql", "read_exports"]

_KIND_ENUM = ("SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER",
              "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER")
_STATUS_ENUM = ("STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR")
_NO_SERVICE = "OTLPResourceNoServiceName"  # what Jaeger's translator names a nameless service
_JAEGER_LIMIT = 100
_PHOENIX_SPANS = re.compile(r"(?:/[^/]+)*/v1/projects/[^/]+/spans/otlpv1/?")


def _iso_ns(text: str) -> int | None:
    """ns since the epoch of an ISO-8601 time (UTC when no zone); None for none given."""
    if not text:
        return None
    from datetime import UTC, datetime

    at = datetime.fromisoformat(text)
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1_000_000) * 1000
_TEMPO_LIMIT = 20


# -- reading OTLP JSON ----------------------------------------------------------------------
def _value(any_value: dict[str, Any]) -> Any:
    """Plain value of an OTLP AnyValue (bytes stay base64 text)."""
    if not any_value:
        return None
    ((key, inner),) = any_value.items()
    if key == "intValue":
        return int(inner)
    if key == "arrayValue":
        return [_value(v) for v in inner.get("values", [])]
    if key == "kvlistValue":
        return _attributes(inner.get("values", []))
    return inner


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {kv["key"]: _value(kv.get("value", {})) for kv in items or []}


def _hex_id(value: Any, n_bytes: int) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    if len(value) == 2 * n_bytes and re.fullmatch(r"[0-9a-fA-F]+", value):
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == n_bytes else None


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, str) and value in _KIND_ENUM + _STATUS_ENUM:
        return (_KIND_ENUM if value in _KIND_ENUM else _STATUS_ENUM).index(value)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


@dataclass
class _Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    start_ns: int
    end_ns: int
    raw: dict[str, Any]  # the OTLP span as read
    attrs: dict[str, Any]
    resource: int  # index into TraceServer._resources
    scope: int  # index into TraceServer._scopes

    @property
    def kind(self) -> int:
        return _int(self.raw.get("kind"))


# -- the Jaeger model -------------------------------------------------------------------------
def _jaeger_trace_id(hex32: str) -> str:
    high, low = int(hex32[:16], 16), int(hex32[16:], 16)
    return f"{high:x}{low:016x}" if high else f"{low:x}"


def _tag(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value}
    if isinstance(value, float):
        return {"key": key, "type": "float64", "value": value}
    if isinstance(value, list | dict):
        value = json.dumps(value, separators=(",", ":"))
    return {"key": key, "type": "string", "value": "" if value is None else str(value)}


def _tag_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


# -- OTLP held as a trace backend holds it, and its Jaeger form ------------------------------
def read_exports(spans: Path | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OTLP export objects: given, or read from a file of OTLP JSON lines."""
    if isinstance(spans, list):
        return spans
    return [json.loads(line) for line in Path(spans).read_text().splitlines() if line.strip()]


class OtlpStore:
    """OTLP export objects stored by trace (a span kept once per trace and span id), and their
    Jaeger query API form: the one implementation of the OTLP -> Jaeger conversion, shared by
    `TraceServer` and `twice.lab.jaeger_export`."""

    def __init__(self, exports: list[dict[str, Any]]) -> None:
        self._resources: list[dict[str, Any]] = []  # raw OTLP resource objects
        self._resource_attrs: list[dict[str, Any]] = []
        self._scopes: list[dict[str, Any]] = []
        self._traces: dict[str, list[_Span]] = {}
        for export in exports:
            self._add_export(export)

    def _add_export(self, export: dict[str, Any]) -> None:
        for rs in export.get("resourceSpans", []):
            resource = rs.get("resource") or {}
            self._resources.append(resource)
            self._resource_attrs.append(_attributes(resource.get("attributes")))
            for ss in rs.get("scopeSpans", []):
                self._scopes.append(ss.get("scope") or {})
                for raw in ss.get("spans", []):
                    trace_id = _hex_id(raw.get("traceId"), 16)
                    span_id = _hex_id(raw.get("spanId"), 8)
                    if trace_id is None or span_id is None:
                        continue
                    spans = self._traces.setdefault(trace_id, [])
                    if any(s.span_id == span_id for s in spans):
                        continue  # a backend stores a span once
                    start = _int(raw.get("startTimeUnixNano"))
                    spans.append(_Span(
                        trace_id, span_id, _hex_id(raw.get("parentSpanId"), 8), start,
                        _int(raw.get("endTimeUnixNano"), start), raw,
                        _attributes(raw.get("attributes")), len(self._resources) - 1,
                        len(self._scopes) - 1))

    @property
    def trace_ids(self) -> list[str]:
        return list(self._traces)

    def _service(self, resource: int) -> str:
        name = self._resource_attrs[resource].get("service.name")
        return name if isinstance(name, str) and name else _NO_SERVICE

    def _jaeger_span(self, span: _Span, process_id: str) -> dict[str, Any]:
        raw = span.raw
        tags = [_tag(k, v) for k, v in span.attrs.items()]
        scope = self._scopes[span.scope]
        if scope.get("name"):
            tags.append(_tag("otel.scope.name", scope["name"]))
        if scope.get("version"):
            tags.append(_tag("otel.scope.version", scope["version"]))
        if 1 <= span.kind < len(_KIND_ENUM):
            tags.append(_tag("span.kind", _KIND_ENUM[span.kind].removeprefix("SPAN_KIND_").lower()))
        status = raw.get("status") or {}
        code = _int(status.get("code"))
        if code in (1, 2):
            tags.append(_tag("otel.status_code", "OK" if code == 1 else "ERROR"))
        if code == 2:
            tags.append(_tag("error", True))
        if status.get("message"):
            tags.append(_tag("otel.status_description", status["message"]))
        logs = [{"timestamp": _int(e.get("timeUnixNano")) // 1000,
                 "fields": [_tag("event", e.get("name", ""))]
                 + [_tag(k, v) for k, v in _attributes(e.get("attributes")).items()]}
                for e in raw.get("events", [])]
        references = [] if span.parent_id is None else [{
            "refType": "CHILD_OF", "traceID": _jaeger_trace_id(span.trace_id),
            "spanID": span.parent_id}]
        return {
            "traceID": _jaeger_trace_id(span.trace_id), "spanID": span.span_id,
            "operationName": raw.get("name", ""), "references": references,
            "startTime": span.start_ns // 1000,
            "duration": max(span.end_ns - span.start_ns, 0) // 1000,
            "tags": tags, "logs": logs, "processID": process_id, "warnings": None, "flags": 1,
        }

    def _jaeger_trace(self, spans: list[_Span]) -> dict[str, Any]:
        process_ids: dict[int, str] = {}
        processes: dict[str, Any] = {}
        out = []
        for span in spans:
            if span.resource not in process_ids:
                pid = process_ids[span.resource] = f"p{len(process_ids) + 1}"
                attrs = self._resource_attrs[span.resource]
                processes[pid] = {"serviceName": self._service(span.resource), "tags": [
                    _tag(k, v) for k, v in attrs.items() if k != "service.name"]}
            out.append(self._jaeger_span(span, process_ids[span.resource]))
        return {"traceID": _jaeger_trace_id(spans[0].trace_id), "spans": out,
                "processes": processes, "warnings": None}

    def jaeger_search(self, service: str | None, tags: dict[str, Any] | None = None,
                      start: int = 0, end: int = 2**62, limit: int | None = None
                      ) -> list[dict[str, Any]]:
        """What Jaeger's `GET /api/traces?service=&tags=&start=&end=&limit=` lists: the traces
        with a span of `service` (None: of any service) starting in [start, end] (us) and
        carrying every tag (span tags, process tags or log fields), most recent first."""
        tags = tags or {}
        found = []
        for spans in self._traces.values():
            trace = self._jaeger_trace(spans)
            processes = trace["processes"]
            for span in trace["spans"]:
                process = processes[span["processID"]]
                other_service = service is not None and process["serviceName"] != service
                if other_service or not start <= span["startTime"] <= end:
                    continue
                known = [*span["tags"], *process["tags"]]
                known += [f for log in span["logs"] for f in log["fields"]]
                if all(any(t["key"] == k and _tag_text(t["value"]) == str(v) for t in known)
                       for k, v in tags.items()):
                    found.append((min(s.start_ns for s in spans), trace))
                    break
        found.sort(key=lambda pair: -pair[0])  # most recent first
        return [t for _, t in found[:limit]]


# -- TraceQL (a small subset) ---------------------------------------------------------------
class TraceQLError(ValueError):
    pass


_TOKEN = re.compile(r"""\s*(?:
    (?P<brace>[{}]) | (?P<and>&&) | (?P<op>!=|=)
  | (?P<attr>(?:resource|span)?\.(?:"(?:[^"\\]|\\.)*"|[\w.:/-]+))
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?\d+(?:\.\d+)?) | (?P<bool>true|false)
)""", re.X)

Condition = tuple[str, str, str, Any]  # (scope: "" | "span" | "resource", name, op, literal)


def _unquote(text: str) -> str:
    try:
        return str(json.loads(text))
    except json.JSONDecodeError:
        raise TraceQLError(f"bad string literal {text}") from None


def parse_traceql(query: str) -> list[Condition]:
    tokens: list[tuple[str, str]] = []
    pos, text = 0, query.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise TraceQLError(f"unexpected input at {pos}: {text[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        tokens.append((kind, m[kind]))
    if len(tokens) < 2 or tokens[0] != ("brace", "{") or tokens[-1] != ("brace", "}"):
        raise TraceQLError("a query is one spanset filter: { ... }")
    body, out = tokens[1:-1], []
    for i in range(0, len(body), 4):
        part = body[i:i + 4]
        if len(part) < 3 or part[0][0] != "attr" or part[1][0] != "op" \
                or part[2][0] not in ("string", "number", "bool"):
            raise TraceQLError("expected <attribute> = <literal>")
        if len(part) == 4 and (part[3][0] != "and" or i + 4 == len(body)):
            raise TraceQLError("conditions are joined with &&")
        scope, _, name = part[0][1].partition(".")
        name = _unquote(name) if name.startswith('"') else name
        kind, literal = part[2]
        value: Any = (_unquote(literal) if kind == "string" else literal == "true"
                      if kind == "bool" else float(literal) if "." in literal else int(literal))
        out.append((scope, name, part[1][1], value))
    return out


def _same(attr: Any, literal: Any) -> bool:
    if isinstance(literal, bool) or isinstance(attr, bool):
        return isinstance(attr, bool) and isinstance(literal, bool) and attr == literal
    if isinstance(literal, str):
        return isinstance(attr, str) and attr == literal
    return isinstance(attr, int | float) and attr == literal


# -- the server ---------------------------------------------------------------------------------
class TraceServer(OtlpStore, LoopbackService):
    thread_name = "lab-trace-server"

    """Spans in memory, served as Jaeger and as Tempo on 127.0.0.1 (free port)."""

    def __init__(self, spans: Path | list[dict[str, Any]], *, auth: tuple[str, str] | None = None,
                 tempo_v2: bool = True, echo_credentials: bool = False) -> None:
        self.auth = auth
        self.echo_credentials = echo_credentials
        self.tempo_v2 = tempo_v2
        self.outage: tuple[int, str] | None = None
        self.requests: list[tuple[str, str | None]] = []
        OtlpStore.__init__(self, read_exports(spans))

    # -- HTTP -------------------------------------------------------------------------------
    def answer(self, req: BaseHTTPRequestHandler) -> None:
        url = urlsplit(req.path)
        params = {k: v[-1] for k, v in parse_qs(url.query).items()}
        user = self._basic_user(req.headers.get("Authorization"))
        self.requests.append((url.path, user[0] if user else None))
        if self.outage is not None:
            return self._send(req, self.outage[0], self.outage[1].encode(), "text/html")
        if _PHOENIX_SPANS.fullmatch(url.path):
            return self._phoenix_spans(req, parse_qs(url.query))
        if self.auth is not None and user != self.auth:
            if self.echo_credentials:
                return self._echo_401(req, user)
            return self._send(req, 401, b"Unauthorized\n", "text/plain",
                              {"WWW-Authenticate": 'Basic realm="traces"'})
        path = url.path.rstrip("/")
        apis = {"jaeger", "tempo"}
        for prefix in ("/jaeger", "/tempo"):
            if path.startswith(prefix + "/"):
                path, apis = path.removeprefix(prefix), {prefix[1:]}
        if "jaeger" in apis and path == "/api/services":
            names = sorted({self._service(i) for i in range(len(self._resources))})
            return self._json(req, 200, self._jaeger_envelope(names))
        if "jaeger" in apis and path == "/api/traces":
            return self._jaeger_find(req, params)
        if "tempo" in apis and path == "/api/search":
            return self._tempo_search(req, params)
        if "tempo" in apis and self.tempo_v2 and path.startswith("/api/v2/traces/"):
            return self._by_id(req, path.removeprefix("/api/v2/traces/"), "tempo_v2")
        if path.startswith("/api/traces/"):
            # the one path both APIs share: Jaeger's wherever Jaeger is served
            api = "jaeger" if "jaeger" in apis else "tempo_v1"
            return self._by_id(req, path.removeprefix("/api/traces/"), api)
        self._send(req, 404, b"404 page not found\n", "text/plain")

    def _echo_401(self, req: BaseHTTPRequestHandler, user: tuple[str, str] | None) -> None:
        sent = req.headers.get("Authorization") or "no Authorization header"
        who = f"{user[0]}:{user[1]}" if user else "nobody"
        host = req.headers.get("Host") or "localhost"
        msg = (f"unauthorized: {who} is not allowed (GET http://{who}@{host}{req.path}, "
               f"Authorization: {sent})")
        body = json.dumps(self._jaeger_envelope(None, [{"code": 401, "msg": msg}])).encode()
        self._send(req, 401, body, "application/json",
                   {"WWW-Authenticate": 'Basic realm="traces"'})

    @staticmethod
    def _basic_user(header: str | None) -> tuple[str, str] | None:
        if not header or not header.startswith("Basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return user, password

    def _send(self, req: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None) -> None:
        req.send_response(status)
        req.send_header("Content-Type", content_type)
        req.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            req.send_header(key, value)
        req.end_headers()
        req.wfile.write(body)

    def _json(self, req: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
        self._send(req, status, json.dumps(obj).encode(), "application/json")

    # -- Phoenix ----------------------------------------------------------------------------
    def _phoenix_spans(self, req: BaseHTTPRequestHandler, query: dict[str, list[str]]) -> None:
        if self.auth is not None and req.headers.get("Authorization") != \
                f"Bearer {self.auth[1]}":
            return self._json(req, 401, {"detail": "Invalid token"})
        try:
            since = _iso_ns(query.get("start_time", [""])[-1])
            until = _iso_ns(query.get("end_time", [""])[-1])
            limit = min(int(query.get("limit", ["100"])[-1]), 1000)
            offset = int(query.get("cursor", ["0"])[-1])
        except ValueError as exc:
            return self._json(req, 422, {"detail": str(exc)})
        wanted = {t.lower() for t in query.get("trace_id", [])}
        found = sorted((span for spans in self._traces.values() for span in spans
                        if (not wanted or span.trace_id in wanted)
                        and (since is None or span.start_ns >= since)
                        and (until is None or span.start_ns < until)),
                       key=lambda span: -span.start_ns)
        page = found[offset:offset + limit]
        data = [{**phoenix_span(span.raw), "trace_id": span.trace_id, "span_id": span.span_id,
                 "parent_span_id": span.parent_id} for span in page]
        more = offset + limit < len(found)
        self._json(req, 200, {"data": data, "next_cursor": str(offset + limit) if more else None})

    # -- Jaeger -----------------------------------------------------------------------------
    @staticmethod
    def _jaeger_envelope(data: Any, errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        total = len(data) if isinstance(data, list) else 0
        return {"data": data, "total": total, "limit": 0, "offset": 0, "errors": errors}

    def _jaeger_error(self, req: BaseHTTPRequestHandler, status: int, msg: str) -> None:
        self._json(req, status, self._jaeger_envelope(None, [{"code": status, "msg": msg}]))

    def _by_id(self, req: BaseHTTPRequestHandler, raw_id: str, api: str) -> None:
        trace_id = _hex_id(raw_id.rjust(32, "0"), 16) if len(raw_id) <= 32 else None
        spans = self._traces.get(trace_id or "")
        if trace_id is None:
            if api == "jaeger":
                return self._jaeger_error(req, 400, f"cannot parse traceID {raw_id!r}")
            return self._send(req, 400, b"invalid TraceID\n", "text/plain")
        if spans is None:
            if api == "jaeger":
                return self._jaeger_error(req, 404, "trace not found")
            return self._send(req, 404, b"trace not found\n", "text/plain")
        if api == "jaeger":
            return self._json(req, 200, self._jaeger_envelope([self._jaeger_trace(spans)]))
        resource_spans = self._tempo_resource_spans(spans)
        if api == "tempo_v2":
            return self._json(req, 200, {"trace": {"resourceSpans": resource_spans}})
        return self._json(req, 200, {"batches": resource_spans})

    def _jaeger_find(self, req: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
        service = params.get("service")
        if not service:
            return self._jaeger_error(req, 400, "parameter 'service' is required")
        try:
            tags = json.loads(params["tags"]) if "tags" in params else {}
            if not isinstance(tags, dict):
                raise ValueError
            start = int(params.get("start", 0))
            end = int(params.get("end", 2**62))
            limit = int(params.get("limit", _JAEGER_LIMIT)) or _JAEGER_LIMIT
        except ValueError:
            return self._jaeger_error(req, 400, "malformed parameter")
        self._json(req, 200, self._jaeger_envelope(self.jaeger_search(service, tags, start, end,
                                                                      limit)))

    # -- Tempo ------------------------------------------------------------------------------
    @staticmethod
    def _b64(hex_id: str) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    def _tempo_span(self, span: _Span) -> dict[str, Any]:
        out = dict(span.raw)
        out["traceId"], out["spanId"] = self._b64(span.trace_id), self._b64(span.span_id)
        if span.parent_id:
            out["parentSpanId"] = self._b64(span.parent_id)
        out["kind"] = _KIND_ENUM[span.kind] if 0 <= span.kind < len(_KIND_ENUM) else _KIND_ENUM[0]
        status = dict(span.raw.get("status") or {})
        code = _int(status.get("code"))
        if 1 <= code <= 2:
            status["code"] = _STATUS_ENUM[code]
        else:
            status.pop("code", None)
        out["status"] = status
        return out

    def _tempo_resource_spans(self, spans: list[_Span]) -> list[dict[str, Any]]:
        grouped: dict[int, dict[int, list[dict[str, Any]]]] = {}
        for span in spans:
            grouped.setdefault(span.resource, {}).setdefault(span.scope, []).append(
                self._tempo_span(span))
        return [{"resource": self._resources[r],
                 "scopeSpans": [{"scope": self._scopes[s], "spans": items}
                                for s, items in scopes.items()]}
                for r, scopes in grouped.items()]

    def _matches(self, span: _Span, conditions: list[Condition]) -> bool:
        for scope, name, op, literal in conditions:
            places = {"span": [span.attrs], "resource": [self._resource_attrs[span.resource]],
                      "": [span.attrs, self._resource_attrs[span.resource]]}[scope]
            values = [p[name] for p in places if name in p]
            if not values:
                return False
            hit = any(_same(v, literal) for v in values)
            if hit != (op == "="):
                return False
        return True

    def _tempo_search(self, req: BaseHTTPRequestHandler, params: dict[str, str]) -> None:
        try:
            conditions = parse_traceql(params.get("q", "{}"))
        except TraceQLError as exc:
            return self._send(req, 400, f"invalid TraceQL query: {exc}\n".encode(), "text/plain")
        try:
            start = int(params.get("start", 0)) * 10**9
            end = int(params.get("end", 2**32)) * 10**9
            limit = int(params.get("limit", _TEMPO_LIMIT)) or _TEMPO_LIMIT
        except ValueError:
            return self._send(req, 400, b"invalid start, end or limit\n", "text/plain")
        found = []
        for trace_id, spans in self._traces.items():
            first = min(s.start_ns for s in spans)
            last = max(s.end_ns for s in spans)
            if last < start or first > end:
                continue
            matched = [s for s in spans if self._matches(s, conditions)]
            if not matched:
                continue
            root = next((s for s in spans if s.parent_id is None), None)
            entry: dict[str, Any] = {
                "traceID": trace_id.lstrip("0"),  # Tempo trims leading zeros
                "rootServiceName": (self._service(root.resource) if root
                                    else "<root span not yet received>"),
                "startTimeUnixNano": str(first),
                "durationMs": (last - first) // 10**6,
                "spanSets": [{"spans": [{"spanID": s.span_id,
                                         "startTimeUnixNano": str(s.start_ns),
                                         "durationNanos": str(s.end_ns - s.start_ns)}
                                        for s in matched[:3]], "matched": len(matched)}],
            }
            if root is not None:
                entry["rootTraceName"] = root.raw.get("name", "")
            found.append(entry)
        found.sort(key=lambda e: -int(e["startTimeUnixNano"]))
        metrics = {"inspectedTraces": len(self._traces), "inspectedBytes": "0",
                   "completedJobs": 1, "totalJobs": 1}
        self._json(req, 200, {"traces": found[:limit], "metrics": metrics})
