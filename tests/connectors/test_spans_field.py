"""The spans connector on spans as field instrumentation writes them: OpenInference TOOL spans
whose tool call id is only inside `output.value` (LangChain's serialised ToolMessage), and HTTP
client spans in the old semantic conventions. Written with the real OpenTelemetry SDK and
exporter; the ToolMessages are serialised by langchain_core as OpenInference does
(`message_to_dict`, then JSON). Runs of the real instrumentations:
tests/lab/test_instrument_field.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from langchain_core.messages import AIMessage, ToolMessage, message_to_dict
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from twice.connectors import spans
from twice.connectors.spans.interpret import tool_message_call_id
from twice.lab.jaeger_export import write_jaeger

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns
ARGS = '{"customer_id": "cus_F", "amount": 4900, "currency": "usd"}'


def _message_json(message: ToolMessage | AIMessage) -> str:
    return json.dumps(message_to_dict(message))


OK = _message_json(ToolMessage('{"status": "succeeded"}', tool_call_id="toolu_ok",
                               name="charge"))
ERROR_RESULT = _message_json(ToolMessage("Error: card declined", tool_call_id="toolu_err",
                                         name="charge", status="error"))
OUTPUTS = {
    "ok": (OK, "toolu_ok"),
    "error_result": (ERROR_RESULT, "toolu_err"),  # the call was made; its result is an error
    "plain_text": ("charged pi_1", None),
    "ai_message": (_message_json(AIMessage("hi")), None),
    "truncated": (OK[:40], None),
    "id_not_text": (json.dumps({"type": "tool", "data": {"type": "tool", "tool_call_id": 7}}),
                    None),
    "no_data_type": (json.dumps({"type": "tool", "data": {"tool_call_id": "toolu_x"}}), None),
    "blank_id": (json.dumps({"type": "tool", "data": {"type": "tool", "tool_call_id": " "}}),
                 None),
}


def test_the_tool_message_shape_is_langchains() -> None:
    data = json.loads(OK)
    assert data["type"] == "tool" and data["data"]["type"] == "tool"
    assert data["data"]["tool_call_id"] == "toolu_ok" and data["data"]["status"] == "success"


@pytest.mark.parametrize("label", sorted(OUTPUTS))
def test_tool_message_call_id_is_strict(label: str) -> None:
    value, expected = OUTPUTS[label]
    assert tool_message_call_id(value) == expected
    assert tool_message_call_id({"type": "tool"}) is None  # not text: nothing parsed


def _record(path: Path) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "agent",
                                                        "host.name": "pod-1"}))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    tracer = provider.get_tracer("openinference.instrumentation.langchain")
    at = T0
    for label, (value, _) in sorted(OUTPUTS.items()):
        chain = tracer.start_span("tools", start_time=at, attributes={
            "openinference.span.kind": "CHAIN", "session.id": f"thread-{label}",
            "output.value": json.dumps({"messages": [json.loads(OK)]})})
        tool = tracer.start_span("charge", context=trace.set_span_in_context(chain),
                                 start_time=at + 1000, attributes={
                                     "openinference.span.kind": "TOOL", "tool.name": "charge",
                                     "input.value": ARGS, "session.id": f"thread-{label}",
                                     "output.value": value})
        if label == "ok":  # an HTTP span under the tool span (requests' spans are not, by default)
            tracer.start_span("POST", context=trace.set_span_in_context(tool),
                              kind=SpanKind.CLIENT, start_time=at + 2000, attributes={
                                  "http.method": "POST", "http.status_code": 200,
                                  "http.url": "http://127.0.0.1:9/v1/payment_intents?x=1"},
                              ).end(end_time=at + 3000)
        tool.end(end_time=at + 4000)
        chain.end(end_time=at + 5000)
        at += 10**9
    # an explicit tool_call.id attribute wins over output.value
    tracer.start_span("charge", start_time=at, attributes={
        "openinference.span.kind": "TOOL", "tool_call.id": "call_attr",
        "output.value": OK}).end(end_time=at + 1000)
    # HTTP client spans, no parent: old semconv, stable semconv, each with and without a count
    http: list[dict[str, str | int]] = [
        {"http.method": "POST"},  # -> unknown
        {"http.method": "POST", "http.request.resend_count": 1},  # -> 1
        {"http.request.method": "POST"},  # -> 0
        {"http.request.method": "POST", "http.request.resend_count": 2},  # -> 2
    ]
    for k, attrs in enumerate(http):
        tracer.start_span("POST", kind=SpanKind.CLIENT, start_time=at + (10 + k) * 1000,
                          attributes={**attrs, "url.full": f"http://h/v1/r{k}"}
                          ).end(end_time=at + (20 + k) * 1000)
    provider.shutdown()


@pytest.fixture(scope="module")
def field_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("field") / "spans.jsonl"
    _record(path)
    return path


@pytest.fixture(scope="module")
def rows(field_file: Path) -> pd.DataFrame:
    result = spans.load(field_file)
    assert result.warnings == []
    return result.rows


def test_openinference_tool_call_id_from_output_value(rows: pd.DataFrame) -> None:
    tools = rows[(rows["kind"] == "tool_span") & rows["thread_id"].notna()]
    assert len(tools) == len(OUTPUTS)  # the CHAIN spans are no tool spans
    for _, row in tools.iterrows():
        expected = OUTPUTS[row["thread_id"].removeprefix("thread-")][1]
        if expected is None:
            assert pd.isna(row["tool_call_id"]), row["thread_id"]
        else:
            assert row["tool_call_id"] == expected
        assert (row["subject"], row["amount"], row["currency"]) == ("cus_F", 4900, "usd")
    explicit = rows[(rows["kind"] == "tool_span") & rows["thread_id"].isna()].iloc[0]
    assert explicit["tool_call_id"] == "call_attr"


def test_an_http_span_under_the_tool_span_inherits_its_id(rows: pd.DataFrame) -> None:
    nested = rows[(rows["kind"] == "http_span") & rows["parent_span_id"].notna()].iloc[0]
    assert (nested["thread_id"], nested["tool_call_id"]) == ("thread-ok", "toolu_ok")
    assert (nested["method"], nested["path"], nested["status"]) == (
        "POST", "/v1/payment_intents", 200)


def test_resend_count_is_unknown_only_for_old_semconv_without_one(rows: pd.DataFrame) -> None:
    http = rows[(rows["kind"] == "http_span") & rows["path"].str.startswith("/v1/r")]
    counts = dict(zip(http["path"], http["resend_count"], strict=True))
    assert pd.isna(counts["/v1/r0"])  # http.method, no count: unknown
    assert (counts["/v1/r1"], counts["/v1/r2"], counts["/v1/r3"]) == (1, 0, 2)
    nested = rows[(rows["kind"] == "http_span") & rows["parent_span_id"].notna()]
    assert nested["resend_count"].isna().all()


def test_the_same_rows_from_jaeger_json(field_file: Path, rows: pd.DataFrame,
                                        tmp_path: Path) -> None:
    path = write_jaeger(field_file, tmp_path / "jaeger.json")
    result = spans.load(path)
    assert result.warnings == []
    key = ["trace_id", "span_id"]
    # every time in this file is a whole microsecond: the rows are equal to the last column
    pd.testing.assert_frame_equal(
        result.rows.drop(columns="origin").sort_values(key, ignore_index=True),
        rows.drop(columns="origin").sort_values(key, ignore_index=True))
