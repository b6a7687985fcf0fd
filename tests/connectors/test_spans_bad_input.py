"""Bad span files: what can be read is read, the rest becomes warnings naming file and line, and
a file that cannot be read at all is one SourceError naming it. Never another exception."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.connectors.test_spans_otlp import ns, record_worker_b
from twice.connectors import spans
from twice.connectors.base import SourceError
from twice.timeline import validate

DATA = Path(__file__).parent / "data" / "spans"


@pytest.fixture(scope="module")
def good_lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    path = tmp_path_factory.mktemp("good") / "worker_b.jsonl"
    record_worker_b(path)  # three spans, one export object a line
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    return lines


def _write(tmp_path: Path, content: bytes, name: str = "traces.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_truncated_file_keeps_the_complete_lines(tmp_path: Path, good_lines: list[bytes]) -> None:
    last = good_lines[2]
    path = _write(tmp_path, b"".join(good_lines[:2]) + last[: len(last) // 2])
    result = spans.load(path)
    validate(result.rows)
    assert len(result.rows) == 2
    assert [w.source for w in result.warnings] == [f"{path}:3"]
    assert "not valid JSON" in result.warnings[0].detail


def test_garbage_lines_among_good_ones(tmp_path: Path, good_lines: list[bytes]) -> None:
    content = (b"garbage\n" + good_lines[0] + b"42\n" + b'{"foo": 1}\n' + good_lines[1]
               + b"\xff\xfe not utf-8\n" + b'{"host": "\xc3\x28"}\n' + good_lines[2] + b"\n")
    path = _write(tmp_path, content)
    result = spans.load(path)
    validate(result.rows)
    assert len(result.rows) == 3
    lines = sorted(int(w.source.rsplit(":", 1)[1]) for w in result.warnings)
    assert lines == [1, 3, 4, 6, 7]
    assert all(w.source.startswith(f"{path}:") for w in result.warnings)


def _span(**fields: Any) -> dict[str, Any]:
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": "execute_tool charge", "kind": 1, "startTimeUnixNano": str(ns(1)),
            "endTimeUnixNano": str(ns(2)),
            "attributes": [{"key": "gen_ai.tool.call.id", "value": {"stringValue": "toolu_1"}}]}
    for key, value in fields.items():
        if value is None:
            span.pop(key, None)
        else:
            span[key] = value
    return span


def _export(*span_list: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": [
        {"key": "host.name", "value": {"stringValue": "w1"}}]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": list(span_list)}]}]}


def test_spans_missing_ids_or_times(tmp_path: Path) -> None:
    doc = _export(
        _span(),
        _span(spanId="eee19b7ec3c1b175", traceId=None),
        _span(spanId="not hex"),
        _span(spanId="0000000000000000"),
        _span(spanId="eee19b7ec3c1b176", startTimeUnixNano=None),
        _span(spanId="eee19b7ec3c1b177", startTimeUnixNano="yesterday"),
        _span(spanId="eee19b7ec3c1b178", startTimeUnixNano="99999999999999999999999"),
        _span(spanId="eee19b7ec3c1b179", endTimeUnixNano="soon"),
        _span(spanId="eee19b7ec3c1b17a", parentSpanId="xyz"),
    )
    path = _write(tmp_path, json.dumps(doc).encode(), "export.json")
    result = spans.load(path)
    validate(result.rows)
    assert result.rows["span_id"].tolist() == ["eee19b7ec3c1b174", "eee19b7ec3c1b179",
                                               "eee19b7ec3c1b17a"]
    assert result.rows["end"].isna().tolist() == [False, True, False]
    details = [w.detail for w in result.warnings]
    assert sum("no valid traceId/spanId; skipped" in d for d in details) == 3
    assert sum("no readable startTimeUnixNano; skipped" in d for d in details) == 3
    assert any("unreadable endTimeUnixNano" in d for d in details)
    assert any("unreadable parentSpanId; treated as a root span" in d for d in details)
    assert all(w.source == str(path) for w in result.warnings)


def test_wrong_attribute_value_shapes(tmp_path: Path) -> None:
    attributes = [
        {"key": "gen_ai.tool.call.id", "value": "toolu_bare"},  # not an AnyValue
        {"key": "gen_ai.tool.name", "value": {"stringValue": "charge"}},
        {"key": "gen_ai.tool.call.arguments", "value": {"intValue": "twelve"}},
        {"key": "thread_id", "value": {"stringValue": 7}},
        {"value": {"stringValue": "no key"}},
        {"key": "x", "value": {"arrayValue": {"values": [{"stringValue": "a"}, "b"]}}},
        {"key": "empty", "value": {}},
    ]
    doc = _export(_span(attributes=attributes),
                  _span(spanId="eee19b7ec3c1b175", attributes={"not": "a list"},
                        events="nope", status="weird", kind=99))
    result = spans.load(_write(tmp_path, json.dumps(doc).encode(), "export.json"))
    validate(result.rows)
    # the readable attribute still makes it a tool span; the unreadable ones are named
    row = result.rows.iloc[0]
    assert (row["kind"], row["tool_name"]) == ("tool_span", "charge")
    assert row.isna()[["tool_call_id", "args", "thread_id"]].all()
    warning = result.warnings[0].detail
    for key in ("gen_ai.tool.call.id", "gen_ai.tool.call.arguments", "thread_id", "x"):
        assert key in warning
    assert len(result.rows) == 1  # the second span has no readable attributes: no meaning


def test_jaeger_bad_spans(tmp_path: Path) -> None:
    trace = json.loads((DATA / "jaeger_traces.json").read_text())["data"][0]
    spans_ = trace["spans"]
    spans_[1]["tags"] = "not a list"
    spans_[2]["duration"] = "long"
    spans_[3]["startTime"] = None
    spans_.append({"spanID": "1"})  # trace id from the trace; no start time
    spans_.append("not a span")
    trace["processes"] = ["not", "a", "map"]
    path = _write(tmp_path, json.dumps({"data": [trace, 5]}).encode(), "jaeger.json")
    result = spans.load(path)
    validate(result.rows)
    assert result.rows["span_id"].tolist() == ["b7ad6b7169203331"]
    assert result.rows["end"].isna().all() and result.rows["worker"].isna().all()
    assert len(result.warnings) == 6


def test_parent_cycle_does_not_hang() -> None:
    a = _span(spanId="000000000000000a", parentSpanId="000000000000000b")
    b = _span(spanId="000000000000000b", parentSpanId="000000000000000a", kind=3,
              attributes=[{"key": "http.request.method", "value": {"stringValue": "GET"}}])
    result = spans.parse_spans([("mem:1", _export(a, b))], "mem")
    assert sorted(result.rows["kind"]) == ["http_span", "tool_span"]
    assert (result.rows["tool_call_id"] == "toolu_1").all()


def test_a_file_appended_twice_counts_each_span_once(
    tmp_path: Path, good_lines: list[bytes]
) -> None:
    path = _write(tmp_path, b"".join(good_lines) * 2)
    result = spans.load(path)
    assert len(result.rows) == 3
    assert [w.detail for w in result.warnings] == [
        "3 span(s) appear more than once (same trace and span id); kept the first of each"]


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "file is empty"),
    (b"  \n\n", "file is empty"),
    (b'{"resourceSpans": [{"scopeSpans": [\n  {"spans": [\n', "not JSON or JSON lines"),
    (b"\x28\xb5\x2f\xfd\x00\x58\x61\x00\x00\x10\xff\xfe", "not JSON or JSON lines"),
    (b'{"id": "evt_1", "object": "event"}\n{"id": "evt_2", "object": "event"}\n',
     "no OTLP JSON, Jaeger JSON, LangSmith runs or Langfuse observations found"),
])
def test_unreadable_files_are_one_source_error(tmp_path: Path, content: bytes, reason: str) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(SourceError) as caught:
        spans.load(path)
    assert caught.value.source == str(path) and reason in caught.value.reason


def test_missing_file_and_folder(tmp_path: Path) -> None:
    for target in (tmp_path / "nope.jsonl", tmp_path):
        with pytest.raises(SourceError, match=str(target)):
            spans.load(target)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
_OTLP_FIELDS = ["traceId", "spanId", "parentSpanId", "name", "kind", "startTimeUnixNano",
                "endTimeUnixNano", "attributes", "events", "status"]
_JAEGER_TRACE = json.loads((DATA / "jaeger_traces.json").read_text())["data"][1]
_JAEGER_FIELDS = ["traceID", "spanID", "references", "startTime", "duration", "tags", "logs",
                  "processID", "operationName"]


_changes = st.dictionaries(st.sampled_from(_OTLP_FIELDS), _json, min_size=1, max_size=4)
_jaeger_changes = st.dictionaries(st.sampled_from(_JAEGER_FIELDS), _json, min_size=1,
                                  max_size=4)
# several mangled spans per example: building a timeline has a fixed cost worth sharing
_fuzz = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_fuzz
@given(batch=st.lists(_changes, min_size=1, max_size=6))
def test_any_otlp_span_field_garbage_is_survived(batch: list[dict[str, Any]]) -> None:
    mangled = [_span(**{"spanId": f"{i + 2:016x}", **changes}) for i, changes in enumerate(batch)]
    result = spans.parse_spans([("mem:1", _export(*mangled, _span(spanId="1" * 16)))], "mem")
    validate(result.rows)
    assert "1" * 16 in set(result.rows["span_id"])


@_fuzz
@given(batch=st.lists(_jaeger_changes, min_size=1, max_size=6))
def test_any_jaeger_span_field_garbage_is_survived(batch: list[dict[str, Any]]) -> None:
    trace = copy.deepcopy(_JAEGER_TRACE)
    template = trace["spans"][1]
    for i, changes in enumerate(batch):
        trace["spans"].append({**copy.deepcopy(template), "spanID": f"{i + 2:016x}", **changes})
    result = spans.parse_spans([("mem:1", {"data": [trace]})], "mem")
    validate(result.rows)
    assert "6e0c63257de34c92" in set(result.rows["span_id"])
