"""The engine on evidence shaped like production's, each made by the real libraries: the lab
Stripe server's real event sets driven by the real stripe SDK, real LangGraph runs traced by the
real OpenInference and `requests` instrumentations (or not traced), skewed clocks.

One test per point of what production evidence looks like (issue 11): Stripe's object graph,
clocks estimated from the evidence as a whole, content that must agree, the real
instrumentation, honesty where the evidence cannot separate two layers.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import stripe
from langgraph.types import RetryPolicy

from twice.attempts import provider_attempts
from twice.cli.lab import analyze_folder
from twice.lab.agent import API_KEY, ToolOptions
from twice.lab.clock import VirtualClock
from twice.lab.incident import compact
from twice.lab.jaeger_export import write_jaeger
from twice.lab.lab_run import Bench, bench
from twice.lab.scenario_kit import EFFECT_PATH, REAL_TIMEOUT, SLOW_ANSWER
from twice.lab.stripe_server import Fault, StripeServer
from twice.lab.stripe_wire import API_VERSION, LEGACY_API_VERSION

START = dt.datetime(2025, 5, 6, 9, 30, tzinfo=dt.UTC)


def _charge(b: Bench, customer: str, amount: int) -> str:
    return f"Please charge {customer} {amount} usd for subscription {b.subscription()}."


def _export(b: Bench, out: Path) -> None:
    """What an on-call engineer exports: GET /v1/events (whole seconds, the provider's clock)."""
    b.server.write_events(out / "events.json")


def _finish(out: Path) -> None:
    compact(out / "checkpoints.sqlite")


def _groups(report: dict[str, Any], customer: str | None = None) -> list[dict[str, Any]]:
    return [g for g in report["groups"]
            if customer is None or any(a["subject"] == customer for a in g["attempts"])]


# ---------------------------------------------------------------------------- Stripe's graph


@pytest.mark.parametrize("version", [LEGACY_API_VERSION, API_VERSION])
def test_one_payment_per_request_and_the_providers_own_flows_apart(tmp_path: Path,
                                                                   version: str) -> None:
    """A confirmed PaymentIntent (three events, one request), a renewal of the same customer's
    subscription for the same amount (automatic: request.id null), dashboard edits, a refund,
    and another customer's same-amount charge in the same second: one attempt per payment the
    API made, nothing paired."""
    with VirtualClock(START) as clock, StripeServer(seed=5, api_version=version) as server:
        for customer in ("cus_Agent", "cus_Other"):
            server.add_customer(customer)
        client = stripe.StripeClient(API_KEY, base_addresses={"api": server.url})
        intent = client.v1.payment_intents.create({
            "amount": 2900, "currency": "usd", "customer": "cus_Agent", "confirm": True,
            "payment_method": "pm_card_visa"})
        other = client.v1.payment_intents.create({
            "amount": 2900, "currency": "usd", "customer": "cus_Other", "confirm": True,
            "payment_method": "pm_card_visa"})
        clock.advance(20)
        made = server.renew(server.add_subscription("cus_Agent", 2900), finalize_after=0)
        clock.advance(40)
        client.v1.customers.update("cus_Agent", {"metadata": {"note": "vip"}})
        client.v1.invoices.send_invoice(made["invoice"])
        clock.advance(60)
        client.v1.refunds.create({"payment_intent": intent.id})
        server.write_events(tmp_path / "events.json")
        events = json.loads((tmp_path / "events.json").read_text())["data"]

    from twice.connectors.provider import stripe_events

    rows = stripe_events.load(tmp_path / "events.json").rows
    attempts = provider_attempts(rows).set_index("object_id")
    assert intent.id in attempts.index and other.id in attempts.index
    assert made["payment_intent"] not in attempts.index and made["invoice"] not in attempts.index
    refunds = attempts[attempts["object_type"] == "refund"]
    assert len(refunds) == 1 and refunds.iloc[0]["subject"] == "cus_Agent"
    assert len(attempts) == 3  # the two charges and the refund: no edit, no renewal
    assert len({e["type"] for e in events}) >= 10  # the real event sets were exported
    report, _, _ = analyze_folder(tmp_path)
    assert report["groups"] == []


def test_events_without_request_fields_count_every_payment_object(tmp_path: Path) -> None:
    """Some Stripe-compatible servers send no `request`: two PaymentIntents of one customer and
    amount created in the same second are two attempts; creating the customer is none."""
    with VirtualClock(START), StripeServer(seed=6) as server:
        client = stripe.StripeClient(API_KEY, base_addresses={"api": server.url})
        customer = client.v1.customers.create({"email": "a@example.com"})
        ids = [client.v1.payment_intents.create({
            "amount": 900, "currency": "usd", "customer": customer.id, "confirm": True,
            "payment_method": "pm_card_visa"}).id for _ in range(2)]
        server.write_events(tmp_path / "events.json")
    listing = json.loads((tmp_path / "events.json").read_text())
    for e in listing["data"]:
        del e["request"]
    (tmp_path / "events.json").write_text(json.dumps(listing))
    report, _, _ = analyze_folder(tmp_path)
    (group,) = report["groups"]
    assert sorted(a["object_id"] for a in group["attempts"]) == sorted(ids)
    assert {a["attempt_id"] for a in group["attempts"]} == {f"obj:{i}" for i in ids}


# ---------------------------------------------------------------------------- clocks, content


def _busy_morning(b: Bench, instrumentation: str, offsets: dict[str, float],
                  customers: list[str], same_amount_after: float | None = None) -> None:
    """Threads of several customers on two workers with skewed span clocks, run at
    overlapping times (each thread's whole run at its own start)."""
    workers = [b.worker(name, ToolOptions(client="stripe"), instrumentation=instrumentation,
                        span_clock_offset=offset)  # type: ignore[arg-type]
               for name, offset in offsets.items()]
    start = b.clock.now()
    for i, customer in enumerate(customers):
        b.server.add_customer(customer)
        b.travel_to(start + dt.timedelta(seconds=7.3 * i))
        workers[i % len(workers)].run(b.new_thread(), _charge(b, customer, 1500 + 100 * (i % 4)))
    if same_amount_after is not None:  # another customer, the same amount, seconds after
        b.travel_to(start + dt.timedelta(seconds=same_amount_after))
        b.server.add_customer("cus_Neighbour")
        workers[1].run(b.new_thread(), _charge(b, "cus_Neighbour", 1500))


def test_clocks_are_estimated_from_the_evidence_as_a_whole(tmp_path: Path) -> None:
    """The provider's clock 5 s behind, two span hosts 1.2 s apart, spans without request ids
    (OpenInference + requests at their defaults): the offsets come from the requests falling in
    the spans that asked for the same effect, with how many records support each."""
    offsets = {"worker-a": 0.8, "worker-b": -0.4}
    with bench(tmp_path, seed=11, start=START, clock_offset=-5.0) as b:
        _busy_morning(b, "openinference", offsets, [f"cus_C{i:02d}" for i in range(12)])
        _export(b, tmp_path)
    _finish(tmp_path)
    report, _, _ = analyze_folder(tmp_path)
    found = {o["source"]: o for o in report["clock_offsets"]}
    provider = found["provider"]
    host = provider["reference"].removeprefix("spans of ")
    other = next(h for h in offsets if h != host)
    assert abs(provider["seconds"] - (-5.0 - offsets[host])) < 0.5, provider
    assert provider["pairs"] >= 5 and not provider["thin"]
    skew = found[f"spans of {other}"]
    assert abs(skew["seconds"] - (offsets[other] - offsets[host])) < 0.5, skew
    assert report["groups"] == []


def test_a_thin_offset_is_flagged(tmp_path: Path) -> None:
    with bench(tmp_path, seed=12, start=START, clock_offset=3.0) as b:
        _busy_morning(b, "openinference", {"worker-a": 0.0, "worker-b": 0.0}, ["cus_T1"])
        _export(b, tmp_path)
    _finish(tmp_path)
    report, _, _ = analyze_folder(tmp_path)
    provider = next(o for o in report["clock_offsets"] if o["source"] == "provider")
    assert provider["thin"] and provider["pairs"] < 3


@pytest.mark.parametrize("instrumentation", ["lab", "openinference", "none"])
def test_another_customers_same_amount_seconds_later_is_never_linked(
        tmp_path: Path, instrumentation: str) -> None:
    """Another customer charged the same amount 2 s after a charge, by another thread, and a
    renewal of the first customer inside the busy minute: no duplicate, and every request is
    linked to its own thread's tool call."""
    with bench(tmp_path, seed=13, start=START, clock_offset=4.2) as b:
        _busy_morning(b, instrumentation, {"worker-a": 0.3, "worker-b": -0.3},
                      [f"cus_S{i:02d}" for i in range(6)], same_amount_after=2.0)
        b.travel_to(START + dt.timedelta(seconds=20))
        b.server.renew(b.server.add_subscription("cus_S00", 1500), finalize_after=0)
        b.travel_to(START + dt.timedelta(seconds=90))
        _export(b, tmp_path)
    _finish(tmp_path)
    report, _, _ = analyze_folder(tmp_path)
    assert report["groups"] == []


# ---------------------------------------------------------------------------- instrumentation


def _step_retry(tmp_path: Path, instrumentation: str, seed: int = 21) -> Path:
    """LangGraph's RetryPolicy re-runs the tool after a 30 s client timeout; the SDK makes a new
    random key: two charges. The rest of the morning goes on around it."""
    tool = ToolOptions(client="stripe", on_timeout="raise", timeout=REAL_TIMEOUT,
                       nominal_timeout=30.0)
    with bench(tmp_path, seed=seed, start=START, clock_offset=-2.5) as b:
        _busy_morning(b, instrumentation, {"worker-a": 0.5, "worker-b": -0.5},
                      [f"cus_R{i:02d}" for i in range(6)])
        worker = b.worker("worker-c", tool, retry_policy=RetryPolicy(max_attempts=3),
                          instrumentation=instrumentation)  # type: ignore[arg-type]
        b.server.add_customer("cus_Incident")
        b.server.add_fault(Fault(kind="delay_after_commit", path=EFFECT_PATH,
                                 seconds=SLOW_ANSWER))
        worker.run(b.new_thread(), _charge(b, "cus_Incident", 2900))
        _export(b, tmp_path)
    _finish(tmp_path)
    return tmp_path


def _incident(report: dict[str, Any]) -> dict[str, Any]:
    (group,) = _groups(report, "cus_Incident")
    assert _groups(report) == [group]  # nothing else reported
    return group


@pytest.mark.parametrize("instrumentation", ["openinference", "lab"])
def test_real_instrumentation_gives_the_layer(tmp_path: Path, instrumentation: str) -> None:
    report, _, _ = analyze_folder(_step_retry(tmp_path, instrumentation))
    (dup,) = _incident(report)["duplicates"]
    assert dup["layer"] == "step_retry"
    assert dup["alternatives"] == []


def test_jaeger_json_gives_the_verdict_otlp_gives(tmp_path: Path) -> None:
    folder = _step_retry(tmp_path / "otlp", "openinference")
    report, _, _ = analyze_folder(folder)
    jaeger = tmp_path / "jaeger"
    jaeger.mkdir()
    for name in ("events.json", "checkpoints.sqlite"):
        (jaeger / name).write_bytes((folder / name).read_bytes())
    write_jaeger(folder / "spans.jsonl", jaeger / "traces.json")
    again, _, _ = analyze_folder(jaeger)
    first, second = _incident(report)["duplicates"][0], _incident(again)["duplicates"][0]
    assert (first["layer"], first["first"], first["second"]) == \
        (second["layer"], second["first"], second["second"])


def test_without_spans_the_checkpoints_and_keys_still_tell(tmp_path: Path) -> None:
    report, _, _ = analyze_folder(_step_retry(tmp_path, "none"))
    (dup,) = _incident(report)["duplicates"]
    assert dup["layer"] == "step_retry"  # one tool call id, a new key on the re-run
    assert {f["code"] for f in _incident(report)["findings"]} >= {"key_regenerated"}


# ---------------------------------------------------------------------------- honesty


def _raw_resend(tmp_path: Path, instrumentation: str) -> Path:
    """urllib3 resends the POST after the provider committed and reset the connection; no key."""
    tool = ToolOptions(client="raw", post_retries=2, timeout=10.0)
    with bench(tmp_path, seed=31, start=START, clock_offset=1.5) as b:
        _busy_morning(b, instrumentation, {"worker-a": 0.0, "worker-b": 0.2},
                      [f"cus_H{i:02d}" for i in range(6)])
        worker = b.worker("worker-c", tool, instrumentation=instrumentation)  # type: ignore[arg-type]
        b.server.add_customer("cus_Incident")
        b.server.add_fault(Fault(kind="reset_after_commit", path=EFFECT_PATH))
        worker.run(b.new_thread(), _charge(b, "cus_Incident", 4900))
        _export(b, tmp_path)
    _finish(tmp_path)
    return tmp_path


Check = Callable[[dict[str, Any]], None]


def test_without_spans_an_http_client_retry_and_a_proxy_resend_are_both_named(
        tmp_path: Path) -> None:
    report, _, _ = analyze_folder(_raw_resend(tmp_path, "none"))
    (dup,) = _incident(report)["duplicates"]
    named = {dup["layer"], *(a["layer"] for a in dup["alternatives"])}
    assert named == {"sdk_retry", "gateway_retry"}
    assert dup["confidence"] <= 0.6


def test_the_lab_spans_resend_count_settles_it(tmp_path: Path) -> None:
    report, _, _ = analyze_folder(_raw_resend(tmp_path, "lab"))
    (dup,) = _incident(report)["duplicates"]
    assert dup["layer"] == "sdk_retry" and dup["alternatives"] == []
    assert dup["confidence"] >= 0.9
