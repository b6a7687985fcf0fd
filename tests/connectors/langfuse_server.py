"""A local Langfuse-compatible server for tests: it keeps what the real `langfuse` SDK sends
(OTLP protobuf, gzipped or not, `POST /api/public/otel/v1/traces`, Basic auth public:secret
key) as Langfuse's server would store it, and answers the read API twice asks from that
(`GET /api/public/v2/observations`, the one read path of the SDK's generated client, 5.x:
`langfuse/api/observations/raw_client.py`).

It is not Langfuse (that needs PostgreSQL, ClickHouse, Redis and S3): it follows, for the fields
twice reads, what Langfuse's own code does with a span (langfuse/langfuse,
`packages/shared/src/server/otel/OtelIngestionProcessor.ts` and `ObservationTypeMapper.ts`):
- the observation's id is the span id, `traceId` the trace id, `parentObservationId` the
  parent span id (hex);
- `name`: `gen_ai.tool.name`, else the span's name; `type`: `langfuse.observation.type`
  upper-cased, else OpenInference's span kind, GenAI's operation (`execute_tool` -> TOOL), a
  GenAI tool name or call id (TOOL), a model (GENERATION), else SPAN;
- `level`: `langfuse.observation.level`, else ERROR for an error status, else DEFAULT;
  `statusMessage`: `langfuse.observation.status_message`, else the status message;
- `input` / `output`: `langfuse.observation.input|output` (else OpenInference's
  `input.value|output.value`, else GenAI's tool call arguments / result) as the raw text sent;
- `metadata`: `resourceAttributes`, `scopeAttributes`, and every `langfuse.observation.metadata.*`
  and `langfuse.trace.metadata.*` attribute with its prefix dropped; stored as text (ClickHouse's
  `Map(String, String)`) and each value JSON-parsed when read back
  (`parseMetadataCHRecordToDomain`), so the SDK's JSON-quoted `"\\"call_abc\\""` reads `call_abc`;
- `sessionId`: `langfuse.session.id`, `session.id`, `gen_ai.conversation.id` or the metadata's
  `langfuse_session_id`; times in milliseconds (ClickHouse's `DateTime64(3)`), ISO with `Z`.
The API answers `{"data": [...], "meta": {"cursor"?}}` with the field groups asked (`core`
always; `basic` by default), filtered by `type`, `traceId`, `sessionId`, `name`, `level`,
`fromStartTime` (inclusive) and `toStartTime` (exclusive), newest first, `limit` (at most 1000,
50 by default) a page and an opaque cursor. Requests without the right Basic auth get 401.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PROJECT_ID = "cltwice0000projectlocal"
_TYPES = {"span": "SPAN", "generation": "GENERATION", "event": "EVENT",
          "embedding": "EMBEDDING", "agent": "AGENT", "tool": "TOOL", "chain": "CHAIN",
          "retriever": "RETRIEVER", "guardrail": "GUARDRAIL", "evaluator": "EVALUATOR"}
_OPENINFERENCE = {"CHAIN": "CHAIN", "RETRIEVER": "RETRIEVER", "LLM": "GENERATION",
                  "EMBEDDING": "EMBEDDING", "AGENT": "AGENT", "TOOL": "TOOL",
                  "GUARDRAIL": "GUARDRAIL", "EVALUATOR": "EVALUATOR"}
_GENAI = {"chat": "GENERATION", "completion": "GENERATION", "text_completion": "GENERATION",
          "generate_content": "GENERATION", "generate": "GENERATION",
          "embeddings": "EMBEDDING", "invoke_agent": "AGENT", "create_agent": "AGENT",
          "execute_tool": "TOOL"}
_MODEL_KEYS = ("langfuse.observation.model.name", "gen_ai.request.model",
               "gen_ai.response.model", "llm.model_name", "model")
_SESSION_KEYS = ("langfuse.session.id", "session.id", "gen_ai.conversation.id",
                 "langfuse.observation.metadata.langfuse_session_id",
                 "langfuse.trace.metadata.langfuse_session_id")
_USER_KEYS = ("langfuse.user.id", "user.id")
_GROUPS = {
    "core": ("id", "traceId", "startTime", "endTime", "projectId", "parentObservationId",
             "type"),
    "basic": ("name", "level", "statusMessage", "version", "environment", "bookmarked",
              "public", "userId", "sessionId", "isRootObservation"),
    "time": ("completionStartTime", "createdAt", "updatedAt"),
    "io": ("input", "output"),
    "metadata": ("metadata",),
}
_METADATA_SHOWN = 200  # longer metadata values are cut unless `expandMetadata` names them


def _value(value: Any) -> Any:
    """An OTLP AnyValue (protobuf message) as a plain value, as Langfuse's
    `convertValueToPlainJavascript` reads it."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return json.dumps({kv.key: _value(kv.value) for kv in value.kvlist_value.values})
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, which) if which else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


def _iso_ms(ns: int) -> str:
    at = datetime.fromtimestamp(ns // 10**6 / 1000, tz=UTC)  # DateTime64(3): milliseconds
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _type(attrs: dict[str, Any]) -> str:
    for key, table in (("langfuse.observation.type", _TYPES),
                       ("openinference.span.kind", _OPENINFERENCE),
                       ("gen_ai.operation.name", _GENAI)):
        if attrs.get(key) and table.get(str(attrs[key])):
            return table[str(attrs[key])]
    if attrs.get("gen_ai.tool.name") or attrs.get("gen_ai.tool.call.id"):
        return "TOOL"
    if any(attrs.get(k) for k in _MODEL_KEYS):
        return "GENERATION"
    return "SPAN"


def _metadata(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for prefix in ("langfuse.observation.metadata", "langfuse.trace.metadata"):
        whole = attrs.get(prefix)
        if isinstance(whole, str):
            try:
                parsed = json.loads(whole)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                out.update(parsed)
        for key, value in attrs.items():
            if key.startswith(prefix + "."):
                out[key.removeprefix(prefix + ".")] = value
    return out


def _stored(value: Any) -> str:
    """A metadata value as ClickHouse's Map(String, String) keeps it."""
    return value if isinstance(value, str) else json.dumps(value)


def _read_back(text: str) -> Any:
    """`parseJsonPrioritised`: the JSON a stored text holds, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _first(attrs: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if attrs.get(key):
            value = attrs[key]
            return value if isinstance(value, str) else json.dumps(value)
    return None


def observations_of(body: bytes) -> list[dict[str, Any]]:
    """Each span of an OTLP protobuf export request as the observation Langfuse stores."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest.FromString(body)
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    out = []
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            scope = _attributes(ss.scope.attributes)
            for span in ss.spans:
                attrs = _attributes(span.attributes)
                status_code = span.status.code
                input_ = next((attrs[k] for k in ("langfuse.observation.input", "input.value",
                                                  "gen_ai.tool.call.arguments")
                               if attrs.get(k) is not None), None)
                output = next((attrs[k] for k in ("langfuse.observation.output",
                                                  "output.value", "gen_ai.tool.call.result")
                               if attrs.get(k) is not None), None)
                metadata = {"resourceAttributes": resource, "scopeAttributes": scope,
                            **_metadata(attrs)}
                parent = span.parent_span_id.hex() or None
                out.append({
                    "id": span.span_id.hex(), "traceId": span.trace_id.hex(),
                    "startTime": _iso_ms(span.start_time_unix_nano),
                    "endTime": _iso_ms(span.end_time_unix_nano)
                    if span.end_time_unix_nano else None,
                    "projectId": PROJECT_ID, "parentObservationId": parent,
                    "type": _type(attrs),
                    "name": str(attrs.get("gen_ai.tool.name") or span.name),
                    "level": attrs.get("langfuse.observation.level")
                    or ("ERROR" if status_code == 2 else "DEFAULT"),
                    "statusMessage": attrs.get("langfuse.observation.status_message")
                    or span.status.message or None,
                    "version": attrs.get("langfuse.version"),
                    "environment": attrs.get("langfuse.environment") or "default",
                    "bookmarked": False, "public": False,
                    "userId": _first(attrs, _USER_KEYS),
                    "sessionId": _first(attrs, _SESSION_KEYS),
                    "isRootObservation": parent is None,
                    "completionStartTime": None, "createdAt": now, "updatedAt": now,
                    "input": input_, "output": output,
                    # kept as ClickHouse keeps it, read back as the API parses it
                    "metadata": {k: _stored(v) for k, v in metadata.items()},
                })
    return out


class Store:
    """The observations as ingested, and each request seen."""

    def __init__(self, public_key: str, secret_key: str, page: int) -> None:
        token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
        self.authorization = f"Basic {token}"
        self.page = page
        self.observations: dict[tuple[str, str], dict[str, Any]] = {}
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.lock = threading.Lock()

    def ingest(self, body: bytes) -> int:
        found = observations_of(body)
        with self.lock:
            for obs in found:
                self.observations[(obs["traceId"], obs["id"])] = obs
        return len(found)

    def query(self, params: dict[str, list[str]]) -> dict[str, Any]:
        one = {k: v[-1] for k, v in params.items() if v}
        since = _parse(one["fromStartTime"]) if one.get("fromStartTime") else None
        until = _parse(one["toStartTime"]) if one.get("toStartTime") else None
        with self.lock:
            everything = sorted(self.observations.values(), key=lambda o: o["startTime"],
                                reverse=True)
        found = []
        for obs in everything:
            if any(one.get(q) and obs[f] != one[q] for q, f in (
                    ("type", "type"), ("traceId", "traceId"), ("sessionId", "sessionId"),
                    ("name", "name"), ("level", "level"))):
                continue
            at = _parse(obs["startTime"])
            if (since is not None and at < since) or (until is not None and at >= until):
                continue
            found.append(obs)
        groups = {"core", *(one.get("fields") or "core,basic").split(",")}
        expand = set((one.get("expandMetadata") or "").split(","))
        size = min(int(one.get("limit") or 50), 1000, self.page)
        start = int(base64.b64decode(one["cursor"]).decode()) if one.get("cursor") else 0
        data = [_shown(obs, groups, expand) for obs in found[start:start + size]]
        meta: dict[str, Any] = {}
        if start + size < len(found):
            meta["cursor"] = base64.b64encode(str(start + size).encode()).decode()
        return {"data": data, "meta": meta}


def _parse(text: str) -> datetime:
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _shown(obs: dict[str, Any], groups: set[str], expand: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group in groups:
        for name in _GROUPS.get(group.strip(), ()):
            out[name] = obs[name]
    if "metadata" in out:
        out["metadata"] = {k: _read_back(v if k in expand or len(v) <= _METADATA_SHOWN
                                         else v[:_METADATA_SHOWN])
                           for k, v in obs["metadata"].items()}
    return out


class _Handler(BaseHTTPRequestHandler):
    store: Store

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) \
            if method == "POST" else b""
        url = urlsplit(self.path)
        self.store.seen.append((method, self.path, dict(self.headers.items())))
        if url.path == "/api/public/health":
            return self._answer(200, {"status": "OK"})
        if self.headers.get("Authorization") != self.store.authorization:
            return self._answer(401, {"message": "Invalid credentials. Confirm that you've "
                                      "configured the correct host."})
        if method == "POST" and url.path == "/api/public/otel/v1/traces":
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            self.store.ingest(body)
            return self._answer(200, {})
        if method == "GET" and url.path == "/api/public/v2/observations":
            return self._answer(200, self.store.query(parse_qs(url.query)))
        return self._answer(404, {"message": "Not found"})

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")


@contextmanager
def langfuse_server(public_key: str, secret_key: str,
                    page: int = 1000) -> Iterator[tuple[str, Store]]:
    """(its URL, its store), serving on a free loopback port until the block ends."""
    store = Store(public_key, secret_key, page)
    handler = type("Handler", (_Handler,), {"store": store})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", store
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
