from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
import stripe
import time_machine
from stripe.params import ChargeCreateParams

from tests.lab.conftest import KEY, READ_ONLY_KEY, ClientFactory, make_client
from twice.lab.stripe_server import Fault, StripeServer, mask_key

CHARGE: ChargeCreateParams = {"amount": 2000, "currency": "usd", "metadata": {"thread_id": "t-1"}}


def charges_in(server: StripeServer) -> list[dict]:
    return list(server.charges.values())


def test_sdk_creates_customer_charge_and_payment_intent_with_events(
    server: StripeServer, client: ClientFactory
) -> None:
    sdk = client()
    customer = sdk.v1.customers.create(params={"email": "ada@example.com"})
    charge = sdk.v1.charges.create(params={**CHARGE, "customer": customer.id})
    intent = sdk.v1.payment_intents.create(
        params={
            "amount": 1500,
            "currency": "usd",
            "customer": customer.id,
            "confirm": True,
            "payment_method": "pm_card_visa",
        },
        options={"idempotency_key": "pi-key-1"},
    )

    assert re.fullmatch(r"cus_[0-9A-Za-z]{14}", customer.id)
    assert re.fullmatch(r"ch_3P[0-9A-Za-z]{22}", charge.id)
    assert charge.status == "succeeded" and charge.metadata["thread_id"] == "t-1"
    latest_charge = intent.latest_charge
    assert intent.status == "succeeded" and isinstance(latest_charge, str)
    # A PaymentIntent's charge shares the intent's id body, as on Stripe.
    assert latest_charge == "ch_" + intent.id.removeprefix("pi_")
    assert sdk.v1.payment_intents.retrieve(intent.id).amount_received == 1500
    assert sdk.v1.charges.retrieve(latest_charge).payment_intent == intent.id
    assert sdk.v1.customers.retrieve(customer.id).email == "ada@example.com"

    types = [e["type"] for e in server.events]
    assert types == [
        "customer.created",
        "charge.succeeded",
        "payment_intent.created",
        "charge.succeeded",
        "payment_intent.succeeded",
    ]
    intent_response = intent.last_response
    assert intent_response is not None
    request_id = intent_response.headers["Request-Id"]
    assert re.fullmatch(r"req_[0-9A-Za-z]{14}", request_id)
    for event in server.events[2:]:
        assert event["request"] == {"id": request_id, "idempotency_key": "pi-key-1"}
        assert event["object"] == "event" and event["livemode"] is False
        assert event["api_version"] and isinstance(event["created"], int)
    # The SDK sent its own random key on the calls that set none, and the events carry it.
    assert server.events[1]["request"]["idempotency_key"] == server.requests[1].idempotency_key
    assert server.events[1]["data"]["object"]["id"] == charge.id


def test_events_list_filters_by_time_and_type_and_pages_newest_first(
    server: StripeServer, client: ClientFactory
) -> None:
    sdk = client()
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False) as traveller:
        for i in range(5):
            sdk.v1.charges.create(params={"amount": 100 + i, "currency": "usd"})
            traveller.shift(timedelta(minutes=10))
    t0 = int(start.timestamp())

    everything = list(sdk.v1.events.list(params={"limit": 2}).auto_paging_iter())
    assert [e.data.object.amount for e in everything] == [104, 103, 102, 101, 100]
    assert [e.created for e in everything] == [t0 + 2400, t0 + 1800, t0 + 1200, t0 + 600, t0]

    window = sdk.v1.events.list(
        params={"created": {"gte": t0 + 600, "lt": t0 + 1800}, "type": "charge.succeeded"}
    )
    assert [e.data.object.amount for e in window.data] == [102, 101]
    assert window.has_more is False
    later = sdk.v1.events.list(params={"created": {"gt": t0 + 1200}, "types": ["charge.*"]})
    assert [e.data.object.amount for e in later.data] == [104, 103]
    assert sdk.v1.events.list(params={"created": {"lte": t0}}).data[0].data.object.amount == 100

    first_page = sdk.v1.events.list(params={"limit": 2})
    assert first_page.has_more is True
    newer = sdk.v1.events.list(params={"limit": 2, "ending_before": everything[3].id})
    assert [e.id for e in newer.data] == [everything[1].id, everything[2].id]
    assert sdk.v1.events.retrieve(everything[0].id).id == everything[0].id
    with pytest.raises(stripe.InvalidRequestError) as too_many:
        sdk.v1.events.list(params={"limit": 101})
    assert too_many.value.param == "limit"


def test_same_key_same_params_replays_the_first_answer(
    server: StripeServer, client: ClientFactory
) -> None:
    sdk = client()
    first = sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-1"})
    second = sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-1"})

    assert first.id == second.id
    assert len(charges_in(server)) == 1
    assert [e["type"] for e in server.events] == ["charge.succeeded"]
    h1, h2 = first.last_response, second.last_response
    assert h1 is not None and h2 is not None
    assert "Idempotent-Replayed" not in h1.headers
    assert h2.headers["Idempotent-Replayed"] == "true"
    assert h2.headers["Original-Request"] == h1.headers["Request-Id"]
    assert h2.headers["Request-Id"] != h1.headers["Request-Id"]
    assert h2.body == h1.body  # byte for byte
    assert [(r.replayed, r.original_request_id) for r in server.requests] == [
        (False, None),
        (True, h1.headers["Request-Id"]),
    ]


def test_same_key_other_params_is_an_idempotency_error(
    server: StripeServer, client: ClientFactory
) -> None:
    sdk = client()
    sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-2"})
    with pytest.raises(stripe.IdempotencyError) as err:
        sdk.v1.charges.create(params={**CHARGE, "amount": 2500}, options={"idempotency_key": "k-2"})
    assert err.value.http_status == 400
    assert "same parameters they were first used with" in str(err.value)
    assert len(charges_in(server)) == 1


def test_key_older_than_24h_is_pruned_and_reuse_charges_again(
    server: StripeServer, client: ClientFactory
) -> None:
    sdk = client()
    with time_machine.travel(datetime(2026, 3, 1, tzinfo=UTC), tick=False) as traveller:
        sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-old"})
        traveller.shift(timedelta(hours=23))
        sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-old"})
        assert len(charges_in(server)) == 1
        traveller.shift(timedelta(hours=2))
        sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-old"})
    assert len(charges_in(server)) == 2
    assert [r.replayed for r in server.requests] == [False, True, False]


def test_sdk_retry_after_reset_after_commit_is_replayed_by_the_provider(
    server: StripeServer, client: ClientFactory
) -> None:
    server.add_fault(Fault(kind="reset_after_commit", method="POST", path="/v1/payment_intents"))
    sdk = client(retries=2)
    intent = sdk.v1.payment_intents.create(
        params={"amount": 900, "currency": "usd", "confirm": True, "payment_method": "pm_card_visa"}
    )
    assert intent.status == "succeeded"
    assert len(charges_in(server)) == 1
    first, retry = server.requests
    assert first.outcome == "reset_after_commit" and first.status == 200
    assert first.idempotency_key == retry.idempotency_key is not None
    assert retry.replayed and retry.original_request_id == first.request_id
    assert {e["request"]["id"] for e in server.events} == {first.request_id}


def test_caller_recall_without_sdk_retries_makes_two_charges(
    server: StripeServer, client: ClientFactory
) -> None:
    server.add_fault(Fault(kind="reset_after_commit", path="/v1/charges"))
    sdk = client(retries=0)
    with pytest.raises(stripe.APIConnectionError):
        sdk.v1.charges.create(params=CHARGE)
    sdk.v1.charges.create(params=CHARGE)  # the caller "tries again": a new call, a new key

    assert len(charges_in(server)) == 2
    keys = [r.idempotency_key for r in server.requests]
    assert len(set(keys)) == 2 and None not in keys
    assert not any(r.replayed for r in server.requests)


def test_delay_after_commit_times_the_client_out_but_the_charge_exists(
    server: StripeServer,
) -> None:
    server.add_fault(Fault(kind="delay_after_commit", path="/v1/charges", seconds=3.0))
    sdk = make_client(server.url, http_client=stripe.RequestsClient(timeout=0.3))
    with pytest.raises(stripe.APIConnectionError) as err:
        sdk.v1.charges.create(params=CHARGE)
    assert "Timeout" in str(err.value)
    assert len(charges_in(server)) == 1
    assert server.requests[0].outcome == "delay_after_commit"
    assert server.requests[0].status == 200


def test_500_before_commit_is_retried_by_the_sdk_and_not_stored_under_the_key(
    server: StripeServer, client: ClientFactory
) -> None:
    server.add_fault(Fault(kind="status_500", path="/v1/charges"))
    charge = client(retries=1).v1.charges.create(params=CHARGE)
    assert [r.status for r in server.requests] == [500, 200]
    assert server.requests[1].replayed is False
    assert list(server.charges) == [charge.id]


def test_429_is_not_retried_unless_stripe_should_retry_says_so(
    server: StripeServer, client: ClientFactory
) -> None:
    server.add_fault(Fault(kind="status_429", path="/v1/charges", retry_after=1))
    sdk = client(retries=2)
    with pytest.raises(stripe.RateLimitError) as err:
        sdk.v1.charges.create(params=CHARGE)
    assert err.value.headers is not None and err.value.headers["Retry-After"] == "1"
    assert [r.status for r in server.requests] == [429]

    server.add_fault(Fault(kind="status_429", path="/v1/charges", should_retry=True))
    sdk.v1.charges.create(params=CHARGE)
    assert [r.status for r in server.requests] == [429, 429, 200]
    assert len(charges_in(server)) == 1


def test_wrong_key_is_401_with_the_key_masked(server: StripeServer) -> None:
    wrong = "sk_test_51Hsecretsecretsecret9xYz"
    with pytest.raises(stripe.AuthenticationError) as err:
        make_client(server.url, key=wrong).v1.charges.create(params=CHARGE)
    assert err.value.http_status == 401
    assert err.value.user_message == "Invalid API Key provided: sk_test_" + "*" * 21 + "9xYz"
    assert wrong not in json.dumps([r.headers for r in server.requests])
    assert not server.charges


def test_read_only_key_can_list_events_but_not_charge(
    server: StripeServer, client: ClientFactory
) -> None:
    client().v1.charges.create(params=CHARGE)
    read_only = client(key=READ_ONLY_KEY)
    with pytest.raises(stripe.PermissionError) as err:
        read_only.v1.charges.create(params=CHARGE)
    assert err.value.http_status == 403
    assert "does not have the required permissions" in str(err.value)
    assert len(read_only.v1.events.list().data) == 1
    # curl-style basic auth (key as user name) works too.
    basic = requests.get(f"{server.url}/v1/events", auth=(KEY, ""), timeout=5)
    assert basic.status_code == 200 and basic.headers["Request-Id"].startswith("req_")


@pytest.mark.parametrize("amount", [None, 0, -5])
def test_missing_or_non_positive_amount_is_400_on_amount(
    server: StripeServer, client: ClientFactory, amount: int | None
) -> None:
    params: ChargeCreateParams = {"currency": "usd"}
    if amount is not None:
        params["amount"] = amount
    with pytest.raises(stripe.InvalidRequestError) as err:
        client().v1.charges.create(params=params)
    assert err.value.http_status == 400 and err.value.param == "amount"
    assert not server.charges and not server.events


def test_declined_card_and_refund_record_their_events(
    server: StripeServer, client: ClientFactory
) -> None:
    sdk = client()
    with pytest.raises(stripe.CardError) as err:
        sdk.v1.payment_intents.create(
            params={
                "amount": 700,
                "currency": "usd",
                "confirm": True,
                "payment_method": "pm_card_chargeDeclined",
            }
        )
    assert err.value.code == "card_declined" and err.value.http_status == 402
    charge = sdk.v1.charges.create(params=CHARGE)
    refund = sdk.v1.refunds.create(params={"charge": charge.id, "amount": 500})
    assert refund.id.startswith("re_3P") and refund.amount == 500
    assert sdk.v1.charges.retrieve(charge.id).amount_refunded == 500
    assert [e["type"] for e in server.events] == [
        "payment_intent.created",
        "charge.failed",
        "payment_intent.payment_failed",
        "charge.succeeded",
        "charge.refunded",
        "refund.created",
    ]


def test_reset_before_commit_leaves_nothing_and_the_retry_charges_once(
    server: StripeServer, client: ClientFactory
) -> None:
    server.add_fault(Fault(kind="reset_before_commit", path="/v1/charges"))
    client(retries=1).v1.charges.create(params=CHARGE)
    assert len(charges_in(server)) == 1
    assert [(r.status, r.logged, r.replayed) for r in server.requests] == [
        (0, False, False),
        (200, True, False),
    ]


def test_writers_produce_the_documented_shapes(
    server: StripeServer, client: ClientFactory, tmp_path: Path
) -> None:
    sdk = client()
    sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-w"})
    sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-w"})
    with pytest.raises(stripe.CardError):
        sdk.v1.charges.create(params={**CHARGE, "source": "tok_chargeDeclined"})

    events_path = server.write_events(tmp_path / "events.json")
    listed = requests.get(
        f"{server.url}/v1/events?limit=100", headers={"Authorization": f"Bearer {KEY}"}, timeout=5
    ).json()
    assert json.loads(events_path.read_text()) == listed
    assert listed["url"] == "/v1/events" and listed["has_more"] is False
    assert [e["type"] for e in listed["data"]] == ["charge.failed", "charge.succeeded"]

    tail = [json.loads(line) for line in server.write_logs_tail(tmp_path / "tail.jsonl").open()]
    assert list(tail[0]) == ["created_at", "livemode", "method", "request_id", "status", "url"]
    assert [(t["method"], t["url"], t["status"]) for t in tail[:3]] == [
        ("POST", "/v1/charges", 200),
        ("POST", "/v1/charges", 200),
        ("POST", "/v1/charges", 402),
    ]
    declined = server.events[-1]["data"]["object"]["id"]
    assert tail[2]["error"] == {
        "type": "card_error",
        "charge": declined,
        "code": "card_declined",
        "decline_code": "generic_decline",
        "message": "Your card was declined.",
        "param": "",
    }
    assert [t["request_id"] for t in tail] == [r.request_id for r in server.requests]

    with (server.write_request_log(tmp_path / "requests.csv")).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == [
        "request_id",
        "created",
        "method",
        "path",
        "idempotency_key",
        "status",
        "body",
        "replayed",
    ]
    assert [(r["idempotency_key"], r["replayed"]) for r in rows[:2]] == [
        ("k-w", "false"),
        ("k-w", "true"),
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", rows[0]["created"])
    assert "metadata[thread_id]=t-1" in requests.utils.unquote(rows[0]["body"])


def test_clock_offset_seed_and_preset_customers() -> None:
    def run(seed: int) -> tuple[list[str], StripeServer]:
        with StripeServer(seed=seed, clock_offset=-7.0, customers=["cus_alice"]) as srv:
            sdk = make_client(srv.url)
            charge = sdk.v1.charges.create(
                params={**CHARGE, "customer": "cus_alice"}, options={"idempotency_key": "k"}
            )
            return [charge.id, srv.requests[0].request_id, srv.events[0]["id"]], srv

    with time_machine.travel(datetime(2026, 3, 1, 12, 0, 10, tzinfo=UTC), tick=False):
        ids_a, srv = run(seed=3)
        ids_b, _ = run(seed=3)
        ids_c, _ = run(seed=4)
    assert ids_a == ids_b != ids_c
    virtual_now = datetime(2026, 3, 1, 12, 0, 10, tzinfo=UTC).timestamp()
    assert srv.requests[0].created == virtual_now - 7.0
    assert srv.events[0]["created"] == int(virtual_now - 7.0)
    assert srv.events[0]["data"]["object"]["customer"] == "cus_alice"
    assert "cus_alice" in srv.customers


def test_mask_key_keeps_prefix_and_last_four() -> None:
    assert mask_key("sk_test_abcdefgh1234") == "sk_test_********1234"
    assert mask_key("rk_live_xy") == "rk_live_**"


def test_stopped_server_stops_answering_kept_alive_connections() -> None:
    server = StripeServer().start()
    session = requests.Session()
    assert session.get(f"{server.url}/v1/events", auth=(KEY, ""), timeout=5).status_code == 200
    url = server.url
    server.stop()
    with pytest.raises(requests.ConnectionError):
        session.get(f"{url}/v1/events", auth=(KEY, ""), timeout=2)


def test_exports_and_lists_are_in_created_order_after_the_clock_moves_backwards(
    server: StripeServer, client: ClientFactory, tmp_path: Path
) -> None:
    """Runs that overlap in virtual time (the clock moved back between them) interleave."""
    sdk = client()
    noon = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    t0 = int(noon.timestamp())
    with time_machine.travel(noon, tick=False) as traveller:
        sdk.v1.charges.create(params={"amount": 101, "currency": "usd"})  # run A, 12:00:00
        sdk.v1.charges.create(params={"amount": 102, "currency": "usd"})  # same second
        traveller.move_to(noon - timedelta(hours=1))
        sdk.v1.charges.create(params={"amount": 201, "currency": "usd"})  # run B, 11:00:00
        traveller.move_to(noon - timedelta(minutes=30))
        sdk.v1.payment_intents.create(  # run C, 11:30:00: three events in one second
            params={"amount": 301, "currency": "usd", "confirm": True,
                    "payment_method": "pm_card_visa"}
        )
        traveller.move_to(noon + timedelta(seconds=1))
        sdk.v1.charges.create(params={"amount": 401, "currency": "usd"})  # run A again

    listing = json.loads(server.write_events(tmp_path / "events.json").read_text())
    order = [(e["created"] - t0, e["type"], e["data"]["object"]["amount"]) for e in listing["data"]]
    assert order == [
        (1, "charge.succeeded", 401),
        (0, "charge.succeeded", 102),  # one second: the later emitted first, as Stripe lists
        (0, "charge.succeeded", 101),
        (-1800, "payment_intent.succeeded", 301),
        (-1800, "charge.succeeded", 301),
        (-1800, "payment_intent.created", 301),
        (-3600, "charge.succeeded", 201),
    ]
    listed = requests.get(
        f"{server.url}/v1/events?limit=100", headers={"Authorization": f"Bearer {KEY}"}, timeout=5
    ).json()
    assert listed == listing
    paged = list(sdk.v1.events.list(params={"limit": 2}).auto_paging_iter())
    assert [e.id for e in paged] == [e["id"] for e in listing["data"]]
    assert [c.amount for c in sdk.v1.charges.list().data] == [401, 102, 101, 301, 201]

    tail = [json.loads(line) for line in server.write_logs_tail(tmp_path / "tail.jsonl").open()]
    created = [t["created_at"] - t0 for t in tail]
    assert created[:5] == [-3600, -1800, 0, 0, 1]
    assert created == sorted(created)  # the GETs above ran later, on the real clock
    assert [t["request_id"] for t in tail[2:4]] == [r.request_id for r in server.requests[:2]]
    with server.write_request_log(tmp_path / "requests.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["created"][11:23] for r in rows[:5]] == [
        "11:00:00.000", "11:30:00.000", "12:00:00.000", "12:00:00.000", "12:00:01.000"]


def test_request_log_in_whole_seconds_truncates_like_a_dashboard(
    server: StripeServer, client: ClientFactory, tmp_path: Path
) -> None:
    with time_machine.travel(datetime(2026, 3, 1, 12, 0, 5, 987000, tzinfo=UTC), tick=False):
        client().v1.charges.create(params=CHARGE)
    with server.write_request_log(tmp_path / "s.csv", precision="s").open(newline="") as fh:
        seconds = list(csv.DictReader(fh))
    with server.write_request_log(tmp_path / "ms.csv").open(newline="") as fh:
        millis = list(csv.DictReader(fh))
    assert seconds[0]["created"] == "2026-03-01T12:00:05Z"
    assert millis[0]["created"] == "2026-03-01T12:00:05.987Z"
    assert {k: v for k, v in seconds[0].items() if k != "created"} == {
        k: v for k, v in millis[0].items() if k != "created"
    }
    with pytest.raises(ValueError):
        server.write_request_log(tmp_path / "x.csv", precision="us")  # type: ignore[arg-type]


def test_idempotency_keys_survive_the_clock_moving_backwards(
    server: StripeServer, client: ClientFactory
) -> None:
    sdk = client()
    noon = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with time_machine.travel(noon, tick=False) as traveller:
        first = sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-later"})
        traveller.move_to(noon - timedelta(hours=5))  # a run that starts "earlier"
        again = sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-later"})
        assert again.id == first.id and server.requests[-1].replayed
        traveller.move_to(noon + timedelta(hours=23, minutes=59))
        sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-later"})
        assert server.requests[-1].replayed  # still inside 24 h of its first use
        traveller.move_to(noon + timedelta(hours=24, seconds=1))
        fresh = sdk.v1.charges.create(params=CHARGE, options={"idempotency_key": "k-later"})
    assert fresh.id != first.id and not server.requests[-1].replayed
    assert len(server.charges) == 2
