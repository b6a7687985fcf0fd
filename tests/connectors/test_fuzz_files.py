"""Fuzzing the SQS connector (logged receives) and twice's own timeline files (Parquet)."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.connectors.fuzz_inputs import json_text, json_values, mutated_records, truncations
from tests.connectors.fuzz_summary import check, fuzz_settings
from twice.connectors.base import LoadResult
from twice.connectors.provider import stripe_events, timeline_file
from twice.connectors.queue import sqs
from twice.engine import analyze
from twice.timeline import COLUMN_NAMES

ROOT = Path(__file__).parents[2]
SQS_LINES = [orjson.loads(line) for line in
             (ROOT / "sample_data" / "redelivery" / "sqs.jsonl").read_bytes().splitlines()[:3]]
_message = SQS_LINES[0]["message"]["Messages"][0]
LAMBDA_EVENT = {"Records": [{
    "messageId": _message["MessageId"], "receiptHandle": "AQEB", "body": _message["Body"],
    "attributes": _message["Attributes"], "messageAttributes": {
        "traceparent": {"stringValue": "00-5b8efff798038103d269b633813fc60c-eee19b7ec3c1b174-01",
                        "dataType": "String"}},
    "eventSource": "aws:sqs",
    "eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:billing-agent-runs"}]}
BARE = copy.deepcopy(_message)  # one Message dict, as a consumer may log it


# --- sqs ----------------------------------------------------------------------------------------


@fuzz_settings(40)
@given(records=mutated_records([*SQS_LINES, LAMBDA_EVENT, BARE]))
def test_sqs_mutated_records(records: list[Any]) -> None:
    docs = [(f"mem:{n}", r) for n, r in enumerate(records, start=1)]
    result = check("sqs", lambda: sqs.parse_sqs(docs, "mem"), source="mem")
    if isinstance(result, LoadResult):
        seen = [*result.rows["origin"], *(w.source for w in result.warnings)]
        for where, record in docs:  # a record without rows is named, unless it holds none
            if isinstance(record, dict) and isinstance(record.get("message"), dict):
                record = record["message"]  # a consumer's wrapper
            empty = record == [] or isinstance(record, dict) and (
                record.get("Messages") == [] or record.get("Records") == []
                or "Messages" not in record and "ResponseMetadata" in record)
            assert empty or any(s == where or s.startswith((f"{where} ", f"{where}["))
                                for s in seen), where


@fuzz_settings(30)
@given(records=mutated_records(SQS_LINES), junk=st.binary(max_size=60))
def test_sqs_file(tmp_path: Path, records: list[Any], junk: bytes) -> None:
    path = tmp_path / "sqs.jsonl"
    path.write_bytes(b"".join(json_text(r) + b"\n" for r in records) + junk)
    check("sqs", lambda: sqs.load(path), source=str(path))


@fuzz_settings(30)
@given(doc=json_values)
def test_sqs_any_json(doc: Any) -> None:
    check("sqs", lambda: sqs.parse_sqs([("mem:1", doc)], "mem"), source="mem")


def test_sqs_truncated_at_every_byte(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    analysed: set[int] = set()
    for cut in truncations(json_text(SQS_LINES[0]) + b"\n"):
        path.write_bytes(cut)
        result = check("sqs", lambda: sqs.load(path), source=str(path), engine=False)
        if isinstance(result, LoadResult) and len(result.rows) not in analysed:
            analysed.add(len(result.rows))
            analyze(result.rows, result.warnings)


# --- timeline (Parquet) -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_timeline() -> pd.DataFrame:
    return stripe_events.load(ROOT / "sample_data" / "sdk_retry" / "events.json").rows


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


_arrow_values = st.sampled_from([
    pa.array([1] * 3, pa.int64()), pa.array([2**63 - 1] * 3, pa.int64()),
    pa.array([1.5, float("nan"), float("inf")]), pa.array(["x", "", None]),
    pa.array([b"\xff", b"", None]), pa.array([True, False, None]),
    pa.array([[1], [], None], pa.list_(pa.int64())), pa.array([None, None, None], pa.null()),
    pa.array([{"a": 1}, None, {"a": 2}]),
    pa.array([-(2**63) + 1, 0, 2**63 - 1], pa.timestamp("ns")),
    pa.array([0, 2**62, None], pa.timestamp("s")),
    pa.array([0, 1, 2], pa.timestamp("us", tz="Asia/Tokyo")),
    pa.array(["2024-01-01", "9999-12-31T00:00:00", "not a time"]),
    pa.array(["provider_event", "nonsense", None]),
    pa.array([1, 2, 3], pa.decimal128(38, 0)),
])


@fuzz_settings(40)
@given(changes=st.lists(st.tuples(st.sampled_from([*COLUMN_NAMES, "extra"]),
                                  st.none() | _arrow_values), min_size=1, max_size=4))
def test_timeline_wrong_columns_and_types(good_timeline: pd.DataFrame,
                                          changes: list[tuple[str, pa.Array | None]]) -> None:
    table = pa.Table.from_pandas(good_timeline.head(3), preserve_index=False)
    for column, values in changes:
        names = table.column_names
        if values is None:  # the column dropped
            if column in names:
                table = table.drop_columns([column])
        elif column in names:
            table = table.set_column(names.index(column), column, values)
        else:
            table = table.append_column(column, values)
    try:
        raw = _parquet(table)
    except (pa.ArrowException, TypeError, ValueError):
        return  # a table Parquet cannot hold: nothing to read
    check("timeline", lambda: timeline_file.parse_timeline(raw, "mem.parquet"),
          source="mem.parquet")


def test_timeline_truncated_and_flipped(tmp_path: Path, good_timeline: pd.DataFrame) -> None:
    raw = timeline_file.to_bytes(good_timeline)
    path = tmp_path / "t.parquet"
    cuts = list(truncations(raw))
    for cut in cuts[::97] + cuts[-64:]:  # all over, and every byte of the footer's end
        path.write_bytes(cut)
        check("timeline", lambda: timeline_file.load(path), source=str(path), engine=False)
    for offset in range(0, len(raw), 61):
        damaged = bytearray(raw)
        damaged[offset] ^= 0x5A
        path.write_bytes(bytes(damaged))
        check("timeline", lambda: timeline_file.load(path), source=str(path), engine=False)


@fuzz_settings(30)
@given(raw=st.binary(max_size=300))
def test_timeline_magic_then_junk(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "j.parquet"
    path.write_bytes(b"PAR1" + raw + b"PAR1")
    check("timeline", lambda: timeline_file.load(path), source=str(path))
