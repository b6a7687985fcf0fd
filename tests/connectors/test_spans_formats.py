"""Span and event files as other tools write them: Tempo's answers saved to a file (v2
`{"trace": ...}`, v1 `{"batches": ...}`), one bare ResourceSpans a line (opentelemetry-java's
`logging-otlp` exporter), headers captured by OpenTelemetry Python's HTTP instrumentations
(underscores), and stripe-python's printed events (JSON documents one after another).

The spans come from the real OpenTelemetry SDK, its OTLP JSON file exporter and the real
`opentelemetry-instrumentation-requests` talking to a server on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pandas as pd
import pytest
import stripe

from twice.connectors import registry, spans
from twice.connectors.base import SourceError
from twice.connectors.provider import stripe_events

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


class _Provider(BaseHTTPRequestHandler):
    """Answers every POST as a Stripe-like API does: a Request-Id header."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("Request-Id", "req_captured1")
        self.send_header("Idempotent-Replayed", "true")
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def provider_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Provider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


_CAPTURE = """
import sys
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
import requests

path, url = sys.argv[1], sys.argv[2]
provider = TracerProvider(resource=Resource.create({"host.name": "worker-a"}))
provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
RequestsInstrumentor().instrument(tracer_provider=provider)
tracer = provider.get_tracer("agent")
with tracer.start_as_current_span("execute_tool charge", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "charge",
        "gen_ai.tool.call.id": "toolu_1"}):
    requests.post(url + "/v1/charges", data={"amount": 4900},
                  headers={"Idempotency-Key": "key-1"}, timeout=10)
provider.shutdown()
"""


@pytest.fixture
def captured_spans(tmp_path: Path, provider_url: str) -> Path:
    """A tool span and the HTTP client span `requests` made under it, with the provider's
    Request-Id and the Idempotency-Key sent captured as OpenTelemetry Python names them.
    In a process of its own: an instrumentor is installed once per process, with the
    capture settings of that moment."""
    path = tmp_path / "spans.jsonl"
    env = {**os.environ,
           "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE":
               "request-id,idempotent-replayed",
           "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST": "idempotency-key"}
    done = subprocess.run([sys.executable, "-c", _CAPTURE, str(path), provider_url], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return path


def _http_rows(path: Path) -> pd.DataFrame:
    rows = spans.load(path).rows
    return rows[rows["kind"] == "http_span"]


def test_headers_captured_with_underscores_are_read(captured_spans: Path) -> None:
    text = captured_spans.read_text()
    assert "http.response.header.request_id" in text  # the instrumentation's own name
    http = _http_rows(captured_spans)
    assert list(http["request_id"]) == ["req_captured1"]
    assert list(http["idempotency_key"]) == ["key-1"]
    assert list(http["outcome"]) == ["replayed"]
    assert list(http["tool_call_id"]) == ["toolu_1"]


def _exports(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _same_rows(a: pd.DataFrame, b: pd.DataFrame) -> None:
    columns = ["kind", "span_id", "parent_span_id", "tool_call_id", "request_id", "at", "end"]
    key = ["span_id"]
    pd.testing.assert_frame_equal(a[columns].sort_values(key).reset_index(drop=True),
                                  b[columns].sort_values(key).reset_index(drop=True))


@pytest.mark.parametrize("form", ["v2", "v1"])
def test_tempo_answers_saved_to_a_file_are_read(captured_spans: Path, tmp_path: Path,
                                                form: str) -> None:
    batches = [rs for doc in _exports(captured_spans) for rs in doc["resourceSpans"]]
    doc = {"trace": {"resourceSpans": batches}} if form == "v2" else {"batches": batches}
    path = tmp_path / f"tempo-{form}.json"
    path.write_text(json.dumps(doc, indent=2))
    assert registry.detect(path) == "spans"
    _same_rows(spans.load(path).rows, spans.load(captured_spans).rows)


def test_one_bare_resource_spans_a_line_is_read(captured_spans: Path, tmp_path: Path) -> None:
    path = tmp_path / "logging-otlp.jsonl"
    path.write_text("".join(json.dumps(rs) + "\n" for doc in _exports(captured_spans)
                            for rs in doc["resourceSpans"]))
    assert registry.detect(path) == "spans"
    _same_rows(spans.load(path).rows, spans.load(captured_spans).rows)


def test_stripe_python_printed_events_are_read(tmp_path: Path) -> None:
    """`print(event)` of stripe-python objects: each event pretty-printed, one after another."""
    listed = json.loads((SAMPLES / "step_retry" / "events.json").read_text())["data"]
    printed = tmp_path / "printed.txt"
    printed.write_text("\n".join(str(stripe.Event.construct_from(e, "sk_test_x"))
                                 for e in listed) + "\n")
    got = stripe_events.load(printed)
    expected = stripe_events.load(SAMPLES / "step_retry" / "events.json")
    assert sorted(got.rows["event_id"]) == sorted(expected.rows["event_id"])
    assert got.rows["origin"].str.startswith(f"{printed}:").all()


def test_a_file_that_is_not_json_says_so(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("{ this is not json\nnor is this }\n")
    with pytest.raises(SourceError, match="not JSON"):
        stripe_events.load(path)
