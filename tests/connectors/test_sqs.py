"""The SQS connector on receives recorded from moto's SQS (in process, through boto3): a message
received, left to become visible again after its visibility timeout, and received again."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import boto3
import pandas as pd
import pytest
from moto import mock_aws

from twice.connectors.base import SourceError
from twice.connectors.queue import sqs
from twice.timeline import validate

XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
ALL = {"MessageSystemAttributeNames": ["All"], "MessageAttributeNames": ["All"],
       "MaxNumberOfMessages": 10}


def _by_body(response: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {("A" if "thread-7" in m["Body"] else "B"): m for m in response["Messages"]}


def record_receives(path: Path) -> dict[str, Any]:
    """Write what a consumer logs as JSON lines; return the raw responses for the asserts."""
    with mock_aws():
        client = boto3.client("sqs", region_name="eu-west-1", aws_access_key_id="testing",
                              aws_secret_access_key="testing")
        runs = client.create_queue(QueueName="agent-runs")["QueueUrl"]
        idle = client.create_queue(QueueName="idle")["QueueUrl"]
        client.send_message(
            QueueUrl=runs, MessageBody=json.dumps({"thread_id": "thread-7", "input": "charge"}),
            MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String",
                                                        "StringValue": XRAY}})
        client.send_message(
            QueueUrl=runs,
            MessageBody=json.dumps({"config": {"configurable": {"thread_id": "thread-9"}}}))
        first = client.receive_message(QueueUrl=runs, VisibilityTimeout=1, **ALL)
        time.sleep(1.1)  # the visibility timeout runs out: SQS hands the messages out again
        second = client.receive_message(QueueUrl=runs, VisibilityTimeout=0, **ALL)
        received_ms = int(time.time() * 1000)
        third = client.receive_message(QueueUrl=runs, VisibilityTimeout=0, **ALL)
        fourth = client.receive_message(QueueUrl=runs, VisibilityTimeout=0, **ALL)
        empty = client.receive_message(QueueUrl=idle, **ALL)
    assert len(first["Messages"]) == len(fourth["Messages"]) == 2
    received_iso = datetime.fromtimestamp(received_ms / 1000, UTC).isoformat()
    lines = [
        first,  # whole response, receive count 1
        {"received_at": received_iso, "worker": "worker-b", "message": _by_body(second)["A"]},
        {"received_at": received_ms, "message": _by_body(second)["B"]},
        third,  # whole response, receive count 3: its Date header is the receive time
        _by_body(fourth)["A"],  # bare messages with count 4: no receive time at all
        _by_body(fourth)["B"],
        empty,  # an empty receive: no Messages key
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return {"first": first, "third": third, "received_ms": received_ms}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("sqs") / "receives.jsonl"
    return path, record_receives(path)


@pytest.fixture(scope="module")
def rows(recorded: tuple[Path, dict[str, Any]]) -> pd.DataFrame:
    result = sqs.load(recorded[0])
    validate(result.rows)
    assert [w.detail for w in result.warnings] == [
        "2 receive(s) carry no receive time; their `at` is a lower bound (log received_at with "
        "each message, or the whole response)"]
    return result.rows


def _thread(rows: pd.DataFrame, thread_id: str) -> pd.DataFrame:
    return rows[rows["thread_id"] == thread_id].sort_values("delivery_count")


def test_every_receive_is_a_row_with_its_count(rows: pd.DataFrame) -> None:
    assert (rows["kind"] == "queue_receive").all() and (rows["source"] == "sqs").all()
    for thread_id in ("thread-7", "thread-9"):
        receives = _thread(rows, thread_id)
        assert receives["delivery_count"].tolist() == [1, 2, 3, 4]
        assert receives["message_id"].nunique() == 1
    assert len(rows) == 8


def test_receive_times(rows: pd.DataFrame, recorded: tuple[Path, dict[str, Any]]) -> None:
    raw = recorded[1]
    a = _thread(rows, "thread-7").set_index("delivery_count")
    at, detail = a["at"].to_dict(), a["detail"].fillna("").to_dict()
    first_receive = int(_by_body(raw["first"])["A"]["Attributes"]
                        ["ApproximateFirstReceiveTimestamp"])
    assert at[1] == pd.Timestamp(first_receive, unit="ms", tz="UTC")
    assert detail[1] == ""
    assert at[2] == pd.Timestamp(raw["received_ms"], unit="ms", tz="UTC")
    assert a.loc[2, "worker"] == "worker-b"
    date = parsedate_to_datetime(raw["third"]["ResponseMetadata"]["HTTPHeaders"]["date"])
    assert at[3] == pd.Timestamp(date)
    assert "Date header" in detail[3]
    # nothing says when receive 4 happened: the first receive is shown, marked a lower bound
    assert at[4] == at[1]
    assert "lower bound" in detail[4]
    b = _thread(rows, "thread-9").set_index("delivery_count")
    assert b.loc[2, "at"] == pd.Timestamp(raw["received_ms"], unit="ms", tz="UTC")  # epoch ms


def test_trace_id_from_the_xray_header(rows: pd.DataFrame) -> None:
    assert set(_thread(rows, "thread-7")["trace_id"]) == {"5759e988bd862e3fe1be46a994272793"}
    assert _thread(rows, "thread-9")["trace_id"].isna().all()


def test_sns_fan_out_and_message_attribute_thread_ids(tmp_path: Path) -> None:
    with mock_aws():
        keys = {"region_name": "eu-west-1", "aws_access_key_id": "testing",
                "aws_secret_access_key": "testing"}
        sns, client = boto3.client("sns", **keys), boto3.client("sqs", **keys)
        queue = client.create_queue(QueueName="fan-out")["QueueUrl"]
        arn = client.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])[
            "Attributes"]["QueueArn"]
        topic = sns.create_topic(Name="runs")["TopicArn"]
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
        sns.publish(TopicArn=topic, Message=json.dumps({"threadId": "thread-s"}))
        client.send_message(QueueUrl=queue, MessageBody="resume please", MessageAttributes={
            "thread_id": {"DataType": "String", "StringValue": "thread-m"}})
        response = client.receive_message(QueueUrl=queue, **ALL)
    path = tmp_path / "fan_out.json"
    path.write_text(json.dumps(response))  # one JSON document, not lines
    rows = sqs.load(path).rows
    assert sorted(rows["thread_id"]) == ["thread-m", "thread-s"]
    assert (rows["delivery_count"] == 1).all() and rows["detail"].isna().all()


def test_lambda_sqs_event(tmp_path: Path) -> None:
    event = {"Records": [{
        "messageId": "059f36b4-87a3-44ab-83d2-661975830a7d",
        "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a",
        "body": json.dumps({"configurable": {"thread_id": "thread-l"}}),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1767229200000",
                       "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                       "ApproximateFirstReceiveTimestamp": "1767229200250"},
        "messageAttributes": {}, "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
        "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:runs",
        "awsRegion": "us-east-2"}]}
    path = tmp_path / "lambda.jsonl"
    path.write_text(json.dumps(event) + "\n")
    row = sqs.load(path).rows.iloc[0]
    assert (row["thread_id"], row["delivery_count"], row["name"]) == ("thread-l", 1, "runs")
    assert row["at"] == pd.Timestamp("2026-01-01T01:00:00.250Z")
    assert sqs.sniff(path, path.read_bytes())


def test_bad_lines_are_warnings(tmp_path: Path, recorded: tuple[Path, dict[str, Any]]) -> None:
    message = _by_body(recorded[1]["first"])["A"]
    no_id = {k: v for k, v in message.items() if k != "MessageId"}
    no_times = {**message, "Attributes": {}}
    lines = [
        b"garbage",
        json.dumps({"received_at": "last tuesday", "message": message}).encode(),
        json.dumps(no_id).encode(),
        json.dumps(no_times).encode(),
        json.dumps({"Messages": ["not a message", message]}).encode(),
        b'{"Body": "\xff\xfe"}',
        json.dumps({"hello": "world"}).encode(),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = sqs.load(path)
    validate(result.rows)
    assert len(result.rows) == 2  # line 2 (from SQS's own timestamps) and line 5's message
    by_line = {w.source.removeprefix(str(path)): w.detail for w in result.warnings}
    assert set(by_line) == {":1", ":2", ":3", ":4", ":5 Messages[0]", ":6", ":7"}
    assert "used SQS's own timestamps" in by_line[":2"]
    assert "no MessageId" in by_line[":3"]
    assert "no receive time" in by_line[":4"]


@pytest.mark.parametrize("count", ["9223372036854775807", "4294967296", "0", "-1"])
def test_a_receive_count_that_is_no_count_is_named_and_left_empty(count: str) -> None:
    message = {"MessageId": "m-1", "Body": "{}", "Attributes": {
        "ApproximateReceiveCount": count, "SentTimestamp": "1767229200000"}}
    bare = {"MessageId": "m-2", "Body": "{}", "Attributes": {"SentTimestamp": "1767229200000"}}
    result = sqs.parse_sqs([("mem:1", message), ("mem:2", bare)], "mem")
    validate(result.rows)
    assert result.rows["delivery_count"].isna().all() and len(result.rows) == 2
    (named,) = [w for w in result.warnings if w.source == "mem:1"]
    assert count in named.detail and "left empty" in named.detail


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "file is empty"),
    (b"\x00\x01\x02\xff", "not JSON or JSON lines"),
    (b'{"resourceSpans": []}\n{"id": "evt_1"}\n', "no SQS messages found"),
])
def test_unreadable_files_are_one_source_error(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "receives.jsonl"
    path.write_bytes(content)
    with pytest.raises(SourceError) as caught:
        sqs.load(path)
    assert caught.value.source == str(path) and reason in caught.value.reason


def test_sniff(recorded: tuple[Path, dict[str, Any]]) -> None:
    path = recorded[0]
    assert sqs.sniff(path, path.read_bytes()[:65536])
    assert not sqs.sniff(path, b'{"resourceSpans": []}')
    assert not sqs.sniff(path, b'{"id": "evt_1", "object": "event"}')
