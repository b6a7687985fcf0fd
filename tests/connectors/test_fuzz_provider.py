"""Fuzzing the provider connectors (Stripe events, `stripe logs tail` captures, request logs).

Every case must end as rows + warnings (each naming file/line and reason; a record that became no
row is named by one) or as one SourceError naming the source. See `fuzz_summary.check`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.connectors.fuzz_inputs import (
    json_text,
    json_values,
    mutate,
    mutated_records,
    text,
    truncations,
)
from tests.connectors.fuzz_summary import check, fuzz_settings
from twice.connectors._parsing import DETAIL_MAX
from twice.connectors.base import LoadResult
from twice.connectors.provider import request_log, stripe_events, stripe_logs
from twice.engine import analyze

DATA = Path(__file__).parent / "data" / "provider"
EVENTS: list[Any] = orjson.loads((DATA / "events_page.json").read_bytes())["data"]
LOG_LINES = [orjson.loads(line) for line in (DATA / "logs_tail.jsonl").read_bytes().splitlines()]
ACME = [orjson.loads(line) for line in (DATA / "acme_requests.jsonl").read_bytes().splitlines()]
ACME_MAPPING = {"request_id": "id", "created": "ts", "method": "verb", "path": "endpoint",
                "idempotency_key": "idem", "status": "http_status", "body": "payload",
                "replayed": "cached"}
CSV_ROWS = list(csv.reader(io.StringIO((DATA / "request_log.csv").read_text())))
TEN_MB = "\u00e9" * 5_000_000  # 10 MB of UTF-8


def _accounted(result: LoadResult | Exception, locators: list[str]) -> None:
    """Every record that did not become a row is named by a warning (or a duplicates note)."""
    if not isinstance(result, LoadResult):
        return
    kept = set(result.rows["origin"])
    named = {w.source for w in result.warnings}
    duplicates = any("duplicate" in w.detail for w in result.warnings)
    for where in locators:
        assert where in kept or where in named or duplicates, (where, result.warnings)


def _write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _lines(records: list[Any]) -> bytes:
    return b"".join(json_text(r) + b"\n" for r in records)


# --- stripe_events ------------------------------------------------------------------------------


@fuzz_settings(40)
@given(events=mutated_records(EVENTS), has_more=json_values)
def test_stripe_events_mutated_records(events: list[Any], has_more: Any) -> None:
    doc = {"object": "list", "data": events, "has_more": has_more}
    result = check("stripe_events", lambda: stripe_events.parse_events(doc, "mem"), source="mem")
    _accounted(result, [f"mem:data[{i}]" for i in range(len(events))])


@fuzz_settings(25)
@given(events=mutated_records(EVENTS), garbage=st.lists(st.binary(max_size=40), max_size=3))
def test_stripe_events_file_of_lines(tmp_path: Path, events: list[Any],
                                     garbage: list[bytes]) -> None:
    path = _write(tmp_path, "events.jsonl", _lines(events) + b"\n".join(garbage))
    check("stripe_events", lambda: stripe_events.load(path), source=str(path))


@fuzz_settings(25)
@given(doc=json_values)
def test_stripe_events_any_json_document(doc: Any) -> None:
    check("stripe_events", lambda: stripe_events.parse_events(doc, "mem"), source="mem")


# --- stripe_logs --------------------------------------------------------------------------------


@fuzz_settings(40)
@given(lines=mutated_records(LOG_LINES))
def test_stripe_logs_mutated_lines(lines: list[Any]) -> None:
    raw = _lines(lines)
    result = check("stripe_logs", lambda: stripe_logs.parse_capture(raw, "mem"), source="mem")
    if isinstance(result, LoadResult) and not raw.lstrip().startswith(b"["):
        _accounted(result, [f"mem:{n}" for n in range(1, len(lines) + 1)])


@fuzz_settings(25)
@given(raw=st.binary(max_size=400) | text.map(str.encode))
def test_stripe_logs_any_bytes(tmp_path: Path, raw: bytes) -> None:
    path = _write(tmp_path, "logs.jsonl", raw)
    check("stripe_logs", lambda: stripe_logs.load(path), source=str(path))


# --- request_log --------------------------------------------------------------------------------


@fuzz_settings(40)
@given(records=mutated_records(ACME))
def test_request_log_json_mutated_records(records: list[Any]) -> None:
    docs = [(f"mem:{n}", r) for n, r in enumerate(records, start=1)]
    result = check("request_log",
                   lambda: request_log.parse_json_records(docs, "mem", ACME_MAPPING),
                   source="mem")
    _accounted(result, [f"mem:{n}" for n, r in enumerate(records, start=1)
                        if isinstance(r, dict)])


@fuzz_settings(25)
@given(records=mutated_records(ACME))
def test_request_log_jsonl_file(tmp_path: Path, records: list[Any]) -> None:
    path = _write(tmp_path, "requests.jsonl", _lines(records))
    check("request_log", lambda: request_log.load(path, ACME_MAPPING), source=str(path))


_cells = st.sampled_from(["", "\"", "a,b", "x\ny", "\x00", "\udcff", ";", "\t", "\r",
                          "99999999999999999999", "1e30", "-1", "nan"]) | text


@st.composite
def _csv_text(draw: st.DrawFn) -> str:
    rows = [list(r) for r in CSV_ROWS]
    for _ in range(draw(st.integers(1, 5))):
        r = draw(st.integers(0, len(rows) - 1))
        action = draw(st.sampled_from(["cell", "cell", "drop", "add", "dup"]))
        if action == "cell" and rows[r]:
            rows[r][draw(st.integers(0, len(rows[r]) - 1))] = draw(_cells)
        elif action == "drop" and rows[r]:
            rows[r].pop(draw(st.integers(0, len(rows[r]) - 1)))
        elif action == "add":
            rows[r].append(draw(_cells))
        else:
            rows.insert(r, list(rows[r]))
    if draw(st.booleans()):  # quoted properly
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        return buf.getvalue()
    return "\n".join(",".join(row) for row in rows)  # as a careless script writes it


@fuzz_settings(40)
@given(content=_csv_text())
def test_request_log_csv_mutated(content: str) -> None:
    check("request_log", lambda: request_log.parse_csv(content, "mem"), source="mem")


@fuzz_settings(25)
@given(raw=st.binary(max_size=400))
def test_request_log_any_bytes(tmp_path: Path, raw: bytes) -> None:
    path = _write(tmp_path, "requests.csv", raw)
    check("request_log", lambda: request_log.load(path), source=str(path))


@fuzz_settings(25)
@given(record=mutate({"request_id": "req_1", "created": 1714557600, "status": 200,
                      "amount": 2000, "body": {"amount": 2000, "metadata": {"thread_id": "t"}}}))
def test_request_log_values_out_of_range(record: Any) -> None:
    check("request_log", lambda: request_log.parse_json_records([("mem:1", record)], "mem"),
          source="mem")


# --- every byte offset, 10 MB fields ---------------------------------------------------------


def _small(name: str) -> tuple[Any, bytes]:
    if name == "stripe_events":
        return stripe_events, _lines([min(EVENTS, key=lambda e: len(json_text(e)))])
    if name == "stripe_logs":
        return stripe_logs, _lines(LOG_LINES[:2])
    return request_log, "\n".join(",".join(r) for r in CSV_ROWS[:2]).encode()


@pytest.mark.parametrize("name", ["stripe_events", "stripe_logs", "request_log"])
def test_truncated_at_every_byte(tmp_path: Path, name: str) -> None:
    module, raw = _small(name)
    path = tmp_path / "cut"
    analysed: set[int] = set()
    for cut in truncations(raw):
        path.write_bytes(cut)
        result = check(name, lambda: module.load(path), source=str(path), engine=False)
        if isinstance(result, LoadResult) and len(result.rows) not in analysed:
            analysed.add(len(result.rows))  # the engine sees each prefix of rows once
            analyze(result.rows, result.warnings)


def test_ten_megabyte_fields(tmp_path: Path) -> None:
    event = orjson.loads(orjson.dumps(EVENTS[0]))
    event["data"]["object"]["description"] = TEN_MB
    event["data"]["object"]["metadata"] = {"thread_id": TEN_MB}
    path = _write(tmp_path, "events.json", orjson.dumps(event))
    result = check("stripe_events", lambda: stripe_events.load(path), source=str(path))
    assert isinstance(result, LoadResult) and len(result.rows) == 1
    assert len(result.rows["detail"][0]) <= DETAIL_MAX

    line = {**LOG_LINES[0], "url": "/v1/" + TEN_MB, "error": {"message": TEN_MB}}
    path = _write(tmp_path, "logs.jsonl", orjson.dumps(line) + b"\n")
    result = check("stripe_logs", lambda: stripe_logs.load(path), source=str(path))
    assert isinstance(result, LoadResult) and len(result.rows) == 1

    rows = [list(r) for r in CSV_ROWS]
    rows[1][6] = "description=" + TEN_MB
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    path = _write(tmp_path, "requests.csv", buf.getvalue().encode())
    result = check("request_log", lambda: request_log.load(path), source=str(path))
    # Python's csv module refuses fields over 128 KiB: that record is skipped, and named
    assert isinstance(result, LoadResult) and len(result.rows) == len(CSV_ROWS) - 2
    assert [w.source for w in result.warnings if "field larger" in w.detail] == [f"{path}:2"]
