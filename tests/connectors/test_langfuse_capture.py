"""What the real Langfuse SDK sends: its LangChain CallbackHandler traces a real LangGraph graph
whose tool node timed out once and was retried (RetryPolicy), and exports OTLP protobuf, gzip,
to `/api/public/otel/v1/traces` of a local endpoint. Decoded to protobuf's canonical JSON (as
a user converting a capture would), twice reads both attempts as tool spans of one tool call by
default. The SDK runs in a process of its own, in the Langfuse side environment
(tests/side_venvs.py: its OTLP exporter's pins cannot share twice's environment); skipped where
TWICE_TEST_LANGFUSE_PYTHON is unset."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.side_venvs import LANGFUSE, side_python
from twice.connectors import registry, spans

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

import pathlib

sent = pathlib.Path(sys.argv[2])  # each body as it was sent
with open(sys.argv[1], "w") as out:
    for i, (path, encoding, body) in enumerate(bodies):
        if path.endswith("/api/public/otel/v1/traces"):
            (sent / f"traces-{i}.pb{'.gz' * (encoding == 'gzip')}").write_bytes(body)
            raw = gzip.decompress(body) if encoding == "gzip" else body
            message = ExportTraceServiceRequest.FromString(raw)
            out.write(MessageToJson(message, indent=None) + "\n")
'''


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the requests decoded to canonical JSON, one a line; a folder of the bodies as sent)."""
    folder = tmp_path_factory.mktemp("langfuse")
    path, sent = folder / "langfuse.jsonl", folder / "sent"
    sent.mkdir()
    done = subprocess.run([side_python(LANGFUSE), "-c", CAPTURE, str(path), str(sent)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert path.read_text().strip(), "the SDK sent no spans"
    return path, sent


def _tools(result: Any) -> Any:
    return result.rows[result.rows["kind"] == "tool_span"].sort_values("at")


def test_langfuse_tool_spans_from_the_real_sdk(captured: tuple[Path, Path]) -> None:
    path, _ = captured
    assert registry.detect(path) == "spans"
    result = spans.load(path)
    assert result.warnings == []
    tools = _tools(result)
    assert list(tools["tool_call_id"]) == ["call_abc", "call_abc"]
    assert list(tools["thread_id"]) == ["thr-9", "thr-9"]
    assert set(tools["tool_name"]) == {"charge_customer"}
    assert list(tools["outcome"]) == ["timeout", "unknown"]
    assert set(tools["amount"]) == {500}


COLUMNS = ["at", "tool_call_id", "thread_id", "tool_name", "outcome", "amount", "span_id"]


def test_langfuse_protobuf_is_read_as_sent_gzipped_or_not(
        captured: tuple[Path, Path], tmp_path: Path) -> None:
    """The bodies the SDK posted (OTLP protobuf, gzip), read directly: the same tool spans as
    their JSON decoding; unzipped, the same again; a folder of them is sniffed."""
    path, sent = captured
    bodies = sorted(sent.iterdir())
    assert bodies and all(b.read_bytes()[:2] == b"\x1f\x8b" for b in bodies)  # gzip, as sent
    expected = _tools(spans.load(path))[COLUMNS].reset_index(drop=True)
    plain = tmp_path / "plain"
    plain.mkdir()
    for body in bodies:
        assert registry.detect(body) == "spans"
        (plain / body.name.removesuffix(".gz")).write_bytes(gzip.decompress(body.read_bytes()))
    # no suffix to go by: the content says it is OTLP protobuf
    (tmp_path / "capture").write_bytes(bodies[-1].read_bytes())
    assert registry.detect(tmp_path / "capture") == "spans"
    for folder in (sent, plain):
        found, skipped = registry.scan_folder(folder)
        assert skipped == [] and {n for n, _ in found} == {"spans"}
        loaded = registry.load_all([(n, p, {}) for n, p in found])
        assert loaded.warnings == []
        tools = _tools(loaded)[COLUMNS].reset_index(drop=True)
        assert tools.equals(expected), (folder, tools, expected)
