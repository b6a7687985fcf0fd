"""`stripe logs tail --format JSON` captures -> provider_request rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from twice.connectors.base import SourceError
from twice.connectors.provider import stripe_logs
from twice.timeline import validate

DATA = Path(__file__).parent / "data" / "provider"
CAPTURE = DATA / "logs_tail.jsonl"
NO_ERROR = {"type": "", "charge": "", "code": "", "decline_code": "", "message": "", "param": ""}


def log_line(**fields: object) -> str:
    base: dict[str, object] = {
        "created_at": 1714557600, "livemode": False, "method": "POST", "request_id": "req_1",
        "status": 200, "url": "/v1/payment_intents", "error": NO_ERROR}
    base.update(fields)
    return json.dumps(base)


def test_capture_rows() -> None:
    result = stripe_logs.load(CAPTURE)
    assert result.warnings == []
    rows = result.rows
    validate(rows)
    assert len(rows) == 8
    assert set(rows["kind"]) == {"provider_request"} and set(rows["source"]) == {"stripe_logs"}
    assert rows["at"].iloc[1] == pd.Timestamp("2024-05-01T10:00:00Z")
    assert list(rows["status"]) == [200, 200, 200, 200, 200, 402, 400, 500]
    assert list(rows["outcome"]) == ["ok"] * 5 + ["error"] * 3
    assert rows["origin"].iloc[0] == f"{CAPTURE}:1"
    # this format has no idempotency key: unknown stays null, nothing is invented
    assert rows["idempotency_key"].isna().all()
    retried = rows[rows["path"] == "/v1/payment_intents"]
    assert {"req_Xa8fT2pL0vKq3N", "req_Lq4Wm9cN2hZt7R"} <= set(retried["request_id"])


def test_query_string_dropped_from_path() -> None:
    rows = stripe_logs.load(CAPTURE).rows
    get = rows[rows["method"] == "GET"].iloc[0]
    assert get["path"] == "/v1/payment_intents"
    assert not rows["path"].str.contains("cus_|limit", regex=True).any()


def test_error_fields_become_detail_and_charge() -> None:
    rows = stripe_logs.load(CAPTURE).rows
    declined = rows[rows["status"] == 402].iloc[0]
    assert declined["detail"] == "card_error/card_declined/generic_decline: Your card was declined."
    assert declined["object_id"] == "ch_3PBkaAK3pQ9fRwz82c3"
    assert declined["object_type"] == "charge"
    assert rows[rows["status"] == 400].iloc[0]["detail"].startswith(
        "idempotency_error: Keys for idempotent requests")
    assert rows[rows["status"] == 200]["detail"].isna().all()  # Go's empty error struct


def test_terminal_copy_with_colours_and_status_lines() -> None:
    result = stripe_logs.load(DATA / "logs_tail_terminal.txt")
    assert result.warnings == []
    assert list(result.rows["request_id"]) == ["req_Xa8fT2pL0vKq3N", "req_Lq4Wm9cN2hZt7R"]
    assert list(result.rows["status"]) == [200, 200]


def test_bad_lines_become_warnings_and_the_rest_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "tail.jsonl"
    lines = [
        log_line(request_id="req_ok"),
        "panic: runtime error",
        log_line(request_id="req_when", created_at="yesterday"),
        log_line(request_id="req_status", status="abc"),
        log_line(request_id="req_ms", created_at=1714557600000),
        "[1, 2]",
    ]
    invalid_utf8 = log_line(request_id="req_X").encode().replace(b"req_X", b"req_\xff")
    raw = "\n".join(lines).encode() + b"\n" + invalid_utf8
    path.write_bytes(raw + b"\n" + log_line(request_id="req_last")[:40].encode())
    result = stripe_logs.load(path)
    validate(result.rows)
    assert list(result.rows["request_id"]) == ["req_ok", "req_status"]
    assert pd.isna(result.rows["status"].iloc[1]) and pd.isna(result.rows["outcome"].iloc[1])
    warned = [(w.source.rsplit(":", 1)[1], w.detail.split(" (")[0]) for w in result.warnings]
    assert warned == [
        ("2", "not valid JSON"),
        ("3", "created 'yesterday' is not unix seconds; skipped"),
        ("4", "status 'abc' is not an HTTP status; left empty"),
        ("5", "created 1714557600000 is not a plausible time"),
        ("6", "expected a JSON object, got list; skipped"),
        ("7", "not valid JSON"),  # invalid UTF-8
        ("8", "not valid JSON"),  # cut off mid-object
    ]


def test_json_array_and_mixed_livemode() -> None:
    payload = f"[{log_line()}, {log_line(request_id='req_2', livemode=True)}]".encode()
    result = stripe_logs.parse_capture(payload, "tail.json")
    assert list(result.rows["request_id"]) == ["req_1", "req_2"]
    assert [w.detail for w in result.warnings] == [
        "capture mixes live-mode (1) and test-mode (1) requests; kept all"]


@pytest.mark.parametrize("case", ["empty", "missing", "garbage", "folder"])
def test_unreadable_files_raise_one_source_error_naming_the_file(
    tmp_path: Path, case: str
) -> None:
    path = tmp_path / "tail.jsonl"
    if case == "empty":
        path.write_text("\n\n")
    elif case == "garbage":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary\n")
    elif case == "folder":
        path.mkdir()
    with pytest.raises(SourceError) as caught:
        stripe_logs.load(path)
    assert str(path) in str(caught.value)


def test_sniff() -> None:
    for name, expected in [("logs_tail.jsonl", True), ("logs_tail_terminal.txt", True),
                           ("events_page.json", False), ("request_log.csv", False),
                           ("acme_requests.jsonl", False)]:
        path = DATA / name
        assert stripe_logs.sniff(path, path.read_bytes()[:65536]) is expected, name
