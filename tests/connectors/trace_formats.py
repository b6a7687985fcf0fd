"""One incident's OTLP JSON spans (as the OpenTelemetry SDK's file exporter wrote them) in the
shapes other trace stores give them back, for tests that must read the same verdict from each:

- `phoenix_page`: Phoenix's `GET /v1/projects/{p}/spans/otlpv1` answer, `{"data": [spans],
  "next_cursor": null}` (twice.lab.phoenix_export: snake_case, every AnyValue field printed,
  all but one null; ints as numbers; no resource);
- `phoenix_download`: the same spans as Phoenix's UI downloads them, `{"resource_spans":
  [{"scope_spans": [{"spans": [...]}]}]}` (here with the resource kept);
- `langfuse`: what the Langfuse SDK sends (OTLP protobuf), decoded to protobuf's canonical JSON
  (base64 ids, enum names), tool spans spelled Langfuse's way: named after the tool,
  `langfuse.observation.type = tool`, the ids JSON-quoted in `langfuse.observation.metadata.*`,
  a failure as level ERROR with a status message and no span status; no GenAI attributes;
- `langfuse_page`: those requests as a Langfuse-compatible server stores them, one page of its
  observations API (`langfuse_live`: read back through twice's live Langfuse backend);
- `langsmith`: LangSmith runs as its API lists them (`run_type`, `extra.tool_call_id`,
  `extra.metadata.thread_id`, ISO times, UUID ids, `error` with a traceback); only the runs
  LangChain's tracer makes: tool runs and their parents, no HTTP client spans;
- `jaeger`, `tempo`: Jaeger's search answer (twice.lab.jaeger_export), Tempo's v1 `{"batches"}`.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from twice.lab.phoenix_export import phoenix_attributes, phoenix_span

_KIND_NAMES = {0: "SPAN_KIND_UNSPECIFIED", 1: "SPAN_KIND_INTERNAL", 2: "SPAN_KIND_SERVER",
               3: "SPAN_KIND_CLIENT", 4: "SPAN_KIND_PRODUCER", 5: "SPAN_KIND_CONSUMER"}
_STATUS_NAMES = {0: "STATUS_CODE_UNSET", 1: "STATUS_CODE_OK", 2: "STATUS_CODE_ERROR"}


def exports(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _spans(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for doc in docs:
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    yield rs, span


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    """Plain values of an OTLP span's attributes (strings, ints, lists of strings)."""
    out: dict[str, Any] = {}
    for kv in span.get("attributes", []):
        value = kv["value"]
        if "stringValue" in value:
            out[kv["key"]] = value["stringValue"]
        elif "intValue" in value:
            out[kv["key"]] = int(value["intValue"])
        elif "boolValue" in value:
            out[kv["key"]] = value["boolValue"]
        elif "arrayValue" in value:
            out[kv["key"]] = [v.get("stringValue") for v in value["arrayValue"]["values"]]
    return out


def _operation(span: dict[str, Any], given: dict[str, Any]) -> str | None:
    """`execute_tool` for a tool span (by its operation or its tool call id), else the span's
    GenAI operation, if any."""
    if "gen_ai.tool.call.id" in given:
        return "execute_tool"
    operation = given.get("gen_ai.operation.name")
    return operation if isinstance(operation, str) else None


def _tool_name(span: dict[str, Any], given: dict[str, Any]) -> str:
    return str(given.get("gen_ai.tool.name") or span["name"].removeprefix("execute_tool "))


def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, list):
        return {"key": key, "value": {"arrayValue": {"values": [
            {"stringValue": v} for v in value]}}}
    return {"key": key, "value": {"stringValue": str(value)}}


# --- Phoenix ------------------------------------------------------------------------------------
def phoenix_page(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"data": [phoenix_span(span) for _, span in _spans(docs)], "next_cursor": None}


def phoenix_download(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resource_spans": [
        {"resource": {"attributes": phoenix_attributes(rs["resource"]["attributes"])},
         "scope_spans": [{"scope": {"name": ss.get("scope", {}).get("name")},
                          "spans": [phoenix_span(span) for span in ss["spans"]]}
                         for ss in rs["scopeSpans"]]}
        for doc in docs for rs in doc["resourceSpans"]]}


# --- Langfuse -----------------------------------------------------------------------------------
def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def _langfuse_span(span: dict[str, Any]) -> dict[str, Any]:
    given = attrs(span)
    status = span.get("status", {})
    out: dict[str, Any] = {
        "traceId": _b64(span["traceId"]), "spanId": _b64(span["spanId"]),
        "name": span["name"], "kind": _KIND_NAMES[span.get("kind", 0)],
        "startTimeUnixNano": span["startTimeUnixNano"],
        "endTimeUnixNano": span["endTimeUnixNano"], "events": span.get("events", []),
    }
    if span.get("parentSpanId"):
        out["parentSpanId"] = _b64(span["parentSpanId"])
    meta = "langfuse.observation.metadata."
    kept = {k: v for k, v in given.items() if not k.startswith("gen_ai.")}
    operation = _operation(span, given)
    if operation == "execute_tool":
        out["name"] = _tool_name(span, given)
        kept["langfuse.observation.type"] = "tool"
        kept[meta + "tool_call_id"] = json.dumps(given["gen_ai.tool.call.id"])
        if "gen_ai.tool.call.arguments" in given:
            kept["langfuse.observation.input"] = given["gen_ai.tool.call.arguments"]
        if "gen_ai.tool.call.result" in given:
            kept["langfuse.observation.output"] = given["gen_ai.tool.call.result"]
    elif operation is not None:
        kept["langfuse.observation.type"] = "agent"
    if "gen_ai.conversation.id" in given:
        kept[meta + "thread_id"] = json.dumps(given["gen_ai.conversation.id"])
    if operation is not None and status.get("code") == 2:
        # the SDK marks a failed observation by its level; the span's own status stays unset
        kept["langfuse.observation.level"] = "ERROR"
        kept["langfuse.observation.status_message"] = status.get("message") or "error"
    elif status.get("code"):
        out["status"] = {"code": _STATUS_NAMES[status["code"]],
                         **({"message": status["message"]} if status.get("message") else {})}
    out["attributes"] = [_kv(k, v) for k, v in kept.items()]
    return out


def langfuse(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"resourceSpans": [
        {"resource": rs["resource"],
         "scopeSpans": [{"scope": {"name": "langfuse-sdk"},
                         "spans": [_langfuse_span(span) for span in ss["spans"]]}
                        for ss in rs["scopeSpans"]]}
        for rs in doc["resourceSpans"]]} for doc in docs]


def langfuse_page(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """Langfuse's observations API page (`{"data": [...], "meta": {}}`, every field group) for
    these requests, as the local Langfuse-compatible server stores and answers them."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from tests.connectors.langfuse_server import Store

    store = Store("pk", "sk", page=1000)
    for doc in requests:
        store.ingest(ParseDict(doc, ExportTraceServiceRequest()).SerializeToString())
    return store.query({"fields": ["core,basic,time,io,metadata"], "limit": ["1000"]})


def langfuse_live(requests: list[dict[str, Any]], path: Path) -> Path:
    """What `--traces langfuse+http://...` saves of these spans: each sent as OTLP protobuf to
    the local Langfuse-compatible server (tests.connectors.langfuse_server, stored as Langfuse
    stores them: times in milliseconds), then every trace read back through its observations
    API by twice's live backend and saved as `twice investigate --out` saves it."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from tests.connectors.langfuse_server import langfuse_server
    from twice.connectors.live.traces import backend_from_url, save_traces

    trace_ids = sorted({base64.b64decode(span["traceId"]).hex()
                        for doc in requests for rs in doc["resourceSpans"]
                        for ss in rs["scopeSpans"] for span in ss["spans"]})
    with langfuse_server("pk-lf-formats", "sk-lf-formats", page=3) as (url, store):
        for doc in requests:
            store.ingest(ParseDict(doc, ExportTraceServiceRequest()).SerializeToString())
        host = url.removeprefix("http://")
        backend = backend_from_url(f"langfuse+http://pk-lf-formats:sk-lf-formats@{host}")
        fetched = [backend.get_trace(trace_id) for trace_id in trace_ids]
    assert all(not result.warnings for result, _ in fetched)
    save_traces([doc for _, doc in fetched], "langfuse", path)
    return path


# --- LangSmith ----------------------------------------------------------------------------------
def _uuid(hex_id: str) -> str:
    return str(uuid.UUID(hex_id.rjust(32, "0")))


def _iso(ns: str) -> str:
    # LangSmith's API prints UTC times without a zone, to the microsecond
    at = datetime.fromtimestamp(int(ns) // 1000 / 1e6, tz=UTC)
    return at.replace(tzinfo=None).isoformat(timespec="microseconds")


def langsmith(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs for the tool spans and their GenAI-named ancestors (agent spans)."""
    runs = []
    for _, span in _spans(docs):
        given = attrs(span)
        operation = _operation(span, given)
        if operation is None:
            continue  # an HTTP client or queue span: LangChain's tracer makes no run of it
        status = span.get("status", {})
        error = None
        if status.get("code") == 2:
            kind = next((a["value"]["stringValue"] for e in span.get("events", [])
                         for a in e.get("attributes", []) if a["key"] == "exception.type"),
                        "Exception")
            error = ("Traceback (most recent call last):\n  File \"agent.py\", line 1, in "
                     f"charge\n{kind}: {status.get('message') or 'failed'}")
        metadata = {"thread_id": given.get("gen_ai.conversation.id"), "langgraph_step": 1,
                    "langgraph_node": "tools", "checkpoint_ns": "tools:" + span["spanId"]}
        run: dict[str, Any] = {
            "id": _uuid(span["spanId"]), "trace_id": _uuid(span["traceId"]),
            "parent_run_id": _uuid(span["parentSpanId"]) if span.get("parentSpanId") else None,
            "name": (_tool_name(span, given) if operation == "execute_tool"
                     else given.get("gen_ai.agent.name")),
            "run_type": "tool" if operation == "execute_tool" else "chain",
            "start_time": _iso(span["startTimeUnixNano"]),
            "end_time": _iso(span["endTimeUnixNano"]),
            "inputs": {"input": given.get("gen_ai.tool.call.arguments", "")},
            "outputs": None if error else {"output": given.get("gen_ai.tool.call.result")},
            "error": error, "status": "error" if error else "success",
            "extra": {"metadata": metadata},
            "dotted_order": None, "session_id": "0d1f9a57-1c1a-4f57-8d5e-5b3c2a1e0f00",
        }
        if operation == "execute_tool":
            run["extra"]["tool_call_id"] = given.get("gen_ai.tool.call.id")
        runs.append(run)
    return runs


# --- Jaeger, Tempo ------------------------------------------------------------------------------
def tempo(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"batches": [rs for doc in docs for rs in doc["resourceSpans"]]}


def write(fmt: str, spans_jsonl: Path, out_dir: Path) -> Path:
    """The incident's spans in format `fmt`, written into `out_dir`; returns the file."""
    docs = exports(spans_jsonl)
    if fmt == "otlp":
        path = out_dir / "spans.jsonl"
        path.write_text(spans_jsonl.read_text())
    elif fmt == "jaeger":
        from twice.lab.jaeger_export import write_jaeger

        path = write_jaeger(spans_jsonl, out_dir / "traces.json")
    elif fmt == "tempo":
        path = out_dir / "tempo.json"
        path.write_text(json.dumps(tempo(docs)))
    elif fmt == "phoenix_page":
        path = out_dir / "phoenix_spans.json"
        path.write_text(json.dumps(phoenix_page(docs)))
    elif fmt == "phoenix_download":
        path = out_dir / "phoenix_trace.json"
        path.write_text(json.dumps(phoenix_download(docs)))
    elif fmt == "langfuse":
        path = out_dir / "langfuse.jsonl"
        path.write_text("".join(json.dumps(doc) + "\n" for doc in langfuse(docs)))
    elif fmt == "langfuse_live":
        path = langfuse_live(langfuse(docs), out_dir / "langfuse_observations.jsonl")
    elif fmt == "langsmith":
        path = out_dir / "langsmith_runs.jsonl"
        path.write_text("".join(json.dumps(run) + "\n" for run in langsmith(docs)))
    else:
        raise ValueError(fmt)
    return path
