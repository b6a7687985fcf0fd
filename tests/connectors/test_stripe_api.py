"""The live Stripe connector against the lab's Stripe-compatible server, through the real SDK.

One lab account is filled once per module: about 100 API calls, one every 4 minutes of virtual
time over six and a half hours, for three customers (more than one page of events in the window).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pandas as pd
import pytest
import stripe
import time_machine
from stripe.params import ChargeCreateParams

from twice.connectors.base import SourceError
from twice.connectors.live.stripe_api import (
    DEFAULT_TYPES,
    Subject,
    concerns,
    events_document,
    fetch_events,
    load,
)
from twice.connectors.provider import stripe_events
from twice.lab.loopback import LoopbackServer
from twice.lab.stripe_server import Fault, StripeServer

KEY = "sk_test_twiceLabKeyQzWx"
READ_ONLY_KEY = "rk_test_readonlyKey7777"
CUSTOMER = "cus_8123"
OTHERS = ("cus_other1", "cus_other2")
# two days ago, so the window is inside the 30 days `GET /v1/events` covers
T0 = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
AROUND = T0 + timedelta(hours=3, minutes=21)
SINCE, UNTIL = AROUND - timedelta(hours=2), AROUND + timedelta(hours=2)
STEP = timedelta(minutes=4)


class Lab:
    """The filled lab account and the ids a test asks about."""

    def __init__(self, server: StripeServer) -> None:
        self.server = server
        self.intent_id = ""  # cus_8123's payment intent, later refunded
        self.intent_charge = ""
        self.twin_intent_id = ""  # the same payment, created again 40 s later

    def client(self, key: str = KEY) -> stripe.StripeClient:
        return stripe.StripeClient(key, base_addresses={"api": self.server.url},
                                   max_network_retries=0)

    def window_events(self) -> list[dict[str, Any]]:
        """Events the window's list call returns, newest first (as the API orders them)."""
        lo, hi = int(SINCE.timestamp()), int(UNTIL.timestamp())
        return [e for e in reversed(self.server.events)
                if lo <= e["created"] <= hi and e["type"] in DEFAULT_TYPES]

    def events_requests(self, since_index: int) -> list[dict[str, list[str]]]:
        return [parse_qs(r.query) for r in self.server.requests[since_index:]
                if r.method == "GET" and r.path == "/v1/events"]


def _fill(lab: Lab) -> None:
    sdk = lab.client()
    with time_machine.travel(T0, tick=False) as traveller:
        for i in range(100):
            customer = (CUSTOMER, *OTHERS, None)[i % 4]
            if customer and i % 8 != 0:  # a confirmed payment intent: three events
                sdk.v1.payment_intents.create(params={
                    "amount": 1000 + i, "currency": "usd", "customer": customer,
                    "confirm": True, "payment_method": "pm_card_visa"})
            else:  # a charge: one event
                params: ChargeCreateParams = {"amount": 1000 + i, "currency": "usd"}
                if customer:
                    params["customer"] = customer
                sdk.v1.charges.create(params=params)
            if i == 50:  # T0 + 3h20m: the incident
                intent = sdk.v1.payment_intents.create(params={
                    "amount": 4200, "currency": "usd", "customer": CUSTOMER, "confirm": True,
                    "payment_method": "pm_card_visa", "metadata": {"thread_id": "t-9"}})
                traveller.shift(timedelta(seconds=40))
                twin = sdk.v1.payment_intents.create(params={
                    "amount": 4200, "currency": "usd", "customer": CUSTOMER, "confirm": True,
                    "payment_method": "pm_card_visa", "metadata": {"thread_id": "t-9"}})
                lab.intent_id, lab.twin_intent_id = intent.id, twin.id
                lab.intent_charge = str(intent.latest_charge)
                with pytest.raises(stripe.CardError):
                    sdk.v1.charges.create(params={"amount": 900, "currency": "usd",
                                                  "customer": CUSTOMER,
                                                  "source": "tok_chargeDeclined"})
                sdk.v1.customers.create(params={"email": "new@example.com"})  # not an effect
            if i == 56:
                sdk.v1.refunds.create(params={"payment_intent": lab.intent_id})
            traveller.shift(STEP)


@pytest.fixture(scope="module")
def filled() -> Iterator[Lab]:
    server = StripeServer(api_keys={KEY: "full", READ_ONLY_KEY: "read_only"}, seed=23,
                          customers=[CUSTOMER, *OTHERS])
    with server:
        lab = Lab(server)
        _fill(lab)
        yield lab


@pytest.fixture
def lab(filled: Lab) -> Iterator[Lab]:
    yield filled
    with filled.server._lock:  # faults a test left unused must not hit the next test
        filled.server.faults.clear()


def _customer_events(lab: Lab, events: list[dict[str, Any]]) -> list[str]:
    """Independent of `concerns`: cus_8123's objects and the refund of its charge."""
    return [e["id"] for e in events
            if e["data"]["object"].get("customer") == CUSTOMER
            or e["data"]["object"].get("charge") == lab.intent_charge]


class RecordingSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


# -- what one subject's events are ---------------------------------------------------------------
def test_customer_events_across_pages_within_the_window(lab: Lab) -> None:
    start = len(lab.server.requests)
    calls: list[tuple[int, int]] = []
    fetched = fetch_events(lab.client(), Subject(CUSTOMER), SINCE, UNTIL,
                           progress=lambda scanned, kept: calls.append((scanned, kept)))

    window = lab.window_events()
    assert 100 < len(window) < 200  # two pages
    assert [e["id"] for e in fetched.events] == _customer_events(lab, window)
    assert len(fetched.events) > 30 and fetched.pages == 2 and not fetched.partial
    assert fetched.scanned == len(window)
    assert fetched.warnings == []
    times = [e["created"] for e in fetched.events]
    assert times == sorted(times, reverse=True)
    assert SINCE.timestamp() - 1 < min(times) and max(times) <= UNTIL.timestamp()
    # the account has cus_8123 events before and after the window: none came back
    outside = [e for e in lab.server.events if e["data"]["object"].get("customer") == CUSTOMER
               and not SINCE.timestamp() - 1 < e["created"] <= UNTIL.timestamp()]
    assert len(outside) > 10
    assert not {e["id"] for e in outside} & {e["id"] for e in fetched.events}
    types = {e["type"] for e in fetched.events}
    assert {"charge.succeeded", "charge.failed", "payment_intent.succeeded",
            "refund.created"} <= types
    assert "customer.created" not in types
    # both payment intents of the incident, a duplicate the investigation will look at
    incident = [e["data"]["object"]["id"] for e in fetched.events
                if e["type"] == "payment_intent.succeeded"
                and e["data"]["object"]["metadata"].get("thread_id") == "t-9"]
    assert incident == [lab.twin_intent_id, lab.intent_id]
    assert calls == [(100, calls[0][1]), (len(window), calls[1][1])]
    assert calls[0][1] <= calls[1][1] <= len(fetched.events)
    # the scan asked for the window and stopped at its end: two list calls, no third
    requests = lab.events_requests(start)
    assert len(requests) == 2
    for query in requests:
        assert query["created[gte]"] == [str(int(SINCE.timestamp()))]
        assert query["created[lte]"] == [str(int(UNTIL.timestamp()))]
        assert query["limit"] == ["100"]
    assert "starting_after" not in requests[0]
    assert requests[1]["starting_after"] == [window[99]["id"]]
    assert json.loads(lab.server.requests[-1].response_body)["has_more"] is False


def test_payment_intent_events(lab: Lab) -> None:
    fetched = fetch_events(lab.client(), Subject(lab.intent_id), SINCE, UNTIL)

    assert [e["type"] for e in fetched.events] == [
        "refund.created", "charge.refunded", "payment_intent.succeeded", "charge.succeeded",
        "payment_intent.created"]
    assert fetched.events[2]["data"]["object"]["id"] == lab.intent_id
    assert fetched.events[3]["data"]["object"]["payment_intent"] == lab.intent_id
    assert fetched.scanned == len(lab.window_events())


def test_charge_events_include_the_intent_that_made_it(lab: Lab) -> None:
    fetched = fetch_events(lab.client(), Subject(lab.intent_charge), SINCE, UNTIL)

    assert [e["type"] for e in fetched.events] == [
        "refund.created", "charge.refunded", "payment_intent.succeeded", "charge.succeeded"]
    assert fetched.events[2]["data"]["object"]["latest_charge"] == lab.intent_charge


def test_one_wildcard_type_is_sent_as_type(lab: Lab) -> None:
    start = len(lab.server.requests)
    fetched = fetch_events(lab.client(), Subject(lab.intent_id), SINCE, UNTIL,
                           types=["payment_intent.*"])

    assert [e["type"] for e in fetched.events] == ["payment_intent.succeeded",
                                                   "payment_intent.created"]
    assert lab.events_requests(start)[0]["type"] == ["payment_intent.*"]
    with pytest.raises(ValueError, match="wildcard"):
        fetch_events(lab.client(), Subject(CUSTOMER), SINCE, UNTIL,
                     types=["charge.*", "refund.created"])
    with pytest.raises(ValueError, match="at most 20"):
        fetch_events(lab.client(), Subject(CUSTOMER), SINCE, UNTIL,
                     types=[f"charge.t{i}" for i in range(21)])


def test_concerns_reads_expanded_and_referenced_ids() -> None:
    customer, intent, charge = Subject("cus_1"), Subject("pi_1"), Subject("ch_1")
    assert [s.kind for s in (customer, intent, charge)] == [
        "customer", "payment_intent", "charge"]
    assert concerns({"object": "charge", "id": "ch_9", "customer": "cus_1"}, customer)
    assert concerns({"object": "charge", "id": "ch_9", "customer": {"id": "cus_1"}}, customer)
    assert concerns({"object": "customer", "id": "cus_1"}, customer)
    assert not concerns({"object": "charge", "id": "cus_1", "customer": "cus_2"}, customer)
    assert concerns({"object": "charge", "id": "ch_9", "payment_intent": "pi_1"}, intent)
    assert not concerns({"object": "charge", "id": "ch_9", "payment_intent": None}, intent)
    assert concerns({"object": "refund", "id": "re_1", "charge": {"id": "ch_1"}}, charge)
    assert concerns({"object": "payment_intent", "id": "pi_9", "latest_charge": "ch_1"}, charge)
    assert not concerns({"object": "payment_intent", "id": "pi_9", "latest_charge": None}, charge)
    for bad in ("", "evt_1", "cus_", "8123", "pi_1_secret_abc"):
        with pytest.raises(ValueError, match="cus_|pi_|client secret|empty"):
            Subject(bad)


# -- rate limits and failures ----------------------------------------------------------------
def test_rate_limited_pages_are_retried_with_backoff(lab: Lab) -> None:
    lab.server.add_fault(Fault(kind="status_429", method="GET", path="/v1/events", times=2,
                               retry_after=2))
    sleep = RecordingSleep()
    fetched = fetch_events(lab.client(), Subject(CUSTOMER), SINCE, UNTIL, sleep=sleep)

    assert sleep.waits == [2.0, 2.0]  # the server's Retry-After
    assert [e["id"] for e in fetched.events] == _customer_events(lab, lab.window_events())
    assert not fetched.partial and fetched.pages == 2
    assert [w.detail for w in fetched.warnings] == [
        "rate limited (429) 2 time(s); retried after 4 s in total"]

    lab.server.add_fault(Fault(kind="status_429", method="GET", path="/v1/events", times=3))
    sleep = RecordingSleep()
    fetch_events(lab.client(), Subject(lab.intent_id), SINCE, UNTIL, sleep=sleep)
    assert sleep.waits == [0.5, 1.0, 2.0]  # no Retry-After: exponential


def test_still_rate_limited_after_the_retries_is_a_source_error(lab: Lab) -> None:
    lab.server.add_fault(Fault(kind="status_429", method="GET", path="/v1/events", times=9))
    sleep = RecordingSleep()
    with pytest.raises(SourceError, match="rate limited") as err:
        fetch_events(lab.client(), Subject(CUSTOMER), SINCE, UNTIL, sleep=sleep,
                     max_rate_limit_retries=2)
    assert sleep.waits == [0.5, 1.0]
    assert err.value.source == "stripe api"


def test_server_error_after_the_first_page_keeps_it_as_partial(lab: Lab) -> None:
    def fail_next_page(scanned: int, kept: int) -> None:
        lab.server.add_fault(Fault(kind="status_500", method="GET", path="/v1/events"))

    fetched = fetch_events(lab.client(), Subject(CUSTOMER), SINCE, UNTIL,
                           progress=fail_next_page)

    first_page = lab.window_events()[:100]
    assert fetched.partial and fetched.pages == 1 and fetched.scanned == 100
    assert [e["id"] for e in fetched.events] == _customer_events(lab, first_page)
    assert fetched.events
    [warning] = fetched.warnings
    assert "stopped after 1 page(s)" in warning.detail and "(500)" in warning.detail
    assert "partial" in warning.detail and "not read" in warning.detail
    assert lab.server.requests[-1].status == 500


def test_server_error_on_the_first_page_is_a_source_error(lab: Lab) -> None:
    lab.server.add_fault(Fault(kind="status_500", method="GET", path="/v1/events"))
    with pytest.raises(SourceError, match=r"stripe api: the Stripe API failed \(500\)"):
        fetch_events(lab.client(), Subject(CUSTOMER), SINCE, UNTIL)


def _assert_key_absent(text: str, key: str) -> None:
    assert key not in text
    assert key[-4:] not in text  # Stripe echoes the key masked, last 4 kept
    assert "sk_test" not in text and "rk_test" not in text


def test_wrong_key_is_a_source_error_without_the_key(lab: Lab) -> None:
    wrong = "sk_test_wrongKey9911"
    with pytest.raises(SourceError) as err:
        load(wrong, Subject(CUSTOMER), SINCE, UNTIL, base_url=lab.server.url)

    assert "(401)" in str(err.value) and "rejected" in str(err.value)
    for text in (str(err.value), repr(err.value), err.value.reason):
        _assert_key_absent(text, wrong)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    with pytest.raises(SourceError) as direct:  # the client-level call scrubs on its own
        fetch_events(lab.client(wrong), Subject(CUSTOMER), SINCE, UNTIL)
    _assert_key_absent(str(direct.value), wrong)
    # what the SDK itself says does echo the key, masked: the reason the message is scrubbed
    with pytest.raises(stripe.AuthenticationError, match="9911"):
        lab.client(wrong).v1.events.list()


def test_read_only_key_may_list_events(lab: Lab) -> None:
    result, fetched = load(READ_ONLY_KEY, Subject(lab.intent_id), SINCE, UNTIL,
                           base_url=lab.server.url)
    assert len(result.rows) == len(fetched.events) == 5


class _Forbidden(BaseHTTPRequestHandler):
    """Answers what Stripe answers a restricted key without Events read access."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = json.dumps({"error": {
            "message": "The provided key 'rk_test_***************7777' does not have the "
                       "required permissions for this endpoint on account 'acct_1Twice'. Having "
                       "the 'rak_event_read' permission would allow this request to continue.",
            "type": "invalid_request_error"}}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Request-Id", "req_forbidden1")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def test_key_without_events_permission_is_a_source_error_without_the_key() -> None:
    # The lab server only refuses writes to read-only keys (reading events is allowed), so a
    # loopback server answering Stripe's 403 stands in for a restricted key without Events.
    server = LoopbackServer(_Forbidden, None, "stripe-403").serve()
    try:
        with pytest.raises(SourceError) as err:
            load(READ_ONLY_KEY, Subject(CUSTOMER), SINCE, UNTIL, base_url=server.url)
    finally:
        server.close()
    assert "(403)" in str(err.value) and "Events" in str(err.value)
    assert "req_forbidden1" in str(err.value)
    _assert_key_absent(str(err.value), READ_ONLY_KEY)


def test_unreachable_api_is_a_source_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(SourceError, match="cannot reach the Stripe API: connection refused"):
        load(KEY, Subject(CUSTOMER), SINCE, UNTIL, base_url=f"http://127.0.0.1:{port}")


def test_publishable_or_missing_key_is_refused_before_calling() -> None:
    with pytest.raises(SourceError, match="publishable"):
        load("pk_test_abc", Subject(CUSTOMER), SINCE, UNTIL, base_url="http://127.0.0.1:9")
    with pytest.raises(SourceError, match="no API key"):
        load("  ", Subject(CUSTOMER), SINCE, UNTIL, base_url="http://127.0.0.1:9")


# -- rows ----------------------------------------------------------------------------------------
def test_rows_match_the_saved_events_file(lab: Lab, tmp_path: Path) -> None:
    result, fetched = load(KEY, Subject(CUSTOMER), SINCE, UNTIL, base_url=lab.server.url)
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events_document(fetched.events)))
    from_file = stripe_events.load(path)

    assert len(result.rows) == len(fetched.events) > 30
    assert set(result.rows["source"]) == {"stripe_events"}
    pd.testing.assert_frame_equal(result.rows.drop(columns="origin"),
                                  from_file.rows.drop(columns="origin"))
    assert [w.detail for w in result.warnings] == [w.detail for w in from_file.warnings]
    incident = result.rows[result.rows["thread_id"] == "t-9"]
    assert list(incident["event_type"]).count("payment_intent.succeeded") == 2
    assert result.rows["request_id"].notna().all()
    cells = [str(cell) for cell in result.rows.to_numpy().ravel()]
    assert not any(KEY in cell or KEY[-4:] in cell for cell in cells)


def test_nothing_found_is_a_warning_not_an_error(lab: Lab) -> None:
    result, fetched = load(KEY, Subject("cus_nobody"), SINCE, UNTIL, base_url=lab.server.url)
    assert result.rows.empty and fetched.events == []
    assert fetched.scanned == len(lab.window_events())
    assert [w.detail.split(" between ")[0] for w in result.warnings] == [
        "no events of customer cus_nobody"]


def test_window_older_than_thirty_days_warns(lab: Lab) -> None:
    since = datetime.now(UTC) - timedelta(days=45)
    fetched = fetch_events(lab.client(), Subject(CUSTOMER), since, since + timedelta(hours=4))
    assert fetched.events == []
    assert "last 30 days only" in fetched.warnings[0].detail
    with pytest.raises(ValueError, match="timezone-aware"):
        fetch_events(lab.client(), Subject(CUSTOMER), SINCE.replace(tzinfo=None), UNTIL)
