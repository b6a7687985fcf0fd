"""The engine on timelines built row by row: each layer's fingerprints, the controls, findings."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from twice.engine import analyze
from twice.layers import Band, Bands, Layer
from twice.report import to_contract
from twice.timeline import derived_key, fingerprint, make_timeline, validate

T0 = pd.Timestamp("2024-06-03T14:20:00Z")
ARGS = {"customer_id": "cus_8123", "amount": 4900, "currency": "usd"}


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def event(t: float, req: str | None, key: str | None, obj: str, customer: str = "cus_8123",
          amount: int = 4900, kind: str = "payment_intent.created") -> dict[str, Any]:
    otype = "charge" if obj.startswith("ch_") else "payment_intent"
    return dict(at=at(t), source="stripe_events", kind="provider_event", request_id=req,
                idempotency_key=key, key_recorded=1, object_id=obj, object_type=otype,
                event_type=kind,
                subject=customer, amount=amount, currency="usd", event_id=f"evt_{obj}")


def call(t: float, tcid: str, thread: str = "th_1", args: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    a = args or ARGS
    return dict(at=at(t), source="checkpoints", kind="tool_call", thread_id=thread,
                tool_call_id=tcid, tool_name="charge_subscription",
                args_fingerprint=fingerprint(a), subject=a["customer_id"], amount=a["amount"],
                currency=a["currency"])


def result(t: float, tcid: str, outcome: str = "ok", detail: str = "",
           thread: str = "th_1") -> dict[str, Any]:
    return dict(at=at(t), source="checkpoints", kind="tool_result", thread_id=thread,
                tool_call_id=tcid, tool_name="charge_subscription", outcome=outcome,
                detail=detail)


def tool_span(t0: float, t1: float, span: str, tcid: str, worker: str = "worker-a",
              outcome: str = "ok") -> dict[str, Any]:
    return dict(at=at(t0), end=at(t1), source="spans", kind="tool_span", span_id=span,
                trace_id="t" * 32, tool_call_id=tcid, tool_name="charge_subscription",
                thread_id="th_1", subject="cus_8123", amount=4900, currency="usd",
                args_fingerprint=fingerprint(ARGS), worker=worker, outcome=outcome)


def http_span(t0: float, t1: float, span: str, parent: str | None, *, req: str | None = None,
              key: str | None = None, resend: int = 0, proxy: int | None = None,
              worker: str = "worker-a") -> dict[str, Any]:
    return dict(at=at(t0), end=at(t1), source="spans", kind="http_span", span_id=span,
                parent_span_id=parent, trace_id="t" * 32, method="POST",
                path="/v1/payment_intents", request_id=req, idempotency_key=key,
                resend_count=resend, proxy_attempt=proxy, worker=worker)


def run(rows: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    tl = make_timeline(rows)
    validate(tl)
    return to_contract(analyze(tl, **kw))


def only_duplicate(report: dict[str, Any]) -> dict[str, Any]:
    assert len(report["groups"]) == 1, report["groups"]
    dups = report["groups"][0]["duplicates"]
    assert len(dups) == 1
    return dups[0]


def codes(report: dict[str, Any]) -> set[str]:
    return {f["code"] for g in report["groups"] for f in g["findings"]}


NOISE = [event(5, "req_noise1", "kn1", "pi_noise1", customer="cus_other"),
         event(50, "req_noise2", "kn2", "pi_noise2", customer="cus_third")]


def test_step_retry_same_call_new_key_tens_of_seconds() -> None:
    rows = [call(0, "toolu_A"), event(1, "req_1", "key-1", "pi_1"),
            event(37, "req_2", "key-2", "pi_2"), result(38, "toolu_A"), *NOISE]
    report = run(rows)
    dup = only_duplicate(report)
    assert dup["layer"] == "step_retry"
    assert dup["band"] == "tens_of_seconds"
    assert 35.5 < dup["gap_seconds"] < 36.5
    assert not dup["protected"]
    assert "key_regenerated" in codes(report)
    group = report["groups"][0]
    assert group["tool_call_ids"] == ["toolu_A"]
    assert group["money_at_risk"] == {"usd": 4900}
    assert [a["request_id"] for a in group["attempts"]] == ["req_1", "req_2"]


def test_redelivery_from_queue_delivery_count_beats_timing() -> None:
    # a redelivery whose gap (40 s) looks like a step retry: the delivery count wins
    rows = [call(0, "toolu_A"), event(1, "req_1", "key-1", "pi_1"),
            dict(at=at(39), source="sqs", kind="queue_receive", thread_id="th_1",
                 delivery_count=2, message_id="m1", worker="worker-b"),
            event(41, "req_2", "key-2", "pi_2"), result(42, "toolu_A")]
    dup = only_duplicate(run(rows))
    assert dup["layer"] == "redelivery"
    assert any("delivery count 2" in e for e in dup["evidence"])
    assert any("unusual for redelivery" in e for e in dup["evidence"])
    assert dup["confidence"] < 0.95


def test_redelivery_minutes_apart_on_another_worker() -> None:
    rows = [call(0, "toolu_A"),
            dict(at=at(0), source="checkpoints", kind="checkpoint", thread_id="th_1",
                 worker="worker-a", step=1),
            event(1, "req_1", "key-1", "pi_1"), event(361, "req_2", "key-2", "pi_2"),
            dict(at=at(362), source="checkpoints", kind="checkpoint", thread_id="th_1",
                 worker="worker-b", step=2),
            result(362, "toolu_A")]
    dup = only_duplicate(run(rows))
    assert dup["layer"] == "redelivery"
    assert dup["band"] == "minutes"
    assert any("worker-a" in e and "worker-b" in e for e in dup["evidence"])


def test_model_reemission_after_reported_timeout() -> None:
    rows = [call(0, "toolu_A"), event(1, "req_1", "key-1", "pi_1"),
            result(30, "toolu_A", "timeout", "Payment failed: request timed out"),
            call(33, "toolu_B"), event(34, "req_2", "key-2", "pi_2"), result(35, "toolu_B")]
    report = run(rows)
    dup = only_duplicate(report)
    assert dup["layer"] == "model_reemission"
    assert dup["confidence"] >= 0.9
    assert "failure_reported_for_unknown_outcome" in codes(report)
    assert "unknown" in dup["fix"]
    assert sorted(report["groups"][0]["tool_call_ids"]) == ["toolu_A", "toolu_B"]


def test_control_new_turn_after_success_is_not_a_duplicate() -> None:
    rows = [call(0, "toolu_A"), event(1, "req_1", "key-1", "pi_1"), result(2, "toolu_A"),
            call(60, "toolu_B"), event(61, "req_2", "key-2", "pi_2"), result(62, "toolu_B")]
    assert run(rows)["groups"] == []


def test_control_renewal_a_month_apart_is_not_a_duplicate() -> None:
    rows = [event(0, "req_1", "key-1", "pi_1"), event(30 * 86400, "req_2", "key-2", "pi_2")]
    assert run(rows)["groups"] == []


def test_different_amounts_or_customers_are_not_grouped() -> None:
    rows = [event(0, "req_1", "key-1", "pi_1"),
            event(5, "req_2", "key-2", "pi_2", amount=5000),
            event(6, "req_3", "key-3", "pi_3", customer="cus_other")]
    assert run(rows)["groups"] == []


def test_sdk_retry_from_resend_count_and_replay() -> None:
    rows = [tool_span(0, 3, "tool1", "toolu_A"),
            http_span(0.1, 0.4, "h1", "tool1", key="key-1"),
            http_span(1.0, 1.3, "h2", "tool1", req="req_2", key="key-1", resend=1),
            dict(at=at(0), source="request_log", kind="provider_request", request_id="req_1",
                 idempotency_key="key-1", method="POST", path="/v1/payment_intents",
                 status=200, subject="cus_8123", amount=4900, currency="usd"),
            dict(at=at(1), source="request_log", kind="provider_request", request_id="req_2",
                 idempotency_key="key-1", method="POST", path="/v1/payment_intents",
                 status=200, outcome="replayed", subject="cus_8123", amount=4900,
                 currency="usd")]
    report = run(rows)
    dup = only_duplicate(report)
    assert dup["layer"] == "sdk_retry"
    assert dup["protected"] is True
    assert "replayed" in codes(report)
    assert report["groups"][0]["money_at_risk"] == {}


def test_gateway_retry_one_client_span_two_provider_requests() -> None:
    rows = [tool_span(0, 3, "tool1", "toolu_A"),
            http_span(0.1, 2.0, "h1", "tool1", req="req_2"),
            event(0, "req_1", None, "pi_1"), event(1, "req_2", None, "pi_2")]
    report = run(rows)
    dup = only_duplicate(report)
    assert dup["layer"] == "gateway_retry"
    assert "key_missing" in codes(report)


def test_gateway_retry_from_proxy_attempt_count() -> None:
    rows = [tool_span(0, 3, "tool1", "toolu_A"),
            http_span(0.1, 0.9, "h1", "tool1", req="req_1", proxy=1),
            http_span(1.0, 1.9, "h2", "tool1", req="req_2", proxy=2),
            event(0, "req_1", None, "pi_1"), event(1, "req_2", None, "pi_2")]
    assert only_duplicate(run(rows))["layer"] == "gateway_retry"


def test_span_missing_when_failed_attempt_left_no_tool_span() -> None:
    # only-on-success instrumentation: the first (failed) attempt has no tool span
    rows = [call(0, "toolu_A"), event(1, "req_1", "key-1", "pi_1"),
            tool_span(35, 37, "tool2", "toolu_A"),
            http_span(35.1, 35.5, "h2", "tool2", req="req_2", key="key-2"),
            event(35, "req_2", "key-2", "pi_2"), result(38, "toolu_A")]
    report = run(rows)
    assert only_duplicate(report)["layer"] == "step_retry"
    assert "span_missing" in codes(report)


def test_derived_key_links_request_to_tool_call_and_is_reported() -> None:
    key = derived_key("th_1", "toolu_A")
    rows = [call(0, "toolu_A", args={"customer_id": "cus_x", "amount": 1, "currency": "usd"}),
            event(1, "req_1", key, "pi_1"),
            dict(at=at(40), source="request_log", kind="provider_request", request_id="req_2",
                 idempotency_key=key, method="POST", status=200, outcome="replayed")]
    report = run(rows)
    group = report["groups"][0]
    assert group["tool_call_ids"] == ["toolu_A"]
    assert {"key_derived", "replayed"} <= codes(report)
    assert group["duplicates"][0]["protected"] is True


def test_key_expired_beyond_retention() -> None:
    rows = [call(0, "toolu_A"), event(1, "req_1", "key-1", "pi_1"),
            event(26 * 3600, "req_2", "key-1", "pi_2"), result(26 * 3600 + 1, "toolu_A")]
    report = run(rows)
    dup = only_duplicate(report)
    assert dup["band"] == "beyond_retention"
    assert "key_expired" in codes(report)


def test_clock_offset_estimated_from_client_spans_and_raw_time_kept() -> None:
    # the provider's clock runs 3 s ahead of the spans
    rows = [tool_span(0, 1, "tool1", "toolu_A"),
            http_span(0.2, 0.6, "h1", "tool1", req="req_1", key="k1"),
            event(3, "req_1", "k1", "pi_1"),
            tool_span(40, 41, "tool2", "toolu_A"),
            http_span(40.2, 40.6, "h2", "tool2", req="req_2", key="k2"),
            event(43, "req_2", "k2", "pi_2")]
    report = run(rows)
    (offset,) = report["clock_offsets"]
    assert offset["source"] == "provider"
    assert 2.5 <= offset["seconds"] <= 3.5
    first = report["groups"][0]["attempts"][0]
    assert first["at_raw"].startswith("2024-06-03T14:20:03")
    assert first["at"].startswith("2024-06-03T14:20:00.2")


def test_timing_only_guess_has_low_confidence() -> None:
    rows = [event(0, "req_1", "k1", "pi_1"), event(400, "req_2", "k2", "pi_2")]
    dup = only_duplicate(run(rows))
    assert dup["layer"] == "redelivery"
    assert dup["confidence"] < 0.5


@pytest.mark.parametrize(("gap", "band"), [(0.5, Band.SECONDS), (10, Band.TENS_OF_SECONDS),
                                           (119, Band.TENS_OF_SECONDS), (120, Band.MINUTES),
                                           (86400, Band.MINUTES),
                                           (86401, Band.BEYOND_RETENTION)])
def test_band_edges(gap: float, band: Band) -> None:
    assert Bands().classify(gap) == band


def test_every_duplicate_carries_evidence_and_fix() -> None:
    rows = [call(0, "toolu_A"), event(1, "req_1", "key-1", "pi_1"),
            event(37, "req_2", "key-2", "pi_2"), result(38, "toolu_A")]
    for dup in run(rows)["groups"][0]["duplicates"]:
        assert dup["evidence"] and dup["fix"]
        assert dup["layer"] in {layer.value for layer in Layer}


def test_without_provider_records_executions_are_counted_from_spans_and_checkpoints() -> None:
    # no provider export at hand: two tool spans of one tool call, then the model asking again
    rows = [call(0, "toolu_A"),
            tool_span(0.5, 30.5, "tool1", "toolu_A", outcome="error"),
            tool_span(31.5, 33, "tool2", "toolu_A"),
            result(33.5, "toolu_A", "timeout", "Payment failed: timed out"),
            call(36, "toolu_B"), result(40, "toolu_B")]
    report = run(rows)
    (group,) = report["groups"]
    assert [d["layer"] for d in group["duplicates"]] == ["step_retry", "model_reemission"]
    assert all(a["effect"] == "unknown" for a in group["attempts"])
    assert all(a["request_id"] is None for a in group["attempts"])


def test_a_replay_named_by_two_logs_is_replayed_whichever_log_lists_it_first() -> None:
    # `stripe logs tail` has whole seconds and no key; the request log has ms, key and the flag.
    # Both requests fall in the same logged second, and the replay's id sorts first.
    log = dict(source="stripe_logs", kind="provider_request", method="POST",
               path="/v1/payment_intents", status=200, outcome="ok")
    rows = [tool_span(0, 2, "tool1", "toolu_A"),
            http_span(0.1, 0.2, "h1", "tool1", key="k1"),
            http_span(0.9, 1.0, "h2", "tool1", req="req_0replay", key="k1", resend=1),
            event(0, "req_orig", "k1", "pi_1"),
            {**log, "at": at(0), "request_id": "req_orig"},
            {**log, "at": at(0), "request_id": "req_0replay"},
            dict(at=at(0.95), source="request_log", kind="provider_request",
                 request_id="req_0replay", idempotency_key="k1", method="POST",
                 path="/v1/payment_intents", status=200, outcome="replayed")]
    report = run(rows)
    dup = only_duplicate(report)
    assert dup["layer"] == "sdk_retry"
    assert dup["protected"] is True
    effects = {a["attempt_id"]: a["effect"] for a in report["groups"][0]["attempts"]}
    assert effects == {"req_orig": "created", "req_0replay": "replayed"}


def logged(t: float, req: str, status: int = 200) -> dict[str, Any]:
    """A `stripe logs tail` line: the request, no key, nothing of its effect."""
    return dict(at=at(t), source="stripe_logs", kind="provider_request", request_id=req,
                method="POST", path="/v1/payment_intents", status=status, key_recorded=0)


def test_a_request_nothing_describes_is_placed_only_where_one_window_holds_it() -> None:
    """A logged request with no event (a replay) inside the tool calls of two threads: timing
    alone cannot say whose it is, so it joins neither; inside one call's window only, it is
    that call's."""
    other = {"customer_id": "cus_other", "amount": 4900, "currency": "usd"}
    rows = [call(0, "toolu_A"), event(1, "req_1", "key-1", "pi_1"),
            call(2, "toolu_B", thread="th_2", args=other),
            event(3, "req_2", "key-2", "pi_2", customer="cus_other"),
            logged(4, "req_3"), result(10, "toolu_A"), result(12, "toolu_B", thread="th_2")]
    assert run(rows)["groups"] == []
    rows[-1] = result(2.5, "toolu_B", thread="th_2")  # B's call had ended before it
    (group,) = run(rows)["groups"]
    assert group["tool_call_ids"] == ["toolu_A"]
    assert [a["attempt_id"] for a in group["attempts"]] == ["req_1", "req_3"]


def test_the_key_a_client_span_saw_fills_in_for_logs_that_do_not_record_it() -> None:
    key = derived_key("th_1", "toolu_A")
    rows = [call(0, "toolu_A"), tool_span(0.1, 1, "tool1", "toolu_A"),
            http_span(0.2, 0.6, "h1", "tool1", req="req_1", key=key), logged(0.3, "req_1"),
            tool_span(30, 31, "tool2", "toolu_A"),
            http_span(30.2, 30.6, "h2", "tool2", req="req_2", key=key), logged(30.3, "req_2"),
            result(32, "toolu_A")]
    report = run(rows)
    assert "key_derived" in codes(report)
    assert {a["idempotency_key"] for a in report["groups"][0]["attempts"]} == {key}


def test_a_tool_result_with_no_outcome_is_no_failure_told() -> None:
    """A checkpointed result whose outcome is missing (NA): the finding about a failure told to
    the model reads no outcome, and the analysis does not stop on it."""
    rows = [call(0, "call_1"), event(1.0, "req_1", "k1", "pi_1"),
            event(2.0, "req_2", "k2", "pi_2"), {**result(3.0, "call_1"), "outcome": None}]
    report = run(rows)
    assert report["groups"] and "failure_reported_for_unknown_outcome" not in codes(report)


def test_a_checkpointed_call_without_its_thread_tells_no_story_of_the_thread() -> None:
    """The checkpoint row of a tool call says no thread (missing, not another): the thread's
    account of that call is not told from it, and the analysis does not stop on it."""
    ids = {"thread_id": "th_1", "tool_call_id": "call_1"}
    rows = [dict(at=at(0), source="checkpoints", kind="checkpoint", thread_id="th_1", step=1),
            {**call(0.5, "call_1"), "thread_id": None},
            {**event(1.0, "req_1", "k1", "pi_1"), **ids},
            {**event(31.0, "req_2", "k2", "pi_2"), **ids}]
    dup = only_duplicate(run(rows))
    assert dup["layer"] == "step_retry"
    assert not any("checkpoints:" in line for line in dup["evidence"])
