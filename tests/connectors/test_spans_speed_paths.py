"""The shortcuts that make span ingest fast take the same turns as the general way.

`twice.connectors.spans.fast` reads an attribute value and a span status as msgspec structs, with
shortcuts for the usual forms (a string, a short decimal int, an array of strings, `{"code": n}`)
and the rest handed to the general reader: for every form, a file read the fast way gives the
rows and warnings the general way (orjson + `twice.connectors.spans.otlp`) gives. The timeline's int
columns have a shortcut too (through Arrow), checked against pandas' own conversion.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from twice.connectors import spans
from twice.connectors.base import LoadResult
from twice.connectors.spans import fast as spans_fast
from twice.timeline import from_columns, validate

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns
TRACE = "5b8efff798038103d269b633813fc60c"

# (AnyValue, read the fast way without the general reader?)
VALUES: list[tuple[Any, bool]] = [
    ({"stringValue": "POST"}, True),
    ({"stringValue": "  "}, True),
    ({"stringValue": '["a","b"]'}, True),
    ({"intValue": "502"}, True),
    ({"intValue": 502}, True),
    ({"intValue": "-3"}, True),
    ({"intValue": "9223372036854775807"}, True),
    ({"intValue": "99999999999999999999"}, False),  # past int64: unreadable
    ({"intValue": "12a"}, False),
    ({"boolValue": True}, True),
    ({"boolValue": "true"}, False),
    ({"doubleValue": 2.5}, True),
    ({"doubleValue": 3}, True),
    ({"doubleValue": "NaN"}, True),
    ({"bytesValue": "AAEC"}, True),
    ({"arrayValue": {"values": [{"stringValue": "req_1"}]}}, True),
    ({"arrayValue": {"values": []}}, True),
    ({"arrayValue": {}}, True),
    ({"arrayValue": {"values": [{"intValue": "4"}, {"stringValue": "x"}]}}, True),
    ({"arrayValue": {"values": [{"stringValue": "a", "intValue": "1"}]}}, False),
    ({"arrayValue": None}, False),
    ({"kvlistValue": {"values": [{"key": "a", "value": {"stringValue": "b"}}]}}, True),
    ({}, True),
    ({"stringValue": "a", "intValue": "1"}, False),  # two fields: no AnyValue
    ({"intValue": "1", "arrayValue": {"values": []}}, False),
    ({"stringValue": None}, False),
    ({"string_value": "snake"}, False),  # the proto spelling: the general reader knows it
    ("POST", False),
]
KEYS = ("http.request.method", "http.response.status_code", "http.request.resend_count",
        "http.response.header.request-id", "gen_ai.tool.call.id", "messaging.sqs.receive_count",
        "x-delivery-count", "error.type")
STATUSES: list[Any] = [None, {}, {"code": 0}, {"code": 1}, {"code": 2}, {"code": 7},
                       {"code": 2, "message": "timed out"}, {"message": "boom"},
                       {"code": "STATUS_CODE_ERROR"}, {"code": 2, "message": None}, "error"]


def _span(attributes: list[dict[str, Any]], status: Any = None) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": TRACE, "spanId": "00000000000000b1", "name": "POST", "kind": 3,
        "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 700),
        "attributes": [{"key": "http.request.method", "value": {"stringValue": "POST"}},
                       *attributes]}
    if status is not None:
        span["status"] = status
    return span


def _line(span: dict[str, Any], resource: list[dict[str, Any]] | None = None) -> bytes:
    doc = {"resourceSpans": [{
        "resource": {"attributes": resource or [
            {"key": "host.name", "value": {"stringValue": "worker-a"}}]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": [span]}]}]}
    return json.dumps(doc, separators=(",", ":")).encode()


def _both_ways(tmp_path: Path, line: bytes) -> tuple[LoadResult, LoadResult]:
    path = tmp_path / "traces.jsonl"
    path.write_bytes(line + b"\n" + line.replace(b"00000000000000b1", b"00000000000000b2")
                     + b"\n")
    fast = spans.load(path)
    documents = [(f"{path}:{n}", json.loads(text))
                 for n, text in enumerate(path.read_bytes().splitlines(), start=1)]
    general = spans.parse_spans(documents, str(path))
    return fast, general


def _took_the_shortcut(line: bytes) -> bool:
    doc = spans_fast.decode(line)
    return doc is not None and spans_fast.records(doc, "t") is not None


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize(("value", "fast"), VALUES, ids=[json.dumps(v) for v, _ in VALUES])
def test_every_attribute_value_form_reads_as_the_general_way_reads_it(
    tmp_path: Path, key: str, value: Any, fast: bool
) -> None:
    line = _line(_span([{"key": key, "value": value}]))
    assert _took_the_shortcut(line) is fast
    got, expected = _both_ways(tmp_path, line)
    validate(got.rows)
    pd.testing.assert_frame_equal(got.rows, expected.rows, check_exact=True)
    assert got.warnings == expected.warnings
    # and as a resource attribute (where the worker comes from)
    line = _line(_span([]), resource=[{"key": "host.name", "value": value}])
    assert _took_the_shortcut(line) is fast
    got, expected = _both_ways(tmp_path, line)
    pd.testing.assert_frame_equal(got.rows, expected.rows, check_exact=True)
    assert got.warnings == expected.warnings


@pytest.mark.parametrize("status", STATUSES, ids=[json.dumps(s) for s in STATUSES])
def test_every_status_form_reads_as_the_general_way_reads_it(tmp_path: Path, status: Any
                                                             ) -> None:
    got, expected = _both_ways(tmp_path, _line(_span([], status)))
    assert len(got.rows) == 2
    pd.testing.assert_frame_equal(got.rows, expected.rows, check_exact=True)
    assert got.warnings == expected.warnings


def test_a_value_beside_a_string_sends_the_line_the_general_way(tmp_path: Path) -> None:
    line = _line(_span([{"key": "http.response.status_code",
                         "value": {"stringValue": "200", "intValue": "200"}}]))
    got, _ = _both_ways(tmp_path, line)
    assert got.rows["status"].isna().all()  # the value is no AnyValue: ignored, with a warning
    assert [w.detail for w in got.warnings][:1] == [
        "resourceSpans[0].scopeSpans[0].spans[0]: span 00000000000000b1: unreadable attribute "
        "values (http.response.status_code); ignored"]


def test_a_delivery_count_past_int64_is_no_count_not_a_crash(tmp_path: Path) -> None:
    # RabbitMQ's x-delivery-count counts earlier deliveries: int64's max of them is no count
    line = _line(_span([{"key": "x-delivery-count",
                         "value": {"intValue": "9223372036854775807"}},
                        {"key": "messaging.sqs.receive_count", "value": {"intValue": "2"}}]))
    got, expected = _both_ways(tmp_path, line)
    validate(got.rows)
    assert got.rows["kind"].tolist() == ["queue_receive", "queue_receive"]
    assert got.rows["delivery_count"].tolist() == [2, 2]
    pd.testing.assert_frame_equal(got.rows, expected.rows, check_exact=True)


@pytest.mark.parametrize("values", [
    [200, None, 502],
    [None, None, None],
    [-(2**63), 2**63 - 1, 0],
    [np.int64(7), None, 1],  # not Python ints: pandas converts them, as before
    [1.0, None, 2.0],
])
def test_int_columns_take_the_arrow_shortcut_or_pandas_way_alike(values: list[Any]) -> None:
    at = [T0, T0 + 1, T0 + 2]
    frame = from_columns({"at": at, "status": values, "end": [None, T0 + 5, None],
                          "source": ["spans"] * 3, "kind": ["http_span"] * 3}, 3)
    validate(frame)
    expected = pd.Series(pd.array(list(values), dtype=pd.Int64Dtype()), name="status")
    pd.testing.assert_series_equal(frame["status"], expected, check_exact=True)
    assert frame["status"].array._data.flags.writeable  # later in-place edits must work
    ends = pd.to_datetime(pd.Series(pd.array([None, T0 + 5, None], dtype="Int64")), unit="ns",
                          utc=True)
    assert frame["end"].tolist() == ends.tolist()
