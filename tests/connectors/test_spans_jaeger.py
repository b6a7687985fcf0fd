"""The spans connector on Jaeger JSON, and the same trace written as OTLP JSON by another writer
(base64 ids, enum names, int times): one interpretation, the same rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from twice.connectors import spans
from twice.timeline import canonical_json, fingerprint, validate

DATA = Path(__file__).parent / "data" / "spans"
JAEGER = DATA / "jaeger_traces.json"
OTLP_SAME_TRACE = DATA / "otlp_base64_ids.json"  # trace 4bf92f... of JAEGER, as OTLP JSON
TRACE_1 = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_2 = "0000000000000000c0ffee0ddba11a57"  # Jaeger printed it as 64-bit: c0ffee0ddba11a57


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    result = spans.load(JAEGER)
    assert result.warnings == []
    validate(result.rows)
    return result.rows


def test_jaeger_trace_download(rows: pd.DataFrame) -> None:
    assert set(rows["trace_id"]) == {TRACE_1, TRACE_2}
    assert sorted(rows["kind"].value_counts().items()) == [
        ("http_span", 2), ("queue_receive", 1), ("tool_span", 2)]
    tool = rows[(rows["kind"] == "tool_span") & (rows["trace_id"] == TRACE_1)].iloc[0]
    assert (tool["tool_call_id"], tool["tool_name"], tool["thread_id"]) == (
        "toolu_j1", "create_charge", "thread-j")
    args = {"customer": "cus_j", "amount": 2500, "currency": "gbp"}
    assert (tool["args"], tool["args_fingerprint"]) == (canonical_json(args), fingerprint(args))
    assert (tool["subject"], tool["amount"], tool["currency"]) == ("cus_j", 2500, "gbp")
    assert tool["at"] == pd.Timestamp("2026-01-01T01:00:01Z")
    assert tool["end"] == pd.Timestamp("2026-01-01T01:00:04.5Z")
    assert (tool["worker"], tool["outcome"]) == ("worker-c", "ok")


def test_jaeger_http_attempts(rows: pd.DataFrame) -> None:
    http = rows[rows["kind"] == "http_span"].sort_values("at")
    assert http["parent_span_id"].tolist() == ["53995c3f42cd8ad8"] * 2
    assert http["resend_count"].tolist() == [0, 1]
    assert http["status"].tolist() == [500, 200]
    assert http["outcome"].tolist() == ["error", "ok"]
    # OTel's Jaeger export turns the captured header array into JSON text
    assert http["request_id"].tolist() == ["req_j1", "req_j2"]
    assert http["idempotency_key"].tolist() == ["key-j", "key-j"]
    assert http["path"].tolist() == ["/v1/payment_intents"] * 2
    assert http["tool_call_id"].tolist() == ["toolu_j1"] * 2


def test_jaeger_redelivery_with_a_timed_out_tool(rows: pd.DataFrame) -> None:
    receive = rows[rows["kind"] == "queue_receive"].iloc[0]
    assert (receive["delivery_count"], receive["message_id"]) == (3, "11223344556677")
    assert (receive["thread_id"], receive["worker"]) == ("thread-j", "worker-d")
    retried = rows[(rows["kind"] == "tool_span") & (rows["trace_id"] == TRACE_2)].iloc[0]
    assert retried["outcome"] == "timeout"
    assert retried["detail"] == "TimeoutError: deadline of 30s exceeded"
    assert (retried["thread_id"], retried["tool_call_id"]) == ("thread-j", "toolu_j1")


def test_bare_list_of_traces(tmp_path: Path, rows: pd.DataFrame) -> None:
    bare = tmp_path / "traces.json"
    bare.write_text(json.dumps(json.loads(JAEGER.read_text())["data"]))
    again = spans.load(bare).rows
    pd.testing.assert_frame_equal(again.drop(columns="origin"), rows.drop(columns="origin"))


def test_same_trace_as_otlp_gives_the_same_rows(rows: pd.DataFrame) -> None:
    result = spans.load(OTLP_SAME_TRACE)
    assert result.warnings == []
    otlp = result.rows.sort_values("span_id", ignore_index=True).drop(columns="origin")
    jaeger = rows[rows["trace_id"] == TRACE_1].sort_values("span_id", ignore_index=True)
    pd.testing.assert_frame_equal(otlp, jaeger.drop(columns="origin"))


@pytest.mark.parametrize(("path", "expected"), [(JAEGER, True), (OTLP_SAME_TRACE, True)])
def test_sniff_fixtures(path: Path, expected: bool) -> None:
    assert spans.sniff(path, path.read_bytes()[:65536]) is expected


@pytest.mark.parametrize("head", [
    b'{"id": "evt_1", "object": "event", "type": "charge.succeeded", "data": {"object": {}}}',
    b'{"MessageId": "m", "ReceiptHandle": "r", "Body": "{}"}',
    b'{"thread_id": "t", "checkpoint_id": "1ef"}',
    b"created_at,method,url\n",
])
def test_sniff_rejects_other_sources(head: bytes) -> None:
    assert spans.sniff(Path("x.json"), head) is False
