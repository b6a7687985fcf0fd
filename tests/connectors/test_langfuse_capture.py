"""What the real Langfuse SDK sends: its LangChain CallbackHandler traces a real LangGraph graph
whose tool node timed out once and was retried (RetryPolicy), and exports OTLP protobuf, gzip,
to `/api/public/otel/v1/traces` of a local endpoint. Decoded to protobuf's canonical JSON (as
a user converting a capture would), twice reads both attempts as tool spans of one tool call by
default. The SDK runs in a process of its own: it sets up OpenTelemetry for the process.
Needs the `langfuse` extra (`pip install 'twice[langfuse]'`); skipped without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from twice.connectors import registry, spans

pytest.importorskip("langfuse")
pytest.importorskip("opentelemetry.proto")

CAPTURE = r'''
import gzip, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

bodies = []

class Endpoint(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        bodies.append((self.path, self.headers.get("Content-Encoding"), body))
        self._ok()

    def do_GET(self):
        self._ok()

    def _ok(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
threading.Thread(target=server.serve_forever, daemon=True).start()

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langfuse import Langfuse
from langfuse.langchain import CallbackHandler
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import RetryPolicy

client = Langfuse(public_key="pk-lf-twice", secret_key="sk-lf-twice",
                  host=f"http://127.0.0.1:{server.server_address[1]}")
calls = []

@tool
def charge_customer(customer: str, amount: int) -> str:
    """Charge the customer."""
    calls.append(amount)
    if len(calls) == 1:
        raise TimeoutError("read timed out")
    return "charged"

def model(state):
    return {"messages": [AIMessage("", tool_calls=[{
        "name": "charge_customer", "args": {"customer": "cus_1", "amount": 500},
        "id": "call_abc"}])]}

graph = StateGraph(MessagesState)
graph.add_node("model", model)
graph.add_node("tools", ToolNode([charge_customer], handle_tool_errors=False),
               retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.01, jitter=False,
                                        retry_on=lambda exc: True))
graph.add_edge(START, "model")
graph.add_edge("model", "tools")
graph.add_edge("tools", END)
graph.compile().invoke({"messages": []}, {"configurable": {"thread_id": "thr-9"},
                                          "callbacks": [CallbackHandler()]})
client.flush()

from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

with open(sys.argv[1], "w") as out:
    for path, encoding, body in bodies:
        if path.endswith("/api/public/otel/v1/traces"):
            raw = gzip.decompress(body) if encoding == "gzip" else body
            message = ExportTraceServiceRequest.FromString(raw)
            out.write(MessageToJson(message, indent=None) + "\n")
'''


def test_langfuse_tool_spans_from_the_real_sdk(tmp_path: Path) -> None:
    path = tmp_path / "langfuse.jsonl"
    done = subprocess.run([sys.executable, "-c", CAPTURE, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert path.read_text().strip(), "the SDK sent no spans"
    assert registry.detect(path) == "spans"
    result = spans.load(path)
    assert result.warnings == []
    tools = result.rows[result.rows["kind"] == "tool_span"].sort_values("at")
    assert list(tools["tool_call_id"]) == ["call_abc", "call_abc"]
    assert list(tools["thread_id"]) == ["thr-9", "thr-9"]
    assert set(tools["tool_name"]) == {"charge_customer"}
    assert list(tools["outcome"]) == ["timeout", "unknown"]
    assert set(tools["amount"]) == {500}
