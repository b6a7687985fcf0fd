"""Attempts from Stripe's real object graph: one attempt per request that moved money, the
payment's root object as its effect, automatic flows and non-payment requests left out.

The events are shaped as Stripe sends them (stripe-python 16's objects; the reference fields of
API versions before and from 2025-03-31.basil) and read by the real connector.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from twice.attempts import moves_money, payment_roots, provider_attempts
from twice.connectors.provider import request_log, stripe_events, stripe_logs
from twice.timeline import concat

T0 = 1_741_000_000


def event(n: int, type_: str, obj: dict[str, Any], request: str | None = "req_1",
          key: str | None = "key_1", at: int = T0, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": f"evt_{n}", "object": "event", "type": type_, "created": at,
                           "data": {"object": obj}, "livemode": False,
                           "request": {"id": request, "idempotency_key": key}, **extra}
    return out


def intent(pi: str, customer: str = "cus_A", amount: int = 2900, status: str = "succeeded",
           **extra: Any) -> dict[str, Any]:
    return {"id": pi, "object": "payment_intent", "amount": amount, "currency": "usd",
            "customer": customer, "status": status, "metadata": {}, **extra}


def charge(ch: str, pi: str | None, customer: str = "cus_A", amount: int = 2900,
           status: str = "succeeded", **extra: Any) -> dict[str, Any]:
    return {"id": ch, "object": "charge", "amount": amount, "currency": "usd",
            "customer": customer, "payment_intent": pi, "status": status, "metadata": {},
            **extra}


def confirmed(n: int, pi: str, req: str, at: int = T0, **kw: Any) -> list[dict[str, Any]]:
    """What `POST /v1/payment_intents` with confirm=true emits: three events, one request."""
    return [event(n, "payment_intent.created", intent(pi, status="requires_confirmation", **kw),
                  req, f"k_{req}", at),
            event(n + 1, "charge.succeeded", charge("ch" + pi[2:], pi, **kw), req, f"k_{req}",
                  at),
            event(n + 2, "payment_intent.succeeded", intent(pi, **kw), req, f"k_{req}", at)]


def renewal(n: int, sub: str, inv: str, pi: str, at: int, *, modern: bool,
            metadata: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A subscription renewal: Stripe's own flow, every event with request.id null."""
    meta = metadata or {}
    invoice: dict[str, Any] = {"id": inv, "object": "invoice", "customer": "cus_A",
                               "amount_due": 2900, "currency": "usd", "status": "paid",
                               "metadata": meta}
    pi_obj = intent(pi, metadata=meta)
    ch_obj = charge("ch" + pi[2:], pi, metadata=meta)
    if modern:
        invoice["parent"] = {"type": "subscription_details",
                             "subscription_details": {"subscription": sub}}
    else:
        invoice["subscription"] = sub
        pi_obj["invoice"] = inv
        ch_obj["invoice"] = inv
    objs = [("invoice.created", invoice), ("invoice.finalized", invoice),
            ("payment_intent.created", pi_obj), ("charge.succeeded", ch_obj),
            ("payment_intent.succeeded", pi_obj), ("invoice.paid", invoice),
            ("invoice.payment_succeeded", invoice)]
    if modern:
        objs.append(("invoice_payment.paid", {
            "id": "inpay" + inv[2:], "object": "invoice_payment", "invoice": inv,
            "payment": {"type": "payment_intent", "payment_intent": pi}}))
    return [event(n + i, t, o, None, None, at) for i, (t, o) in enumerate(objs)]


def attempts_of(events: list[dict[str, Any]], *frames: pd.DataFrame) -> pd.DataFrame:
    rows = stripe_events.parse_events(events, "events.json").rows
    return provider_attempts(concat([rows, *frames]))


def test_one_request_on_three_objects_is_one_attempt_on_the_payment_intent():
    out = attempts_of(confirmed(1, "pi_1", "req_1"))
    assert out["attempt_id"].tolist() == ["req_1"]
    assert out.loc[0, "object_id"] == "pi_1"
    assert out.loc[0, "object_type"] == "payment_intent"
    assert out.loc[0, "effect"] == "created"
    assert out.loc[0, "amount"] == 2900


def test_a_declined_card_is_a_failed_attempt():
    pi = "pi_d"
    events = [event(1, "payment_intent.created", intent(pi, status="requires_payment_method")),
              event(2, "charge.failed", charge("ch_d", pi, status="failed")),
              event(3, "payment_intent.payment_failed", intent(pi, status="requires_payment_method",
                                                               last_payment_error={"code": "x"}))]
    out = attempts_of(events)
    assert out["effect"].tolist() == ["failed"]


def test_renewals_are_no_attempts_in_either_api_shape():
    events = (renewal(10, "sub_1", "in_1", "pi_r1", T0, modern=False)
              + renewal(30, "sub_2", "in_2", "pi_r2", T0 + 1, modern=True)
              + confirmed(50, "pi_agent", "req_a", T0 + 2))
    out = attempts_of(events)
    assert out["attempt_id"].tolist() == ["req_a"]


def test_a_renewal_tied_to_the_agent_by_metadata_is_one_attempt_on_its_invoice():
    for modern in (False, True):
        events = renewal(10, "sub_1", "in_1", "pi_r1", T0, modern=modern,
                         metadata={"thread_id": "thread-9"})
        out = attempts_of(events)
        assert out["attempt_id"].tolist() == ["obj:in_1"], modern
        assert out.loc[0, "object_type"] == "invoice"
        assert out.loc[0, "thread_id"] == "thread-9"
        assert out.loc[0, "amount"] == 2900


def test_edits_and_dashboard_actions_are_no_attempts():
    customer = {"id": "cus_A", "object": "customer", "email": "a@example.com", "metadata": {}}
    invoice = {"id": "in_9", "object": "invoice", "customer": "cus_A", "amount_due": 2900,
               "currency": "usd", "status": "open", "metadata": {}}
    events = [event(1, "customer.updated", customer, "req_c", None,
                    previous_attributes={"email": "old@example.com"}),
              event(2, "invoice.sent", invoice, "req_s", None),
              event(3, "invoice.voided", {**invoice, "status": "void"}, "req_v", None),
              *confirmed(10, "pi_1", "req_1", T0 + 5)]
    out = attempts_of(events)
    assert out["attempt_id"].tolist() == ["req_1"]


def test_a_refund_is_an_attempt_of_its_own_never_of_the_charge():
    refunded = charge("ch_1", "pi_1", amount_refunded=2900, refunded=True)
    refund = {"id": "re_1", "object": "refund", "amount": 2900, "currency": "usd",
              "charge": "ch_1", "payment_intent": "pi_1", "status": "succeeded", "metadata": {}}
    events = [*confirmed(1, "pi_1", "req_1"),
              event(10, "charge.refunded", refunded, "req_r", None, T0 + 60),
              event(11, "refund.created", refund, "req_r", None, T0 + 60)]
    out = attempts_of(events).set_index("attempt_id")
    assert list(out.index) == ["req_1", "req_r"]
    assert out.loc["req_r", "object_type"] == "refund"
    assert out.loc["req_r", "object_id"] == "re_1"
    assert out.loc["req_r", "subject"] == "cus_A"  # from the refunded charge
    assert out.loc["req_1", "object_id"] == "pi_1"


def test_a_confirm_of_an_existing_payment_intent_is_part_of_its_attempt():
    events = [event(1, "payment_intent.created", intent("pi_1", status="requires_payment_method"),
                    "req_create", "k1"),
              event(2, "charge.succeeded", charge("ch_1", "pi_1"), "req_confirm", "k2", T0 + 3),
              event(3, "payment_intent.succeeded", intent("pi_1"), "req_confirm", "k2", T0 + 3)]
    out = attempts_of(events)
    assert out["attempt_id"].tolist() == ["req_create"]
    assert out.loc[0, "effect"] == "created"


def test_without_request_fields_each_payment_object_is_one_attempt():
    """Some Stripe-compatible servers leave `request` out: two PaymentIntents for one customer
    and amount in the same second are two attempts, their charges part of them, and creating a
    customer is no attempt."""
    def bare(e: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in e.items() if k != "request"}

    customer = {"id": "cus_A", "object": "customer", "metadata": {}}
    events = [bare(event(0, "customer.created", customer)),
              *map(bare, confirmed(1, "pi_1", "x")), *map(bare, confirmed(4, "pi_2", "x"))]
    out = attempts_of(events)
    assert sorted(out["attempt_id"]) == ["obj:pi_1", "obj:pi_2"]
    assert set(out["effect"]) == {"created"}


def test_a_request_log_names_attempts_by_path(tmp_path):
    log = tmp_path / "requests.csv"
    log.write_text(
        "request_id,created,method,path,idempotency_key,status,body\n"
        "req_1,2025-03-03T10:00:00Z,POST,/v1/payment_intents,k1,200,customer=cus_A&amount=900\n"
        "req_2,2025-03-03T10:00:05Z,POST,/v1/customers/cus_A,,200,email=a%40example.com\n"
        "req_3,2025-03-03T10:00:06Z,POST,/v1/invoices/in_1/send,,200,\n"
        "req_4,2025-03-03T10:00:07Z,POST,/v1/refunds,,200,charge=ch_1\n"
        "req_5,2025-03-03T10:00:08Z,GET,/v1/payment_intents/pi_1,,200,\n")
    out = provider_attempts(request_log.load(log).rows)
    assert out["attempt_id"].tolist() == ["req_1", "req_4"]


def test_which_paths_move_money():
    assert moves_money("/v1/payment_intents")
    assert moves_money("/v1/payment_intents/pi_1/confirm")
    assert moves_money("/v1/invoices/in_1/pay")
    assert moves_money("/v2/checkout/orders")  # another provider: not judged by Stripe's paths
    assert not moves_money("/v1/customers/cus_1")
    assert not moves_money("/v1/payment_intents/pi_1")  # an update
    assert not moves_money("/v1/invoices/in_1/void")


def test_a_successful_request_no_event_names_was_answered_from_the_cache(tmp_path):
    """`stripe logs tail` names two requests of one call, the events only the first: the second
    (200, inside the events' time range) made nothing, so the provider replayed it. Outside the
    range the events cover, nothing can be said."""
    logs = tmp_path / "tail.jsonl"
    lines = [{"created_at": T0, "livemode": False, "method": "POST", "request_id": "req_1",
              "status": 200, "url": "/v1/payment_intents"},
             {"created_at": T0 + 1, "livemode": False, "method": "POST", "request_id": "req_2",
              "status": 200, "url": "/v1/payment_intents"},
             {"created_at": T0 + 9000, "livemode": False, "method": "POST",
              "request_id": "req_3", "status": 200, "url": "/v1/payment_intents"}]
    logs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    events = confirmed(1, "pi_1", "req_1") + [event(9, "customer.updated", {
        "id": "cus_A", "object": "customer", "metadata": {}}, "req_x", None, T0 + 60)]
    out = attempts_of(events, stripe_logs.load(logs).rows).set_index("attempt_id")
    assert out["effect"].to_dict() == {"req_1": "created", "req_2": "replayed",
                                       "req_3": "unknown"}


def test_a_logged_request_that_is_no_attempt_changes_no_attempt_of_the_events(tmp_path):
    """Events alone are read without the merge with request logs; with a log that names one
    GET (no attempt), they go through it. Both give the same attempts, field for field: a
    payment, a confirm of it, a declined card, a refund, an edit, a renewal tied by metadata
    and one not."""
    declined = [event(20, "payment_intent.created",
                      intent("pi_d", status="requires_payment_method"), "req_d", "k_d", T0 + 20),
                event(21, "charge.failed", charge("ch_d", "pi_d", status="failed"), "req_d",
                      "k_d", T0 + 20)]
    refund = {"id": "re_1", "object": "refund", "amount": 2900, "currency": "usd",
              "charge": "ch_1", "payment_intent": "pi_1", "status": "succeeded", "metadata": {}}
    customer = {"id": "cus_A", "object": "customer", "metadata": {}}
    events = [*confirmed(1, "pi_1", "req_1", customer="cus_B", amount=900),
              event(5, "charge.succeeded", charge("ch_1b", "pi_1"), "req_confirm", "k2", T0 + 3),
              *declined,
              event(30, "refund.created", refund, "req_r", None, T0 + 60),
              event(31, "customer.updated", customer, "req_c", None, T0 + 61),
              *renewal(40, "sub_1", "in_1", "pi_r1", T0 + 70, modern=True,
                       metadata={"thread_id": "thread-9"}),
              *renewal(60, "sub_2", "in_2", "pi_r2", T0 + 80, modern=False)]
    logs = tmp_path / "tail.jsonl"
    logs.write_text(json.dumps({"created_at": T0 + 2, "livemode": False, "method": "GET",
                                "request_id": "req_get", "status": 200,
                                "url": "/v1/payment_intents/pi_1"}) + "\n")
    alone = attempts_of(events)
    assert len(alone) == 4
    pd.testing.assert_frame_equal(attempts_of(events, stripe_logs.load(logs).rows), alone,
                                  check_exact=True)


def test_payment_roots_follow_what_each_object_belongs_to() -> None:
    """The graph cases one by one, on timeline rows: a charge of a PaymentIntent of an invoice
    (two parents in one field), an invoice payment, a parent never seen as an object, an object
    whose events do not say its type, a subscription that no payment joins, a row without an
    object."""
    rows = pd.DataFrame([
        ("ch_1", "charge", "pi_1,in_1"), ("pi_1", "payment_intent", "in_1"),
        ("in_1", "invoice", "sub_1"), ("sub_1", "subscription", None),
        ("ch_2", "charge", "pi_2"),  # pi_2 has no event of its own
        ("inpay_3", "invoice_payment", "in_3,pi_3"), ("pi_3", "payment_intent", None),
        ("ch_4", "charge", "sub_1"),  # a subscription never joins a payment
        ("x_5", None, None), (None, None, None),
        ("ch_1", "charge", "pi_1,in_1"),  # a second event on an object seen before
    ], columns=["object_id", "object_type", "belongs_to"], index=range(10, 21)).astype(
        "string")
    root, root_type = payment_roots(rows)
    assert root.index.equals(rows.index)
    # the outermost member is the root: an invoice, then a PaymentIntent, then one never seen
    assert root.tolist() == ["in_1", "in_1", "in_1", "sub_1", "pi_2", "pi_3", "pi_3",
                             "ch_4", "x_5", None, "in_1"]
    assert root_type.tolist() == ["invoice", "invoice", "invoice", "subscription",
                                  "payment_intent", "payment_intent", "payment_intent",
                                  "charge", "payment_intent", None, "invoice"]
