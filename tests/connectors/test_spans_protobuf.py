"""OTLP protobuf span files read directly (twice.connectors.spans.protobuf): the real
OpenTelemetry SDK's spans encoded by its own OTLP protobuf encoder (as its OTLP/HTTP exporter
sends them), gzipped or not, give the same rows as the same spans through its OTLP JSON encoder;
a broken file is one clear error; without `opentelemetry-proto` the error names the extra.
(What the Langfuse SDK sends: tests/connectors/test_langfuse_capture.py.)"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.without_modules import twice_without
from twice.connectors import registry, spans
from twice.connectors.base import SourceError

pytest.importorskip("opentelemetry.sdk")
proto_encoder = pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.common.trace_encoder",
    reason="the OpenTelemetry SDK's protobuf encoder (opentelemetry-exporter-otlp-proto-common)")
json_encoder = pytest.importorskip("opentelemetry.exporter.otlp.json.common.trace_encoder")

COLUMNS = ["at", "kind", "tool_call_id", "thread_id", "tool_name", "outcome", "span_id",
           "trace_id"]


def _sdk_spans() -> list[Any]:
    """A step retry as an instrumented agent traces it: one agent span, two `execute_tool`
    spans of one tool call, the first failed with a timeout."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "billing-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent billing", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "thr_pb"}):
        for attempt in (1, 2):
            with tracer.start_as_current_span("execute_tool charge", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "charge",
                    "gen_ai.tool.call.id": "call_pb",
                    "gen_ai.tool.call.arguments": '{"amount": 900}'}) as span:
                if attempt == 1:
                    span.record_exception(TimeoutError("read timed out"))
                    span.set_status(Status(StatusCode.ERROR, "read timed out"))
    provider.shutdown()
    return list(memory.get_finished_spans())


@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """(the spans as OTLP JSON, the same spans as an OTLP protobuf request)."""
    sdk_spans = _sdk_spans()
    folder = tmp_path_factory.mktemp("encoded")
    as_json = folder / "spans.json"
    as_json.write_text(json.dumps(json_encoder.encode_spans(sdk_spans).to_dict()))
    return as_json, proto_encoder.encode_spans(sdk_spans).SerializeToString()


def _rows(path: Path) -> Any:
    result = spans.load(path)
    assert result.warnings == []
    return result.rows[COLUMNS].sort_values(["at", "span_id"]).reset_index(drop=True)


@pytest.mark.parametrize("name", ["spans.pb", "spans.binpb.gz", "export", "export.gz"])
def test_protobuf_gives_the_rows_its_json_gives(encoded: tuple[Path, bytes], tmp_path: Path,
                                                name: str) -> None:
    as_json, body = encoded
    path = tmp_path / name
    path.write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    assert registry.detect(path) == "spans"  # by its suffix, or by its content
    rows, expected = _rows(path), _rows(as_json)
    assert rows.equals(expected), (rows, expected)
    tools = rows[rows["kind"] == "tool_span"]
    assert list(tools["tool_call_id"]) == ["call_pb", "call_pb"]
    assert list(tools["outcome"]) == ["timeout", "unknown"]  # the second left its status unset


def test_appended_requests_are_read_as_one(encoded: tuple[Path, bytes], tmp_path: Path) -> None:
    """Two bodies saved into one file (or two gzip members) are one request: no span lost."""
    as_json, body = encoded
    path = tmp_path / "two.pb.gz"
    path.write_bytes(gzip.compress(body) + gzip.compress(body))
    result = spans.load(path)
    assert len(result.rows) == len(_rows(as_json))  # the repeats are dropped, said once
    assert [w.detail for w in result.warnings if "more than once" in w.detail]


@pytest.mark.parametrize(("data", "why"), [
    (b"\x1f\x8b\x08\x00not gzip at all", "not a readable gzip stream"),
    (b"\x0a\xff\xff\xff\xff\x0f", "not an OTLP protobuf trace request"),
])
def test_a_broken_protobuf_file_is_one_clear_error(tmp_path: Path, data: bytes,
                                                   why: str) -> None:
    path = tmp_path / "broken.pb"
    path.write_bytes(data)
    with pytest.raises(SourceError, match=why) as err:
        spans.load(path)
    assert err.value.source == str(path)


def test_without_opentelemetry_proto_the_error_names_the_extra(
        encoded: tuple[Path, bytes], tmp_path: Path) -> None:
    path = tmp_path / "spans.pb"
    path.write_bytes(encoded[1])
    done = twice_without(["opentelemetry.proto"], "analyze", str(path))
    assert done.returncode == 2, done.stderr
    assert "the 'protobuf' extra" in done.stderr and "pip install 'twice[protobuf]'" in done.stderr
    assert "Traceback" not in done.stderr
