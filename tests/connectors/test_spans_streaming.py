"""Span files are read a line at a time: what a span inherits from its ancestors, and which
copies of a span are kept, must not depend on which line each span was written on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.connectors.fuzz_inputs import json_text, mutate
from twice.connectors import spans
from twice.connectors.base import LoadResult, SourceError
from twice.connectors.jsonfile import json_documents
from twice.timeline import validate

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns
TRACE = "5b8efff798038103d269b633813fc60c"


def _attr(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _export(*span_list: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{
        "resource": {"attributes": [_attr("host.name", "worker-a")]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": list(span_list)}]}]}


TOOL = {"traceId": TRACE, "spanId": "00000000000000a1", "name": "execute_tool charge",
        "kind": 1, "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 900),
        "attributes": [_attr("gen_ai.tool.call.id", "toolu_1"),
                       _attr("gen_ai.conversation.id", "thread-7")]}
HTTP = {"traceId": TRACE, "spanId": "00000000000000b1", "parentSpanId": "00000000000000a1",
        "name": "POST", "kind": 3, "startTimeUnixNano": str(T0 + 100),
        "endTimeUnixNano": str(T0 + 700), "attributes": [_attr("http.request.method", "POST")]}


def _write(tmp_path: Path, *docs: dict[str, Any]) -> Path:
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    return path


def test_an_http_attempt_exported_before_its_tool_span_still_belongs_to_it(
    tmp_path: Path,
) -> None:
    # a batching exporter writes a child (it ends first) a line before its parent
    result = spans.load(_write(tmp_path, _export(HTTP), _export(TOOL)))
    validate(result.rows)
    http = result.rows[result.rows["kind"] == "http_span"].iloc[0]
    assert (http["tool_call_id"], http["thread_id"]) == ("toolu_1", "thread-7")
    assert result.rows["origin"].tolist() == [f"{tmp_path / 'traces.jsonl'}:1",
                                              f"{tmp_path / 'traces.jsonl'}:2"]


def test_a_span_repeated_on_a_later_line_keeps_its_first_copy(tmp_path: Path) -> None:
    renamed = {**TOOL, "name": "execute_tool charge (copy)"}
    result = spans.load(_write(tmp_path, _export(TOOL, HTTP), _export(renamed)))
    assert result.rows["name"].tolist() == ["execute_tool charge", "POST"]
    assert [w.detail for w in result.warnings] == [
        "1 span(s) appear more than once (same trace and span id); kept the first of each"]


def test_documents_may_come_from_a_generator() -> None:
    docs = [("mem:1", _export(HTTP)), ("mem:2", _export(TOOL))]
    from_list = spans.parse_spans(docs, "mem")
    from_generator = spans.parse_spans((doc for doc in docs), "mem")
    assert from_list.rows.equals(from_generator.rows)


def test_a_jaeger_duration_past_2262_loses_the_end_not_the_file(tmp_path: Path) -> None:
    trace = {"traceID": TRACE, "processes": {"p1": {"serviceName": "agent", "tags": []}},
             "spans": [{"traceID": TRACE, "spanID": "00000000000000c1", "processID": "p1",
                        "operationName": "execute_tool charge", "startTime": T0 // 1000,
                        "duration": 2**62, "references": [],
                        "tags": [{"key": "gen_ai.tool.call.id", "type": "string",
                                  "value": "toolu_2"}]}]}
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps({"data": [trace]}))
    result = spans.load(path)
    validate(result.rows)
    assert result.rows["tool_call_id"].tolist() == ["toolu_2"]
    assert result.rows["end"].isna().all()
    assert [w.detail for w in result.warnings] == [
        "data[0].spans[0]: span 00000000000000c1: unreadable duration; end left empty"]


# --- the reader: one line at a time, and the exporters' lines the fast way ---------------------

def test_a_line_past_the_limit_is_skipped_without_being_held(tmp_path: Path) -> None:
    from twice.connectors.spans.read import span_documents

    path = _write(tmp_path, _export(TOOL), {"pad": "x" * 5000}, _export(HTTP))
    warnings: list = []
    docs = list(span_documents(path, warnings, max_line=4000))
    assert [locator for locator, _ in docs] == [f"{path}:1", f"{path}:3"]
    assert [(w.source, w.detail) for w in warnings] == [(f"{path}:2", "line longer than 0 MiB; "
                                                         "skipped")]


def test_past_the_document_limit_a_file_is_read_as_lines(tmp_path: Path) -> None:
    from twice.connectors.spans.read import span_documents

    # a bad first line: small files are tried as one multi-line document, big ones are not
    path = tmp_path / "traces.jsonl"
    path.write_text("{not json\n" + "".join(json.dumps(d) + "\n" for d in (_export(TOOL),)))
    small: list = []
    big: list = []
    assert list(span_documents(path, small)) == list(span_documents(path, big, max_document=10))
    assert small == big and [w.source for w in big] == [f"{path}:1"]


_settings = settings(max_examples=40, deadline=None,  # derandomised in CI: tests/conftest.py
                     suppress_health_check=[HealthCheck.too_slow,
                                            HealthCheck.function_scoped_fixture])


@_settings
@given(docs=st.lists(st.sampled_from([_export(TOOL), _export(HTTP), _export(TOOL, HTTP)]),
                     min_size=1, max_size=3).flatmap(
    lambda docs: st.tuples(*[mutate(doc) for doc in docs])))
def test_the_fast_way_gives_what_the_general_way_gives(tmp_path: Path, docs: Any) -> None:
    """Files read the fast way (`twice.connectors.spans.read` a line at a time; exporters' lines
    through msgspec structs, `twice.connectors.spans.fast`) and the general way (the whole file
    read by `twice.connectors.jsonfile.json_documents`, every line through orjson +
    `spans.otlp`): the same rows and warnings, or the same SourceError."""
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"".join(json_text(doc) + b"\n" for doc in docs))

    def general() -> LoadResult:
        read_warnings: list = []
        result = spans.parse_spans(json_documents(path, read_warnings), str(path))
        result.warnings[:0] = read_warnings
        return result

    try:
        fast = spans.load(path)
    except SourceError as exc:
        with pytest.raises(SourceError) as general_error:
            general()
        assert str(general_error.value) == str(exc)
        return
    expected = general()
    assert fast.rows.equals(expected.rows)
    assert fast.warnings == expected.warnings
