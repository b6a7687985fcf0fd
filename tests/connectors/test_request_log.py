"""Generic provider request logs (CSV / JSON lines with a column mapping) -> provider_request."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from twice.connectors._parsing import Skip
from twice.connectors.base import SourceError
from twice.connectors.provider import request_log, stripe_events, stripe_logs
from twice.timeline import fingerprint, validate

DATA = Path(__file__).parent / "data" / "provider"
CSV = DATA / "request_log.csv"
ACME = DATA / "acme_requests.jsonl"
ACME_MAPPING = ("request_id=id,created=ts,method=verb,path=endpoint,idempotency_key=idem,"
                "status=http_status,body=payload,replayed=cached")
HEADER = "request_id,created,method,path,idempotency_key,status,body,replayed\n"


@pytest.fixture(scope="module")
def csv_rows() -> pd.DataFrame:
    result = request_log.load(CSV)
    assert result.warnings == []
    validate(result.rows)
    return result.rows


def test_csv_with_form_bodies(csv_rows: pd.DataFrame) -> None:
    assert len(csv_rows) == 7
    assert set(csv_rows["kind"]) == {"provider_request"}
    first = csv_rows.iloc[1]
    assert first["at"] == pd.Timestamp("2024-05-01T10:00:00.412Z")
    assert (first["method"], first["path"], first["status"]) == ("POST", "/v1/payment_intents", 200)
    assert (first["amount"], first["currency"]) == (2000, "usd")
    assert first["subject"] == "cus_Q1dUOq0l2nDnvT"
    assert (first["thread_id"], first["tool_call_id"]) == ("thr_7f3c9a", "toolu_01H8XkQz4gM7")
    args = json.loads(first["args"])
    assert args["metadata"] == {"thread_id": "thr_7f3c9a", "tool_call_id": "toolu_01H8XkQz4gM7"}
    assert args["expand"] == ["latest_charge"] and args["payment_method_types"] == ["card"]
    assert args["amount"] == "2000"  # form values stay text: the fingerprint ignores nothing
    assert first["args_fingerprint"] == fingerprint(args)


def test_replay_retry_and_keys(csv_rows: pd.DataFrame) -> None:
    intents = csv_rows[csv_rows["path"] == "/v1/payment_intents"]
    same_body = intents[intents["amount"] == 2000]
    assert same_body["args_fingerprint"].nunique() == 1
    assert list(same_body["outcome"]) == ["ok", "replayed", "ok"]
    assert same_body["idempotency_key"].nunique() == 2  # the SDK reused it, the step retry did not
    refund = csv_rows[csv_rows["path"] == "/v1/refunds"].iloc[0]
    assert pd.isna(refund["idempotency_key"])  # empty cell: no key on the wire
    get = csv_rows[csv_rows["method"] == "GET"].iloc[0]
    assert get["path"] == "/v1/payment_intents"  # query string (customer id) dropped
    assert pd.isna(get["args"]) and pd.isna(get["idempotency_key"])
    assert csv_rows[csv_rows["status"] == 402].iloc[0]["outcome"] == "error"


def test_json_lines_with_a_custom_mapping() -> None:
    result = request_log.load(ACME, request_log.parse_mapping(ACME_MAPPING))
    rows = result.rows
    validate(rows)
    assert result.warnings == []
    assert list(rows["request_id"]) == ["pay_req_01HX0A", "pay_req_01HX0B", "pay_req_01HX0C"]
    assert rows["at"].iloc[0] == pd.Timestamp("2024-05-01T10:00:00.412Z")  # epoch ms
    assert set(rows["path"]) == {"/v2/payments"} and set(rows["method"]) == {"POST"}
    assert list(rows["outcome"]) == ["ok", "replayed", "error"]
    assert list(rows["status"]) == [201, 201, 504]
    assert set(rows["currency"]) == {"eur"} and set(rows["amount"]) == {1999}
    assert list(rows["thread_id"].fillna("-")) == ["thr_7f3c9a", "thr_7f3c9a", "-"]
    assert pd.isna(rows["idempotency_key"].iloc[2])
    # a JSON body given as text parses to the same params as one given as an object
    assert json.loads(rows["args"].iloc[2]) == {
        "amount": 1999, "currency": "EUR", "customer": "c_88231"}


def test_parse_mapping() -> None:
    assert request_log.parse_mapping("request_id=Request ID, created = Date,") == {
        "request_id": "Request ID", "created": "Date"}
    with pytest.raises(ValueError, match="not field=column"):
        request_log.parse_mapping("request_id")
    with pytest.raises(ValueError, match="unknown field 'reqid'"):
        request_log.parse_mapping("reqid=Request ID")


def test_missing_columns_named_in_one_error(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("id,when,body\nreq_1,2024-05-01T10:00:00Z,\n")
    with pytest.raises(SourceError) as caught:
        request_log.load(path)
    message = str(caught.value)
    assert str(path) in message and "'request_id'" in message and "'created'" in message
    with pytest.raises(SourceError, match=r"'Status Code' \(for status\)"):
        request_log.load(path, {"request_id": "id", "created": "when", "status": "Status Code"})
    with pytest.raises(SourceError, match="unknown field"):
        request_log.load(path, {"request": "id"})


def test_excel_export_with_semicolons_bom_and_other_case(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_bytes("\ufeffRequest_ID;Created;Status\nreq_1;1714557600;200\n".encode())
    result = request_log.load(path)
    assert list(result.rows["request_id"]) == ["req_1"]
    assert result.rows["at"].iloc[0] == pd.Timestamp("2024-05-01T10:00:00Z")
    # without the column the keys are unknown, which is not the same as "none sent"
    assert [w.detail.split(":")[0] for w in result.warnings] == ["no idempotency_key column"]


@pytest.mark.parametrize("value", [
    "2024-05-01T10:00:00Z", "2024-05-01T12:00:00+02:00", "2024-05-01 10:00:00 UTC",
    1714557600, "1714557600", 1714557600.0, "1714557600000", 1714557600000000,
    "1714557600000000000",
])
def test_created_formats_and_units(value: object) -> None:
    at, naive = request_log.parse_created(value)
    assert at == pd.Timestamp("2024-05-01T10:00:00Z") and not naive


@pytest.mark.parametrize("value", ["yesterday", "12", 0, -5, 1e30, float("nan"), True, None,
                                   "1714557600123456789123", "3024-05-01T10:00:00Z"])
def test_absurd_times_are_refused(value: object) -> None:
    with pytest.raises(Skip):
        request_log.parse_created(value)


def test_naive_times_read_as_utc_with_one_warning(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text(HEADER + "req_1,2024-05-01 10:00:00,POST,/v1/charges,k1,200,,\n"
                    "req_2,2024-05-01T10:00:05,POST,/v1/charges,k1,200,,true\n")
    result = request_log.load(path)
    assert list(result.rows["at"]) == [pd.Timestamp("2024-05-01T10:00:00Z"),
                                       pd.Timestamp("2024-05-01T10:00:05Z")]
    assert [w.detail for w in result.warnings] == ["2 time(s) have no zone; read as UTC"]


def test_bad_rows_become_warnings_and_the_rest_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    good = b"req_ok,2024-05-01T10:00:00Z,POST,/v1/charges,k1,200,amount=2000&currency=usd,false\n"
    path.write_bytes(
        HEADER.encode() + good
        + b"this line is garbage\n"
        + b"req_when,yesterday,POST,/v1/charges,k2,200,,\n"
        + b"req_amount,2024-05-01T10:00:01Z,POST,/v1/charges,k3,200,amount=abc,\n"
        + b"req_status,2024-05-01T10:00:02Z,POST,/v1/charges,k4,abc,,maybe\n"
        + b"req_bytes\xff\xfe,2024-05-01T10:00:03Z,POST,/v1/charges,k5,200,,\n"
        + b'req_json,2024-05-01T10:00:04Z,POST,/v1/charges,k6,200,"{""amount"": 20",\n'
        + b",2024-05-01T10:00:05Z,POST,/v1/charges,k7,200,,\n"
        + b'req_quote,2024-05-01T10:00:06Z,POST,/v1/charges,k8,200,"a"b,\n'
        + b'req_cut,2024-05-01T10:00:07Z,POST,/v1/charges,k9,200,"amount=20'
    )
    result = request_log.load(path)
    validate(result.rows)
    assert list(result.rows["request_id"]) == ["req_ok", "req_amount", "req_status", "req_json"]
    amount = result.rows.set_index("request_id")["amount"]
    assert amount["req_ok"] == 2000 and pd.isna(amount["req_amount"])
    kept_json = result.rows.set_index("request_id").loc["req_json"]
    assert kept_json["args"] == '{"amount": 20' and isinstance(kept_json["args_fingerprint"], str)
    warned = [(w.source.rsplit(":", 1)[1], w.detail.split(" (")[0].split(";")[0])
              for w in result.warnings]
    assert warned == [
        ("3", "1 fields, header has 8"),
        ("7", "invalid UTF-8 bytes"),
        ("10", "bad CSV"),
        ("11", "bad CSV"),
        ("4", "created 'yesterday' is not ISO 8601 or unix time"),
        ("5", "amount 'abc' is not a whole number"),
        ("6", "status 'abc' is not an HTTP status"),
        ("6", "replayed 'maybe' is not yes/no"),
        ("8", "body is not valid JSON"),
        ("9", "empty request id"),
    ]


def test_form_bodies() -> None:
    assert request_log.parse_form("expand[]=a&expand[]=b&items[0][price]=p1&items[1][price]=p2"
                                  "&metadata[thread_id]=t&a=1&a[b]=2") == {
        "expand": ["a", "b"], "items": [{"price": "p1"}, {"price": "p2"}],
        "metadata": {"thread_id": "t"}, "a": "1", "a[b]": "2"}


def test_card_numbers_hidden_but_still_told_apart() -> None:
    body = "amount=100&card[number]=4242424242424242&card[cvc]=123"
    other = body.replace("4242424242424242", "4000056655665556")
    records = [(f"r{i}", {"request_id": f"req_{i}", "created": 1714557600, "body": b})
               for i, b in enumerate([body, other])]
    rows = request_log.parse_records(records, {f: f for f in request_log.FIELDS}, "log").rows
    assert "4242" not in rows["args"].iloc[0] and "123" not in rows["args"].iloc[0]
    assert json.loads(rows["args"].iloc[0])["card"] == {"number": "***", "cvc": "***"}
    assert rows["args_fingerprint"].nunique() == 2


@pytest.mark.parametrize("case", ["empty", "missing", "folder", "not_objects", "truncated"])
def test_unreadable_files_raise_one_source_error_naming_the_file(
    tmp_path: Path, case: str
) -> None:
    path = tmp_path / "log.jsonl"
    if case == "empty":
        path.write_text(" \n")
    elif case == "folder":
        path.mkdir()
    elif case == "not_objects":
        path.write_text("[1, 2, 3]\n")
    elif case == "truncated":
        path.write_text('{"request_id": "req_1", "created": 17145')
    with pytest.raises(SourceError) as caught:
        request_log.load(path)
    assert str(path) in str(caught.value)


def test_truncated_json_lines_keep_the_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"request_id": "req_1", "idempotency_key": "k", "created": 1714557600}\n'
                    '{"request_id": "req_2", "idempotency_key": "k", "crea')
    result = request_log.load(path)
    assert list(result.rows["request_id"]) == ["req_1"]
    assert [w.source for w in result.warnings] == [f"{path}:2"]


def test_header_only_csv_is_empty_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text(HEADER)
    result = request_log.load(path)
    assert result.rows.empty and result.warnings == []


def test_each_fixture_is_claimed_by_exactly_its_connector() -> None:
    owners = {"request_log.csv": "request_log", "acme_requests.jsonl": None,
              "logs_tail.jsonl": "stripe_logs", "logs_tail_terminal.txt": "stripe_logs",
              "events_page.json": "stripe_events", "events_2016.json": "stripe_events",
              "webhooks.jsonl": "stripe_events"}
    for name, owner in owners.items():
        path = DATA / name
        head = path.read_bytes()[:65536]
        claimed = [m.name for m in (request_log, stripe_logs, stripe_events) if m.sniff(path, head)]
        assert claimed == ([owner] if owner else []), name
