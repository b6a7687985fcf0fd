"""The spans connector on OTLP JSON lines written by the real OpenTelemetry SDK and the
`opentelemetry-exporter-otlp-json-file` exporter (FileSpanExporter appending to a file)."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pandas as pd
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from twice.connectors import spans
from twice.timeline import canonical_json, fingerprint, validate

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns
CHARGE_ARGS = {"customer": "cus_9", "amount": 5000, "currency": "USD"}


def ns(seconds: float) -> int:
    return T0 + round(seconds * 1e9)


def stamp(seconds: float) -> pd.Timestamp:
    return pd.Timestamp(ns(seconds), unit="ns", tz="UTC")


def _provider(path: Path, resource: dict[str, str], batch: bool = False) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create(resource))
    exporter = FileSpanExporter(path)
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else
                                SimpleSpanProcessor(exporter))
    return provider


def record_worker_a(path: Path) -> None:
    """An agent run on worker-a: a charge tool call whose first HTTP attempt times out and whose
    SDK resends it (resend_count 1); then a receipt tool that fails. Batched: several spans a
    line, as a long-running service writes them."""
    provider = _provider(path, {"host.name": "worker-a", "service.name": "billing-agent"},
                         batch=True)
    tracer = provider.get_tracer("lab.agent")
    root = tracer.start_span("invoke_agent billing", start_time=ns(0), attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "thread-7"})
    in_root = trace.set_span_in_context(root)
    tracer.start_span("chat claude", context=in_root, start_time=ns(0.1), attributes={
        "gen_ai.operation.name": "chat"}).end(end_time=ns(0.9))
    tool = tracer.start_span("execute_tool create_charge", context=in_root, start_time=ns(1),
                             attributes={
                                 "gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": "create_charge",
                                 "gen_ai.tool.call.id": "toolu_01",
                                 "gen_ai.tool.call.arguments": orjson.dumps(CHARGE_ARGS).decode(),
                             })
    in_tool = trace.set_span_in_context(tool)
    first = tracer.start_span("POST", context=in_tool, kind=SpanKind.CLIENT, start_time=ns(1.1),
                              attributes={
                                  "http.request.method": "POST",
                                  "url.full": "https://api.stripe.com/v1/charges?expand[]=customer",
                                  "http.request.resend_count": 0,
                                  "http.request.header.idempotency-key": ["key-1"],
                                  "error.type": "httpx.ReadTimeout",
                              })
    first.record_exception(httpx.ReadTimeout("The read operation timed out"), timestamp=ns(31.1))
    first.set_status(Status(StatusCode.ERROR, "The read operation timed out"))
    first.end(end_time=ns(31.1))
    second = tracer.start_span("POST", context=in_tool, kind=SpanKind.CLIENT, start_time=ns(31.7),
                               attributes={
                                   "http.request.method": "POST",
                                   "url.full": "https://api.stripe.com/v1/charges",
                                   "http.request.resend_count": 1,
                                   "http.request.header.idempotency-key": ["key-1"],
                                   "http.response.status_code": 200,
                                   "http.response.header.request-id": ["req_2"],
                               })
    second.end(end_time=ns(32.2))
    tool.set_status(Status(StatusCode.OK))
    tool.end(end_time=ns(32.3))
    receipt = tracer.start_span("execute_tool send_receipt", context=in_root, start_time=ns(33),
                                attributes={"gen_ai.tool.name": "send_receipt",
                                            "gen_ai.tool.call.id": "toolu_02"})
    receipt.record_exception(ValueError("mailbox unavailable"), timestamp=ns(33.5))
    receipt.set_status(Status(StatusCode.ERROR, "mailbox unavailable"))
    receipt.end(end_time=ns(33.5))
    # a server span with an HTTP method is someone else's request: not one of our attempts
    tracer.start_span("GET /health", kind=SpanKind.SERVER, start_time=ns(34), attributes={
        "http.request.method": "GET", "url.path": "/health"}).end(end_time=ns(34.01))
    root.end(end_time=ns(35))
    provider.shutdown()


def record_worker_b(path: Path) -> None:
    """The same run redelivered to worker-b 5 minutes later: an SQS consumer span with the
    receive count, the charge tool re-executed under it, its HTTP call through Envoy."""
    provider = _provider(path, {"host.name": "worker-b", "service.name": "billing-agent"})
    tracer = provider.get_tracer("lab.worker")
    receive = tracer.start_span("runs process", kind=SpanKind.CONSUMER, start_time=ns(300),
                                attributes={
                                    "messaging.system": "aws_sqs",
                                    "messaging.operation.type": "process",
                                    "messaging.message.id": "5fea7756-0ea4-451a-a703-a558b933e274",
                                    "messaging.sqs.message.approximate_receive_count": 2,
                                    "langgraph.thread_id": "thread-7",
                                })
    in_receive = trace.set_span_in_context(receive)
    tool = tracer.start_span("execute_tool create_charge", context=in_receive,
                             start_time=ns(300.5),
                             attributes={"gen_ai.tool.name": "create_charge",
                                         "gen_ai.tool.call.id": "toolu_01",
                                         "gen_ai.tool.call.arguments": CHARGE_ARGS_TEXT_REORDERED})
    http = tracer.start_span("POST", context=trace.set_span_in_context(tool),
                             kind=SpanKind.CLIENT, start_time=ns(300.6), attributes={
                                 "http.request.method": "POST",
                                 "url.full": "https://api.stripe.com/v1/charges",
                                 "http.response.status_code": 200,
                                 "http.response.header.request-id": ["req_3"],
                                 "http.response.header.x-envoy-attempt-count": ["2"],
                             })
    http.end(end_time=ns(301))
    tool.end(end_time=ns(301.1))
    receive.end(end_time=ns(301.2))
    provider.shutdown()


CHARGE_ARGS_TEXT_REORDERED = '{"currency": "USD", "amount": 5000, "customer": "cus_9"}'


def record_openinference(path: Path) -> None:
    """OpenInference-style attributes (as its LangChain instrumentor writes them): session.id on
    the chain, a TOOL span with input.value JSON and tool.parameters holding the schema, and an
    HTTP client span in the old semconv (http.method, http.url, http.status_code)."""
    provider = _provider(path, {"service.instance.id": "pod-oi-1", "service.name": "oi-agent"})
    tracer = provider.get_tracer("openinference.instrumentation.langchain")
    chain = tracer.start_span("LangGraph", start_time=ns(600), attributes={
        "openinference.span.kind": "CHAIN", "session.id": "thread-oi"})
    tool = tracer.start_span("refund", context=trace.set_span_in_context(chain),
                             start_time=ns(601), attributes={
                                 "openinference.span.kind": "TOOL",
                                 "tool.name": "refund",
                                 "tool_call.id": "call_abc",
                                 "tool.parameters": '{"type": "object", "properties": '
                                                    '{"customer_id": {"type": "string"}}}',
                                 "input.value": '{"customer_id": "cus_2", "amount": "1200", '
                                                '"currency": "eur"}',
                                 "input.mime_type": "application/json",
                             })
    tracer.start_span("POST", context=trace.set_span_in_context(tool), kind=SpanKind.CLIENT,
                      start_time=ns(601.1), attributes={
                          "http.method": "POST",
                          "http.url": "https://api.stripe.com/v1/refunds?key=secret",
                          "http.status_code": 200,
                          "stripe.request_id": "req_oi",
                      }).end(end_time=ns(601.4))
    tool.end(end_time=ns(601.5))
    chain.end(end_time=ns(602))
    provider.shutdown()


@pytest.fixture(scope="module")
def otlp_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spans") / "traces.jsonl"
    record_worker_a(path)
    record_worker_b(path)
    record_openinference(path)
    return path


@pytest.fixture(scope="module")
def rows(otlp_file: Path) -> pd.DataFrame:
    result = spans.load(otlp_file)
    assert result.warnings == []
    validate(result.rows)
    return result.rows


def test_the_exporter_writes_one_otlp_object_a_line(otlp_file: Path) -> None:
    lines = otlp_file.read_bytes().splitlines()
    docs = [orjson.loads(line) for line in lines]
    assert all(set(doc) == {"resourceSpans"} for doc in docs)
    span = docs[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert isinstance(span["startTimeUnixNano"], str) and isinstance(span["kind"], int)
    assert spans.sniff(otlp_file, otlp_file.read_bytes()[:65536])


def test_only_tool_http_and_queue_spans_become_rows(rows: pd.DataFrame) -> None:
    assert sorted(rows["kind"].value_counts().items()) == [
        ("http_span", 4), ("queue_receive", 1), ("tool_span", 4)]
    assert not rows["name"].isin(["invoke_agent billing", "chat claude", "GET /health",
                                  "LangGraph"]).any()
    assert (rows["source"] == "spans").all()
    assert rows["origin"].str.match(r".*traces\.jsonl:\d+$").all()


def test_tool_span_carries_the_tool_call(rows: pd.DataFrame) -> None:
    tool = rows[(rows["kind"] == "tool_span") & (rows["worker"] == "worker-a")
                & (rows["tool_name"] == "create_charge")].iloc[0]
    assert tool["tool_call_id"] == "toolu_01"
    assert tool["thread_id"] == "thread-7"  # from the invoke_agent span above it
    assert tool["args"] == canonical_json(CHARGE_ARGS)
    assert tool["args_fingerprint"] == fingerprint(CHARGE_ARGS)
    assert (tool["subject"], tool["amount"], tool["currency"]) == ("cus_9", 5000, "usd")
    assert (tool["at"], tool["end"]) == (stamp(1), stamp(32.3))
    assert tool["outcome"] == "ok"
    assert len(tool["trace_id"]) == 32 and len(tool["span_id"]) == 16


def test_http_attempts_belong_to_their_tool_call(rows: pd.DataFrame) -> None:
    attempts = rows[(rows["kind"] == "http_span") & (rows["worker"] == "worker-a")]
    attempts = attempts.sort_values("at")
    tool = rows[(rows["tool_call_id"] == "toolu_01") & (rows["kind"] == "tool_span")
                & (rows["worker"] == "worker-a")].iloc[0]
    assert attempts["resend_count"].tolist() == [0, 1]
    assert attempts["outcome"].tolist() == ["timeout", "ok"]
    assert attempts["status"].tolist() == [pd.NA, 200]
    assert attempts["request_id"].tolist() == [pd.NA, "req_2"]
    assert attempts["idempotency_key"].tolist() == ["key-1", "key-1"]
    assert attempts["path"].tolist() == ["/v1/charges", "/v1/charges"]  # query dropped
    assert (attempts["method"] == "POST").all()
    assert (attempts["tool_call_id"] == "toolu_01").all()
    assert (attempts["thread_id"] == "thread-7").all()
    assert (attempts["parent_span_id"] == tool["span_id"]).all()
    assert "ReadTimeout" in attempts["detail"].iloc[0]
    assert attempts["at"].iloc[0] == stamp(1.1)


def test_failed_tool_span_reports_its_exception(rows: pd.DataFrame) -> None:
    receipt = rows[rows["tool_name"] == "send_receipt"].iloc[0]
    assert receipt["outcome"] == "error"
    assert receipt["detail"] == "ValueError: mailbox unavailable"


def test_redelivered_run_on_another_worker(rows: pd.DataFrame) -> None:
    receive = rows[rows["kind"] == "queue_receive"].iloc[0]
    assert receive["delivery_count"] == 2
    assert receive["message_id"] == "5fea7756-0ea4-451a-a703-a558b933e274"
    assert (receive["thread_id"], receive["worker"]) == ("thread-7", "worker-b")
    again = rows[(rows["kind"] == "tool_span") & (rows["worker"] == "worker-b")].iloc[0]
    assert (again["tool_call_id"], again["thread_id"]) == ("toolu_01", "thread-7")
    # the same arguments in another key order are the same call
    first = rows[(rows["tool_call_id"] == "toolu_01") & (rows["kind"] == "tool_span")]
    assert first["args_fingerprint"].nunique() == 1
    http = rows[(rows["kind"] == "http_span") & (rows["worker"] == "worker-b")].iloc[0]
    assert (http["resend_count"], http["proxy_attempt"]) == (0, 2)  # client span: try 0
    assert (http["request_id"], http["tool_call_id"]) == ("req_3", "toolu_01")


def test_openinference_tool_span(rows: pd.DataFrame) -> None:
    tool = rows[(rows["tool_call_id"] == "call_abc") & (rows["kind"] == "tool_span")].iloc[0]
    assert tool["tool_name"] == "refund"
    # input.value, not tool.parameters (that one is the tool's schema)
    assert tool["args"] == canonical_json({"customer_id": "cus_2", "amount": "1200",
                                           "currency": "eur"})
    assert (tool["subject"], tool["amount"], tool["currency"]) == ("cus_2", 1200, "eur")
    assert tool["thread_id"] == "thread-oi"
    assert tool["worker"] == "pod-oi-1"  # no host.name: service.instance.id
    http = rows[(rows["kind"] == "http_span") & (rows["tool_call_id"] == "call_abc")].iloc[0]
    assert (http["method"], http["path"], http["status"]) == ("POST", "/v1/refunds", 200)
    assert (http["request_id"], http["outcome"]) == ("req_oi", "ok")
    # old semconv (`http.method`) has no resend count at all: its absence is no "try 0"
    assert pd.isna(http["resend_count"])
    assert not rows["path"].str.contains("secret").any()


def test_extra_attribute_names(tmp_path: Path) -> None:
    path = tmp_path / "custom.jsonl"
    provider = _provider(path, {"host.name": "w"})
    tracer = provider.get_tracer("custom")
    tool = tracer.start_span("charge", start_time=ns(0), attributes={"my.tool.id": "call_9"})
    tracer.start_span("POST", context=trace.set_span_in_context(tool), kind=SpanKind.CLIENT,
                      start_time=ns(0.1), attributes={"http.request.method": "POST",
                                                      "acme.request_id": "req_9"}
                      ).end(end_time=ns(0.2))
    tool.end(end_time=ns(0.3))
    provider.shutdown()

    plain = spans.load(path).rows
    assert plain["kind"].tolist() == ["http_span"]
    assert pd.isna(plain["tool_call_id"].iloc[0]) and pd.isna(plain["request_id"].iloc[0])

    rows = spans.load(path, tool_attribute="my.tool.id", request_id_attribute="acme.request_id")
    by_kind = rows.rows.set_index("kind")
    assert by_kind.loc["tool_span", "tool_call_id"] == "call_9"
    assert by_kind.loc["http_span", "tool_call_id"] == "call_9"
    assert by_kind.loc["http_span", "request_id"] == "req_9"


def test_delivery_count_attribute_names(tmp_path: Path) -> None:
    path = tmp_path / "consumers.jsonl"
    provider = _provider(path, {"host.name": "w"})
    tracer = provider.get_tracer("consumers")
    counts = {
        "messaging.servicebus.message.delivery_count": 1,  # starts at 1
        "messaging.gcp_pubsub.message.delivery_attempt": 4,  # starts at 1
        "messaging.rabbitmq.message.x-delivery-count": 1,  # earlier failed deliveries: +1
    }
    for i, (key, value) in enumerate(counts.items()):
        tracer.start_span(key, kind=SpanKind.CONSUMER, start_time=ns(i),
                          attributes={key: value}).end(end_time=ns(i + 0.5))
    provider.shutdown()
    rows = spans.load(path).rows.set_index("name")
    assert rows["delivery_count"].to_dict() == dict(zip(counts, [1, 4, 2], strict=True))
