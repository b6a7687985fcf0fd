"""Stripe Event objects (GET /v1/events, webhook payloads) -> provider_event rows."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from twice.connectors.base import SourceError
from twice.connectors.provider import stripe_events
from twice.timeline import validate

DATA = Path(__file__).parent / "data" / "provider"
PAGE = DATA / "events_page.json"
CUSTOMER = "cus_Q1dUOq0l2nDnvT"
FIRST, SECOND = "req_Xa8fT2pL0vKq3N", "req_Lq4Wm9cN2hZt7R"


@pytest.fixture(scope="module")
def page() -> pd.DataFrame:
    result = stripe_events.load(PAGE)
    assert result.warnings == []
    validate(result.rows)
    return result.rows


def by_event(rows: pd.DataFrame, event_type: str) -> pd.DataFrame:
    return rows[rows["event_type"] == event_type]


def test_one_row_per_event_with_request_and_key(page: pd.DataFrame) -> None:
    assert len(page) == 14
    assert set(page["kind"]) == {"provider_event"}
    assert set(page["source"]) == {"stripe_events"}
    first = page[page["request_id"] == FIRST]
    # one confirming request emits three events: PaymentIntent created, charge, PI succeeded
    assert sorted(first["event_type"]) == [
        "charge.succeeded", "payment_intent.created", "payment_intent.succeeded"]
    assert set(first["idempotency_key"]) == {"6f1d2b7e-3c1a-4e8a-9a55-0b6e1c2d9f10"}
    assert set(first["object_type"]) == {"payment_intent", "charge"}
    assert first["at"].min() == pd.Timestamp("2024-05-01T10:00:00Z")


def test_step_retry_shows_two_requests_two_keys_one_tool_call(page: pd.DataFrame) -> None:
    succeeded = by_event(page, "payment_intent.succeeded").sort_values("at")
    assert list(succeeded["request_id"]) == [FIRST, SECOND]
    assert succeeded["idempotency_key"].nunique() == 2
    assert set(succeeded["thread_id"]) == {"thr_7f3c9a"}
    assert set(succeeded["tool_call_id"]) == {"toolu_01H8XkQz4gM7"}
    assert set(succeeded["subject"]) == {CUSTOMER}
    assert list(succeeded["amount"]) == [2000, 2000]
    assert set(succeeded["currency"]) == {"usd"}
    gap = succeeded["at"].iloc[1] - succeeded["at"].iloc[0]
    assert gap == pd.Timedelta(seconds=32)
    args = json.loads(succeeded["args"].iloc[0])
    assert args == {"thread_id": "thr_7f3c9a", "tool_call_id": "toolu_01H8XkQz4gM7"}


def test_automatic_event_has_no_request(page: pd.DataFrame) -> None:
    canceled = by_event(page, "payment_intent.canceled").iloc[0]
    assert pd.isna(canceled["request_id"]) and pd.isna(canceled["idempotency_key"])
    assert canceled["outcome"] == "error"
    assert canceled["detail"] == "canceled: automatic"


def test_refund_row(page: pd.DataFrame) -> None:
    refund = by_event(page, "refund.created").iloc[0]
    assert refund["object_type"] == "refund"
    assert refund["object_id"] == "re_3PBkZWK3pQ9fRwz81r1"
    assert refund["amount"] == 2000 and refund["outcome"] == "ok"
    assert json.loads(refund["args"]) == {"reason": "duplicate of pi_3PBkZ0K3pQ9fRwz80k1"}
    # the refund's own request also emitted charge.refunded for the charge
    refunded = by_event(page, "charge.refunded").iloc[0]
    assert refunded["request_id"] == refund["request_id"]
    assert refunded["subject"] == CUSTOMER


def test_outcomes_and_details(page: pd.DataFrame) -> None:
    failed = by_event(page, "payment_intent.payment_failed").iloc[0]
    assert failed["outcome"] == "error" and failed["detail"] == "Your card was declined."
    assert by_event(page, "charge.failed").iloc[0]["outcome"] == "error"
    assert set(by_event(page, "payment_intent.created")["outcome"]) == {"unknown"}
    assert set(by_event(page, "charge.succeeded")["outcome"]) == {"ok"}
    assert pd.isna(by_event(page, "customer.created").iloc[0]["outcome"])


def test_customer_and_noise_from_other_customers(page: pd.DataFrame) -> None:
    customer = by_event(page, "customer.created").iloc[0]
    assert customer["subject"] == customer["object_id"] == CUSTOMER
    others = page[page["subject"] == "cus_Q1dW3kfZ0xJqBa"]
    assert len(others) == 2 and set(others["amount"]) == {4500}
    assert others["thread_id"].isna().all()
    assert json.loads(others["args"].dropna().iloc[0]) == {"order": "A-1009"}


def test_events_say_nothing_about_method_or_path(page: pd.DataFrame) -> None:
    # one request emits events for several object types, so a path read off the type would lie
    assert page["method"].isna().all() and page["path"].isna().all()


def test_pre_2017_string_request_means_key_unknown() -> None:
    result = stripe_events.load(DATA / "events_2016.json")
    rows = result.rows
    assert set(rows["request_id"]) == {"req_9dG1aBcDeFgHiJ"}
    assert rows["idempotency_key"].isna().all()
    assert [w.detail for w in result.warnings] == [
        "2 event(s) with pre-2017-05-25 string `request`: their idempotency key is unknown, "
        "not absent"]
    charge = by_event(rows, "charge.succeeded").iloc[0]
    assert charge["subject"] == "cus_9dG1tT8pQ2xW"  # expanded customer object
    assert charge["thread_id"] == "run-42"  # stamped as agent_thread_id
    assert charge["currency"] == "eur" and charge["amount"] == 1500


def event(eid: str, **extra: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": eid, "object": "event", "created": 1714557600, "livemode": False,
        "type": "charge.succeeded", "request": {"id": "req_1", "idempotency_key": "k1"},
        "data": {"object": {"id": "ch_1", "object": "charge", "amount": 500, "status": "succeeded",
                            "currency": "usd", "customer": "cus_1", "metadata": {}}},
    }
    base.update(extra)
    return base


def test_event_without_request_field_as_localstripe_writes_it() -> None:
    ev = event("evt_ls1")
    del ev["request"]
    result = stripe_events.parse_events([ev], "localstripe.json")
    row = result.rows.iloc[0]
    assert pd.isna(row["request_id"]) and pd.isna(row["idempotency_key"])
    assert row["args"] is pd.NA  # empty metadata gives no args
    assert "no `request` field" in result.warnings[0].detail


def test_duplicates_kept_once_and_mixed_livemode_warned_once() -> None:
    events = [event("evt_a"), event("evt_a"), event("evt_b", livemode=True), event("evt_a")]
    result = stripe_events.parse_events({"object": "list", "data": events, "has_more": True},
                                        "events.json")
    assert list(result.rows["event_id"]) == ["evt_a", "evt_b"]
    details = [w.detail for w in result.warnings]
    assert details == [
        "file mixes live-mode (1) and test-mode (1) events; kept all",
        "2 duplicate event id(s) (evt_a); kept the first of each",
        "list has more pages (has_more: true): events past the last one are missing",
    ]


def test_wrong_types_become_warnings(tmp_path: Path) -> None:
    bad_amount = event("evt_amt")
    bad_amount["data"] = {"object": {"id": "ch_2", "object": "charge", "amount": "abc"}}
    events = [event("evt_ok"), event("evt_when", created="yesterday"), bad_amount,
              event("evt_ms", created=1714557600000), event("evt_req", request=42), "text"]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events))
    result = stripe_events.load(path)
    validate(result.rows)
    assert list(result.rows["event_id"]) == ["evt_ok", "evt_amt"]
    assert pd.isna(result.rows["amount"].iloc[1])
    warned = {w.source: w.detail for w in result.warnings}
    assert warned == {
        f"{path}[1]": "created 'yesterday' is not unix seconds; skipped",
        f"{path}[2]": "amount 'abc' is not a whole number; amount left empty",
        f"{path}[3]": "created 1714557600000 is not a plausible time (unix seconds); skipped",
        f"{path}[4]": "`request` is a int, expected an object or a string; skipped",
        f"{path}[5]": "expected an Event object, got str; skipped",
    }


def test_json_lines_with_a_garbage_line() -> None:
    path = DATA / "webhooks.jsonl"
    result = stripe_events.load(path)
    assert len(result.rows) == 4
    assert [w.source for w in result.warnings] == [f"{path}:3"]
    assert result.rows["origin"].iloc[0] == f"{path}:1"


def test_invalid_utf8_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    good = json.dumps(event("evt_good")).encode()
    bad = json.dumps(event("evt_bad", type="charge.\x00")).encode().replace(b"\\u0000", b"\xff\xfe")
    path.write_bytes(good + b"\n" + bad + b"\n")
    result = stripe_events.load(path)
    assert list(result.rows["event_id"]) == ["evt_good"]
    assert [w.source for w in result.warnings] == [f"{path}:2"]


@pytest.mark.parametrize("case", ["truncated", "empty", "missing", "folder", "charges"])
def test_unreadable_files_raise_one_source_error_naming_the_file(
    tmp_path: Path, case: str
) -> None:
    path = tmp_path / "events.json"
    if case == "truncated":
        text = PAGE.read_text()
        path.write_text(text[: len(text) // 2])
    elif case == "empty":
        path.write_text("  \n")
    elif case == "folder":
        path.mkdir()
    elif case == "charges":  # valid JSON, but a list of charges, not events
        charges = [{"id": "ch_1", "object": "charge"}]
        path.write_text(json.dumps({"object": "list", "data": charges}))
    with pytest.raises(SourceError) as caught:
        stripe_events.load(path)
    assert str(path) in str(caught.value)


def test_invalid_utf8_in_a_one_document_file_is_repaired_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_bytes(json.dumps([event("evt_1")]).encode().replace(b"req_1", b"req_\xff"))
    result = stripe_events.load(path)
    assert list(result.rows["event_id"]) == ["evt_1"]
    assert list(result.rows["request_id"]) == ["req_\ufffd"]
    assert any("UTF-8" in w.detail for w in result.warnings)


def test_empty_list_is_not_an_error() -> None:
    result = stripe_events.parse_events({"object": "list", "data": [], "has_more": False}, "e")
    assert result.rows.empty
    assert [w.detail for w in result.warnings] == ["no events in file"]


def test_sniff() -> None:
    for name, expected in [("events_page.json", True), ("events_2016.json", True),
                           ("webhooks.jsonl", True), ("logs_tail.jsonl", False),
                           ("request_log.csv", False), ("acme_requests.jsonl", False)]:
        path = DATA / name
        assert stripe_events.sniff(path, path.read_bytes()[:65536]) is expected, name


@pytest.fixture
def localstripe_url() -> Iterator[str]:
    """localstripe (a stateful fake Stripe server) on a loopback port, in this process."""
    pytest.importorskip("localstripe")
    from twice.lab.localstripe import LocalStripe

    with LocalStripe() as server:
        yield server.url


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's sync aiohttp handlers
def test_events_listed_by_localstripe(localstripe_url: str, tmp_path: Path) -> None:
    import stripe

    client = stripe.StripeClient("sk_test_twice", base_addresses={"api": localstripe_url})
    customer = client.v1.customers.create(params={"email": "ada@example.com"})
    card = client.v1.payment_methods.create(params={
        "type": "card",
        "card": {"number": "4242424242424242", "exp_month": 12, "exp_year": 2030, "cvc": "123"}})
    for _ in range(2):  # the tool ran twice for one tool call
        intent = client.v1.payment_intents.create(params={
            "amount": 2000, "currency": "usd", "customer": customer.id, "payment_method": card.id,
            "metadata": {"thread_id": "thr_1", "tool_call_id": "call_1"}})
        client.v1.payment_intents.confirm(intent.id)
    request = urllib.request.Request(
        f"{localstripe_url}/v1/events", headers={"Authorization": "Bearer sk_test_twice"})
    with urllib.request.urlopen(request, timeout=10) as response:
        path = tmp_path / "events.json"
        path.write_bytes(response.read())

    result = stripe_events.load(path)
    validate(result.rows)
    mine = result.rows[result.rows["subject"] == customer.id]
    succeeded = mine[mine["event_type"] == "payment_intent.succeeded"]
    assert len(succeeded) == 2 and succeeded["object_id"].nunique() == 2
    assert set(succeeded["tool_call_id"]) == {"call_1"} and set(succeeded["outcome"]) == {"ok"}
    # localstripe writes no `request`: the rows have no request id, and the key is unknown
    assert mine["request_id"].isna().all() and mine["idempotency_key"].isna().all()
    assert any("no `request` field" in w.detail for w in result.warnings)
