"""Each verdict rule on its own: the facts that make it answer, the facts that make it pass, and
the layers it names beside its own when the evidence cannot rule them out."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from twice import verdict
from twice.layers import LAYERS, Band, Bands, Layer
from twice.timeline import Kind, make_timeline
from twice.verdict import RULES, Context, Pair, decide, fmt_gap, judge

T0 = pd.Timestamp("2025-03-04T10:00:00Z")


def attempt(t: float, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "attempt_id": f"req_{t}", "at": T0 + pd.Timedelta(seconds=t), "tool_call_id": None,
        "thread_id": None, "idempotency_key": None, "key_derived": False, "key_recorded": True,
        "http_span_id": None, "tool_span_id": None, "trace_id": None, "proxy_attempt": None,
        "resend_count": None, "worker": None, "effect": "created", "link": None,
    }
    return base | fields


def context(*rows: dict[str, Any]) -> Context:
    """The agent-side evidence a verdict reads (tool results, queue receives, checkpoints)."""
    timeline = make_timeline([{"source": "checkpoints", "at": T0, "kind": Kind.CHECKPOINT.value,
                               "thread_id": "th"}, *rows])
    return Context.build(timeline.assign(at_aligned=timeline["at"]), Bands())


def pair(a: dict[str, Any], b: dict[str, Any], ctx: Context | None = None) -> Pair:
    ctx = ctx or context()
    return Pair(a, b, (b["at"] - a["at"]).total_seconds(), ctx)


CALL = {"tool_call_id": "toolu_1", "thread_id": "th"}


def test_the_rules_are_small_named_functions_in_one_order() -> None:
    assert [r.__name__ for r in RULES] == [
        "model_asked_again", "proxy_stamped", "one_client_request", "client_resent",
        "one_tool_execution", "same_request_resent", "queue_redelivered",
        "one_queue_delivery", "new_run", "checkpoints_tell", "long_stop", "within_run",
        "same_call_only"]
    for rule in (*RULES, verdict.timing_only):
        assert rule.__doc__, rule.__name__


def test_model_asked_again() -> None:
    p = pair(attempt(0, tool_call_id="toolu_1", thread_id="th"),
             attempt(25, tool_call_id="toolu_2", thread_id="th"),
             context({"source": "checkpoints", "at": T0 + pd.Timedelta(seconds=20),
                      "kind": Kind.TOOL_RESULT.value, "tool_call_id": "toolu_1",
                      "outcome": "timeout", "detail": "Payment failed: timed out"}))
    call = verdict.model_asked_again(p)
    assert call is not None and call.layer is Layer.MODEL_REEMISSION
    assert call.confidence == 0.95 and "timed out" in " ".join(call.evidence)
    assert verdict.model_asked_again(pair(attempt(0, **CALL), attempt(1, **CALL))) is None


def test_proxy_stamped() -> None:
    call = verdict.proxy_stamped(pair(attempt(0), attempt(0.02, proxy_attempt=2)))
    assert call is not None and call.layer is Layer.GATEWAY_RETRY
    assert verdict.proxy_stamped(pair(attempt(0), attempt(0.02, proxy_attempt=1))) is None


def test_one_client_request_names_the_http_library_when_spans_do_not_report_resends() -> None:
    reporting = pair(attempt(0, http_span_id="s1", resend_count=0, **CALL),
                     attempt(0.01, http_span_id="s1", resend_count=0, **CALL))
    call = verdict.one_client_request(reporting)
    assert call is not None and call.layer is Layer.GATEWAY_RETRY and not call.alternatives
    silent = pair(attempt(0, http_span_id="s1", **CALL), attempt(0.01, http_span_id="s1", **CALL))
    call = verdict.one_client_request(silent)
    assert call is not None and call.layer is Layer.GATEWAY_RETRY
    assert [a.layer for a in call.alternatives] == [Layer.SDK_RETRY]
    assert verdict.one_client_request(pair(attempt(0, http_span_id="s1"),
                                           attempt(1, http_span_id="s2"))) is None


def test_client_resent() -> None:
    counted = verdict.client_resent(pair(attempt(0), attempt(0.6, resend_count=1)))
    assert counted is not None and counted.layer is Layer.SDK_RETRY and counted.confidence == 0.95
    two_http = verdict.client_resent(pair(
        attempt(0, http_span_id="h1", tool_span_id="t1"),
        attempt(0.6, http_span_id="h2", tool_span_id="t1")))
    assert two_http is not None and two_http.layer is Layer.SDK_RETRY
    assert verdict.client_resent(pair(attempt(0, http_span_id="h1", tool_span_id="t1"),
                                      attempt(30, http_span_id="h2", tool_span_id="t2"))) is None


def test_one_tool_execution_names_sdk_and_gateway() -> None:
    call = verdict.one_tool_execution(pair(attempt(0, tool_span_id="t1", **CALL),
                                           attempt(0.4, tool_span_id="t1", **CALL)))
    assert call is not None and call.layer is Layer.SDK_RETRY
    assert [a.layer for a in call.alternatives] == [Layer.GATEWAY_RETRY]
    new_key = pair(attempt(0, tool_span_id="t1", idempotency_key="k1"),
                   attempt(0.4, tool_span_id="t1", idempotency_key="k2"))
    assert verdict.one_tool_execution(new_key) is None


def test_same_request_resent() -> None:
    call = verdict.same_request_resent(pair(attempt(0, idempotency_key="k"),
                                            attempt(1.2, idempotency_key="k")))
    assert call is not None and call.layer is Layer.SDK_RETRY and call.alternatives
    derived = pair(attempt(0, idempotency_key="k", key_derived=True),
                   attempt(40, idempotency_key="k", key_derived=True))
    assert verdict.same_request_resent(derived) is None  # a derived key is re-derived above


def test_queue_redelivered() -> None:
    ctx = context({"source": "sqs", "at": T0 + pd.Timedelta(seconds=359),
                   "kind": Kind.QUEUE_RECEIVE.value, "thread_id": "th", "delivery_count": 2,
                   "worker": "worker-b"})
    call = verdict.queue_redelivered(pair(attempt(0, **CALL), attempt(360, **CALL), ctx))
    assert call is not None and call.layer is Layer.REDELIVERY and call.confidence == 0.95
    assert verdict.queue_redelivered(pair(attempt(0, **CALL), attempt(360, **CALL))) is None


def test_new_run_from_workers_or_traces() -> None:
    workers = verdict.new_run(pair(attempt(0, worker="a", **CALL),
                                   attempt(400, worker="b", **CALL)))
    assert workers is not None and workers.layer is Layer.REDELIVERY
    run = {"run_trace": True}
    traces = verdict.new_run(pair(attempt(0, trace_id="t1", tool_span_id="s1", **run, **CALL),
                                  attempt(45, trace_id="t2", tool_span_id="s2", **run, **CALL)))
    assert traces is not None and traces.layer is Layer.REDELIVERY
    assert verdict.new_run(pair(attempt(0, trace_id="t1", tool_span_id="s1", **run, **CALL),
                                attempt(45, trace_id="t1", tool_span_id="s2", **run,
                                        **CALL))) is None


def test_worker_names_made_per_execution_are_not_read_as_processes() -> None:
    spans = [{"source": "spans", "kind": Kind.TOOL_SPAN.value, "at": T0,
              "span_id": f"s{i}", "tool_call_id": f"toolu_{i}", "worker": f"pid-{i}"}
             for i in range(4)]
    a, b = attempt(0, worker="pid-0", **CALL), attempt(400, worker="pid-1", **CALL)
    assert verdict.new_run(pair(a, b, context(*spans))) is None
    shared = [dict(row, worker="worker-a") for row in spans[:3]] + [spans[3]]
    found = verdict.new_run(pair(a, b, context(*shared)))
    assert found is not None and found.layer is Layer.REDELIVERY


def test_traces_of_tool_spans_that_are_trace_roots_are_not_read_as_runs() -> None:
    roots = pair(attempt(0, trace_id="t1", tool_span_id="s1", **CALL),
                 attempt(45, trace_id="t2", tool_span_id="s2", **CALL))
    assert verdict.new_run(roots) is None
    assert roots.traces == (None, None)
    assert roots.trace_roots is not None and "cannot tell a retry from a restart" in \
        roots.trace_roots
    dup = judge(roots.a, roots.b, context())
    assert dup.layer is Layer.STEP_RETRY
    assert any("roots of their traces" in line for line in dup.evidence)


def test_long_stop_names_a_slow_step_retry_beside_it() -> None:
    call = verdict.long_stop(pair(attempt(0, **CALL), attempt(180, **CALL)))
    assert call is not None and call.layer is Layer.REDELIVERY
    assert [a.layer for a in call.alternatives] == [Layer.STEP_RETRY]
    far = verdict.long_stop(pair(attempt(0, **CALL), attempt(3600, **CALL)))
    assert far is not None and far.alternatives == ()
    one_trace = verdict.long_stop(pair(attempt(0, trace_id="t", run_trace=True, **CALL),
                                       attempt(180, trace_id="t", run_trace=True, **CALL)))
    assert one_trace is not None and one_trace.layer is Layer.STEP_RETRY
    assert verdict.long_stop(pair(attempt(0, **CALL), attempt(40, **CALL))) is None


def test_within_run() -> None:
    keys = dict(CALL)
    call = verdict.within_run(pair(attempt(0, idempotency_key="k1", **keys),
                                   attempt(31, idempotency_key="k2", **keys)))
    assert call is not None and call.layer is Layer.STEP_RETRY
    # a call id alone is no evidence that the whole tool ran again
    assert verdict.within_run(pair(attempt(0, **CALL), attempt(31, **CALL))) is None


def test_same_call_only_reads_the_gap() -> None:
    fast = verdict.same_call_only(pair(attempt(0, **CALL), attempt(0.3, **CALL)))
    assert fast is not None and fast.layer is Layer.SDK_RETRY
    assert [a.layer for a in fast.alternatives] == [Layer.GATEWAY_RETRY]
    slow = verdict.same_call_only(pair(attempt(0, **CALL), attempt(4, **CALL)))
    assert slow is not None and slow.layer is Layer.STEP_RETRY and slow.alternatives
    tens = verdict.same_call_only(pair(attempt(0, **CALL), attempt(33, **CALL)))
    assert tens is not None and tens.layer is Layer.STEP_RETRY and not tens.alternatives
    assert verdict.same_call_only(pair(attempt(0), attempt(0.3))) is None


@pytest.mark.parametrize("gap, layer", [(0.5, Layer.SDK_RETRY), (40, Layer.STEP_RETRY),
                                        (600, Layer.REDELIVERY)])
def test_timing_only_guesses_the_bands_suspect_and_names_the_others(gap: float,
                                                                    layer: Layer) -> None:
    call = decide(verdict.Pair(attempt(0), attempt(gap), gap, context()))
    assert call.layer is layer and call.confidence == 0.35
    band = Bands().classify(gap)
    assert {a.layer for a in call.alternatives} == {
        x for x in Layer if band in LAYERS[x].home} - {layer}


def test_judge_lowers_confidence_outside_the_layers_bands_and_when_nothing_links() -> None:
    dup = judge(attempt(0, idempotency_key="k1", **CALL),
                attempt(400, idempotency_key="k2", **CALL), context())
    assert dup.layer is Layer.REDELIVERY and dup.band is Band.MINUTES
    unlinked = judge(attempt(0), attempt(0.5), context())
    assert unlinked.confidence <= 0.45
    assert dup.fix == LAYERS[Layer.REDELIVERY].fix


def test_an_alternative_is_said_in_the_layers_table_s_plain_words() -> None:
    for layer in Layer:
        words = verdict.Alternative(layer, "it fits the gap too").describe()
        assert words == f"could also be: {layer.value}, {LAYERS[layer].plain} — it fits the " \
                        "gap too"


@pytest.mark.parametrize(("seconds", "text"), [
    (1.234, "1.23 s"), (45.0, "45.0 s"), (400.0, "6.7 min"), (7200.0, "2.0 h"),
    (186_480.0, "51.8 h"), (604_799.0, "168.0 h"), (604_800.0, "7.0 d"),
    (30 * 86_400 - 2880, "30.0 d")])
def test_gaps_read_in_the_unit_of_their_size(seconds: float, text: str) -> None:
    """A renewal a month later reads 30.0 d, not 719.2 h."""
    assert fmt_gap(seconds) == text
