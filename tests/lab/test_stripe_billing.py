"""Subscriptions, invoices, renewals, refunds and customer edits of the lab Stripe account.

Real stripe-python over loopback HTTP; time frozen with time-machine (no sleeps), so every
`created` is exact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
import stripe
import time_machine

from tests.lab.conftest import KEY, make_client
from twice.lab.clock import VirtualClock
from twice.lab.stripe_server import StripeServer
from twice.lab.stripe_wire import API_VERSION, LEGACY_API_VERSION, version_at_least

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW = int(T0.timestamp())
AUTOMATIC = {"id": None, "idempotency_key": None}

RENEWAL_AT_BOUNDARY = ["invoice.created", "customer.subscription.updated"]
FINALIZE = ["payment_intent.created", "invoice.updated", "invoice.finalized"]
PAID = [
    "charge.succeeded",
    "payment_intent.succeeded",
    "invoice.updated",
    "invoice.paid",
    "invoice.payment_succeeded",
]
DECLINED = ["charge.failed", "payment_intent.payment_failed", "invoice.updated",
            "invoice.payment_failed"]
PRICE_DATA: Any = {"currency": "usd", "unit_amount": 1500, "product": "prod_Pro",
                   "recurring": {"interval": "month"}}


def modern(server: StripeServer) -> bool:
    return version_at_least(server.api_version, "2025-03-31")


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def objects_of(server: StripeServer, type_: str) -> list[dict[str, Any]]:
    return [e["data"]["object"] for e in server.events if e["type"] == type_]


@pytest.fixture
def frozen() -> Iterator[time_machine.Traveller]:
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


# -- renewals --------------------------------------------------------------------------------
def test_renewal_is_an_automatic_flow_with_the_documented_events_in_order(
    versioned_server: StripeServer, frozen: time_machine.Traveller
) -> None:
    server = versioned_server
    sub_id = server.add_subscription("cus_ada", 2000, plan="pro")
    assert server.events == []  # it existed before the scenario
    made = server.renew(sub_id)

    tail = ["invoice_payment.paid"] if modern(server) else []
    assert types(server.events) == RENEWAL_AT_BOUNDARY + FINALIZE + PAID + tail
    assert all(e["request"] == AUTOMATIC for e in server.events)
    assert all(e["api_version"] == server.api_version for e in server.events)
    assert server.requests == []  # no API request happened: nothing for a request log
    # Stripe finalizes a renewal draft an hour after creating it.
    assert [e["created"] for e in server.events] == [NOW] * 2 + [NOW + 3600] * (
        len(server.events) - 2
    )
    assert made["charge"] == "ch_" + made["payment_intent"].removeprefix("pi_")
    assert made["subscription"] == sub_id
    invoice = server.invoices[made["invoice"]]
    assert invoice["status"] == "paid" and invoice["billing_reason"] == "subscription_cycle"
    assert server.charges[made["charge"]]["description"] == "Payment for Invoice"
    updated = server.events[1]["data"]
    assert updated["object"]["latest_invoice"] == made["invoice"]
    if modern(server):
        assert set(updated["previous_attributes"]) == {"items", "latest_invoice"}
    else:
        assert set(updated["previous_attributes"]) == {
            "current_period_end", "current_period_start", "latest_invoice"}


def test_renewal_references_follow_the_account_api_version(
    versioned_server: StripeServer, frozen: time_machine.Traveller
) -> None:
    server = versioned_server
    made = server.renew(server.add_subscription("cus_ada", 2000), finalize_after=0)
    invoice = objects_of(server, "invoice.paid")[0]
    charge = objects_of(server, "charge.succeeded")[0]
    intent = objects_of(server, "payment_intent.succeeded")[0]
    assert charge["payment_intent"] == made["payment_intent"]  # in every version
    if modern(server):
        # basil+: the invoice names its subscription under `parent`; charge, intent and invoice
        # no longer name each other; the InvoicePayment (its own event) ties invoice and intent.
        assert invoice["parent"] == {
            "quote_details": None,
            "subscription_details": {"metadata": {}, "subscription": made["subscription"]},
            "type": "subscription_details",
        }
        for gone in ("subscription", "payment_intent", "charge", "paid", "subscription_details"):
            assert gone not in invoice
        assert "invoice" not in charge and "invoice" not in intent
        line = invoice["lines"]["data"][0]
        assert line["parent"]["subscription_item_details"]["subscription"] == made["subscription"]
        payment = objects_of(server, "invoice_payment.paid")[0]
        assert payment["id"] == made["invoice_payment"] and payment["id"].startswith("inpay_")
        assert payment["invoice"] == made["invoice"]
        assert payment["payment"] == {"payment_intent": made["payment_intent"],
                                      "type": "payment_intent"}
        assert payment["status"] == "paid" and payment["amount_paid"] == 2000
    else:
        assert invoice["subscription"] == made["subscription"]
        assert invoice["payment_intent"] == made["payment_intent"]
        assert invoice["charge"] == made["charge"] and invoice["paid"] is True
        assert "parent" not in invoice
        assert charge["invoice"] == made["invoice"] and intent["invoice"] == made["invoice"]
        assert "invoice_payment.paid" not in types(server.events)
        subscription = objects_of(server, "customer.subscription.updated")[0]
        assert subscription["current_period_start"] == NOW  # on the subscription, pre-basil


def test_declined_renewal_leaves_the_invoice_open_and_the_subscription_past_due(
    versioned_server: StripeServer, frozen: time_machine.Traveller
) -> None:
    server = versioned_server
    sub_id = server.add_subscription("cus_bob", 900)
    made = server.renew(sub_id, declined=True)

    assert types(server.events) == RENEWAL_AT_BOUNDARY + FINALIZE + DECLINED + [
        "customer.updated",
        "customer.subscription.updated",
    ]
    assert all(e["request"] == AUTOMATIC for e in server.events)
    assert server.requests == []
    assert server.invoices[made["invoice"]]["status"] == "open"
    assert server.charges[made["charge"]]["status"] == "failed"
    assert server.payment_intents[made["payment_intent"]]["status"] == "requires_payment_method"
    assert server.customers["cus_bob"]["delinquent"] is True
    last = server.events[-1]["data"]
    assert last["object"]["status"] == "past_due"
    assert last["previous_attributes"] == {"status": "active"}
    assert server.events[-2]["data"]["previous_attributes"] == {"delinquent": False}

    # The next, successful renewal clears both.
    frozen.shift(30 * 86400)
    server.renew(sub_id, finalize_after=0)
    assert types(server.events)[-2:] == ["customer.updated", "customer.subscription.updated"]
    assert server.subscriptions[sub_id]["status"] == "active"
    assert server.customers["cus_bob"]["delinquent"] is False


def test_a_dashboard_edit_during_the_draft_hour_lands_between_the_renewal_steps(
    server: StripeServer, tmp_path: Path
) -> None:
    """Under the lab's ticking VirtualClock: the export orders by `created`, not by emission."""
    with VirtualClock(T0) as clock:
        made = server.renew(server.add_subscription("cus_ada", 2000))  # emits all its steps now
        clock.advance(600)  # ten minutes into the draft hour, someone edits the customer
        make_client(server.url).v1.customers.update("cus_ada", params={"email": "a@b.example"})
    listing = server.write_events(tmp_path / "events.json").read_text()
    listed = [(e["type"], e["created"]) for e in reversed(json.loads(listing)["data"])]
    kinds = [kind for kind, _ in listed]
    assert kinds[:3] == ["invoice.created", "customer.subscription.updated", "customer.updated"]
    assert kinds[3] == "payment_intent.created"
    boundary, edit, finalized = listed[0][1], listed[2][1], listed[3][1]
    assert 600 <= edit - boundary < 660 and finalized - boundary == 3600
    edit_request = server.requests[-1]
    assert [e["request"]["id"] for e in server.events if e["type"] == "customer.updated"] == [
        edit_request.request_id
    ]
    assert made["invoice"] in server.invoices


# -- API: subscriptions, customers, invoices --------------------------------------------------
def test_creating_a_subscription_charges_its_first_invoice_in_the_request(
    versioned_server: StripeServer, frozen: time_machine.Traveller
) -> None:
    server = versioned_server
    server.add_customer("cus_ada", email="ada@example.com")
    sdk = make_client(server.url)
    sub = sdk.v1.subscriptions.create(
        params={"customer": "cus_ada", "items": [{"price_data": PRICE_DATA, "quantity": 2}],
                "metadata": {"thread_id": "t-9"}},
        options={"idempotency_key": "sub-key-1"},
    )
    response = sub.last_response
    assert response is not None
    request = {"id": response.headers["Request-Id"], "idempotency_key": "sub-key-1"}

    assert sub.status == "active" and sub.id.startswith("sub_1P")
    in_request = ["customer.subscription.created", "invoice.created", *FINALIZE, *PAID]
    if modern(server):
        assert types(server.events) == [*in_request, "invoice_payment.paid"]
        # invoice_payment.paid is automatic even after an API call (zulip's real captures).
        assert server.events[-1]["request"] == AUTOMATIC
    else:
        assert types(server.events) == in_request
    assert all(e["request"] == request for e in server.events[: len(in_request)])
    assert [(r.method, r.path) for r in server.requests] == [("POST", "/v1/subscriptions")]

    invoice = server.invoices[str(sub.latest_invoice)]
    assert invoice["billing_reason"] == "subscription_create"
    assert invoice["amount_paid"] == 3000 and invoice["status"] == "paid"
    assert invoice["customer_email"] == "ada@example.com"
    created = server.events[0]["data"]["object"]
    assert created["metadata"] == {"thread_id": "t-9"}
    assert created["latest_invoice"] == invoice["id"]
    # Lists and retrieves through the SDK.
    mine = sdk.v1.subscriptions.list(params={"customer": "cus_ada"}).data
    assert [s.id for s in mine] == [sub.id]
    assert sdk.v1.subscriptions.retrieve(sub.id).items.data[0].quantity == 2
    listed = sdk.v1.invoices.list(params={"subscription": sub.id})
    assert [i.id for i in listed.data] == [invoice["id"]]
    assert sdk.v1.invoices.retrieve(invoice["id"]).status == "paid"
    payments = sdk.v1.invoice_payments.list(params={"invoice": invoice["id"]}).data
    assert [p.status for p in payments] == ["paid"]


def test_a_declined_first_payment_answers_200_with_an_incomplete_subscription(
    versioned_server: StripeServer, frozen: time_machine.Traveller
) -> None:
    server = versioned_server
    server.add_customer("cus_ada")
    sub = make_client(server.url).v1.subscriptions.create(
        params={"customer": "cus_ada", "items": [{"price_data": PRICE_DATA}],
                "default_payment_method": "pm_card_chargeDeclined"}
    )
    assert sub.status == "incomplete"
    assert types(server.events) == [
        "customer.subscription.created", "invoice.created", *FINALIZE, *DECLINED]
    assert server.invoices[str(sub.latest_invoice)]["status"] == "open"
    assert [r.status for r in server.requests] == [200]


def test_subscription_create_replays_under_its_idempotency_key(
    server: StripeServer, frozen: time_machine.Traveller
) -> None:
    server.add_customer("cus_ada")
    sdk = make_client(server.url)
    params: Any = {"customer": "cus_ada", "items": [{"price_data": PRICE_DATA}]}
    first = sdk.v1.subscriptions.create(params=params, options={"idempotency_key": "k-sub"})
    events = len(server.events)
    second = sdk.v1.subscriptions.create(params=params, options={"idempotency_key": "k-sub"})

    assert second.id == first.id and len(server.subscriptions) == 1
    assert len(server.events) == events  # a replay emits nothing
    h1, h2 = first.last_response, second.last_response
    assert h1 is not None and h2 is not None
    assert h2.headers["Idempotent-Replayed"] == "true"
    assert h2.headers["Original-Request"] == h1.headers["Request-Id"] != h2.headers["Request-Id"]
    with pytest.raises(stripe.IdempotencyError):
        sdk.v1.subscriptions.create(
            params={**params, "metadata": {"x": "1"}}, options={"idempotency_key": "k-sub"}
        )


def test_subscription_create_takes_an_existing_price_and_names_a_missing_one(
    server: StripeServer, frozen: time_machine.Traveller
) -> None:
    sub_id = server.add_subscription("cus_ada", 4200)
    price = server.subscriptions[sub_id]["items"]["data"][0]["price"]["id"]
    sdk = make_client(server.url)
    sub = sdk.v1.subscriptions.create(params={"customer": "cus_ada", "items": [{"price": price}]})
    assert server.invoices[str(sub.latest_invoice)]["amount_paid"] == 4200
    with pytest.raises(stripe.InvalidRequestError) as err:
        sdk.v1.subscriptions.create(params={"customer": "cus_ada", "items": [{"price": "price_x"}]})
    assert err.value.http_status == 400 and err.value.param == "items[0][price]"
    with pytest.raises(stripe.InvalidRequestError) as no_customer:
        sdk.v1.subscriptions.create(params={"customer": "cus_nope", "items": [{"price": price}]})
    assert no_customer.value.code == "resource_missing"


def test_customer_update_is_a_request_with_previous_attributes(
    server: StripeServer, frozen: time_machine.Traveller
) -> None:
    server.add_customer("cus_ada", email="old@example.com", metadata={"tier": "free"})
    sdk = make_client(server.url)
    updated = sdk.v1.customers.update(
        "cus_ada",
        params={"email": "new@example.com", "metadata": {"tier": "pro", "seats": "3"}},
        options={"idempotency_key": "dash-1"},
    )
    assert updated.email == "new@example.com"
    response = updated.last_response
    assert response is not None
    [event] = server.events
    assert event["type"] == "customer.updated"
    assert event["request"] == {"id": response.headers["Request-Id"], "idempotency_key": "dash-1"}
    assert event["data"]["previous_attributes"] == {
        "email": "old@example.com",
        "metadata": {"tier": "free", "seats": None},
    }
    sdk.v1.customers.update("cus_ada", params={"email": "new@example.com"})  # no change
    sdk.v1.customers.update("cus_ada", params={"metadata": {"seats": ""}})  # unset a key
    assert types(server.events) == ["customer.updated", "customer.updated"]
    assert server.events[-1]["data"]["previous_attributes"] == {"metadata": {"seats": "3"}}
    assert server.customers["cus_ada"]["metadata"] == {"tier": "pro"}
    assert [r.path for r in server.requests] == ["/v1/customers/cus_ada"] * 3


def test_send_and_void_an_open_invoice_and_refuse_to_void_a_paid_one(
    versioned_server: StripeServer, frozen: time_machine.Traveller
) -> None:
    server = versioned_server
    declined = server.renew(server.add_subscription("cus_bob", 900), declined=True)
    paid = server.renew(server.add_subscription("cus_ada", 500), finalize_after=0)
    sdk = make_client(server.url)
    before = len(server.events)

    sent = sdk.v1.invoices.send_invoice(declined["invoice"])
    voided = sdk.v1.invoices.void_invoice(declined["invoice"], options={"idempotency_key": "v-1"})
    assert sent.status == "open" and voided.status == "void"
    new = server.events[before:]
    assert types(new) == ["invoice.sent", "payment_intent.canceled", "invoice.updated",
                          "invoice.voided"]
    request_ids = [r.request_id for r in server.requests]
    assert [e["request"]["id"] for e in new] == [request_ids[0]] + [request_ids[1]] * 3
    assert new[-1]["request"]["idempotency_key"] == "v-1"
    intent = server.payment_intents[declined["payment_intent"]]
    assert intent["status"] == "canceled" and intent["cancellation_reason"] == "void_invoice"
    assert new[2]["data"]["previous_attributes"] == {
        "status": "open", "status_transitions": {"voided_at": None}}

    for invoice_id in (paid["invoice"], declined["invoice"]):  # paid, then already void
        with pytest.raises(stripe.InvalidRequestError) as err:
            sdk.v1.invoices.void_invoice(invoice_id)
        assert err.value.http_status == 400 and "only void" in str(err.value)
    assert sdk.v1.invoices.send_invoice(paid["invoice"]).status == "paid"  # allowed by Stripe
    with pytest.raises(stripe.InvalidRequestError):
        sdk.v1.invoices.send_invoice(declined["invoice"])  # void
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        sdk.v1.invoices.void_invoice("in_nope")
    assert unknown.value.http_status == 404


# -- refunds and versions ----------------------------------------------------------------------
def test_refund_event_set_depends_on_the_api_version(
    versioned_server: StripeServer, frozen: time_machine.Traveller
) -> None:
    server = versioned_server
    sdk = make_client(server.url)
    charge = sdk.v1.charges.create(params={"amount": 2000, "currency": "usd"})
    refund = sdk.v1.refunds.create(params={"charge": charge.id, "amount": 500},
                                   options={"idempotency_key": "r-1"})
    events = server.events[1:]
    # refund.created for a charge's refund only from 2024-10-28.acacia on (Stripe changelog).
    expected = ["charge.refunded", "refund.created"] if modern(server) else ["charge.refunded"]
    assert types(events) == expected
    response = refund.last_response
    assert response is not None
    assert {e["request"]["id"] for e in events} == {response.headers["Request-Id"]}
    assert events[0]["data"]["previous_attributes"] == {"amount_refunded": 0}
    assert events[0]["data"]["object"]["amount_refunded"] == 500


def test_answers_follow_the_request_version_and_events_the_account_version(
    frozen: time_machine.Traveller,
) -> None:
    with StripeServer(api_keys={KEY: "full"}, seed=5, api_version=LEGACY_API_VERSION) as server:
        made = server.renew(server.add_subscription("cus_ada", 700), finalize_after=0)
        sdk = make_client(server.url)  # sends Stripe-Version: API_VERSION
        invoice = sdk.v1.invoices.retrieve(made["invoice"])
        assert "subscription" not in invoice and invoice.parent is not None
        assert invoice.parent.subscription_details is not None
        assert invoice.parent.subscription_details.subscription == made["subscription"]
        headers = {"Authorization": f"Bearer {KEY}"}
        legacy = requests.get(f"{server.url}/v1/invoices/{made['invoice']}",
                              headers=headers | {"Stripe-Version": LEGACY_API_VERSION}, timeout=5)
        assert legacy.json()["subscription"] == made["subscription"]
        assert "parent" not in legacy.json()
        plain = requests.get(
            f"{server.url}/v1/charges/{made['charge']}", headers=headers, timeout=5
        )
        assert plain.headers["Stripe-Version"] == LEGACY_API_VERSION  # the account's default
        assert plain.json()["invoice"] == made["invoice"]
        assert {e["api_version"] for e in server.events} == {LEGACY_API_VERSION}
    assert API_VERSION != LEGACY_API_VERSION
