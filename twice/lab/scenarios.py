"""One scenario per duplicate layer (and two controls), each writing an incident folder.

`run_scenario(name, out_dir, seed=7, **options)` runs one on a virtual clock and writes
`events.json`, `request_log.csv`, `stripe_logs.jsonl`, `checkpoints.sqlite`, `spans.jsonl`,
`sqs.jsonl` (queue scenarios; `queue.jsonl` on the PostgreSQL queue), `truth.json` and
`README.md`; `twice.lab.samples.build_samples(out_dir)` writes one folder per scenario. The
scenarios where a run is picked up again (redelivery, human_pause) live in
`twice.lab.scenarios_resumed`, the helpers they all share in `twice.lab.scenario_kit`. Options
common to all: `noise` (noise runs per phase, default seeded), `dsn` (PostgresSaver instead of
SQLite, and the PostgreSQL queue), `start` (aware datetime). Scenario options: `key`
("none" | "derived": the fix for rows 1-4), `on_timeout` for model_reemission ("fail" |
"unknown": the fix), `visibility_timeout` for redelivery (seconds, default 360) and `queue`
("auto": the PostgreSQL queue when a DSN is given, else SQS | "sqs" | "postgres"); for
human_pause `effects` ("none" | "ledger": the fix past key retention) and `pause_hours`.
"""

from __future__ import annotations

import datetime as dt
import inspect
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints
from unittest.mock import patch

from langgraph.types import RetryPolicy

from twice.lab.agent import KeyMode, OnTimeout, ToolOptions
from twice.lab.gateway import Gateway
from twice.lab.incident import Story, write_incident
from twice.lab.lab_run import AMOUNTS, Bench, bench
from twice.lab.scenario_kit import (
    EFFECT_PATH,
    REAL_TIMEOUT,
    SLOW_ANSWER,
    ScenarioResult,
    ask,
    first_charge_at,
    land_run_at,
    tool_call_ids,
    truth_for,
)
from twice.lab.scenarios_resumed import human_pause, redelivery
from twice.lab.stripe_server import Fault, StripeServer
from twice.lab.truth_detail import collect_facts

__all__ = ["ALL_SCENARIOS", "SCENARIOS", "EFFECT_PATH", "MORE_CONTROLS", "OptionError",
           "ScenarioResult", "check_options", "run_scenario", "run_scenario_with_server",
           "tool_call_ids"]


# ---------------------------------------------------------------------------- 1 sdk_retry


def sdk_retry(b: Bench, key: KeyMode = "none") -> ScenarioResult:
    tool = ToolOptions(client="raw", key=key, post_retries=2, timeout=10.0)
    worker = b.worker("worker-a", tool)
    b.noise(worker)
    b.clock.advance(b.rng.uniform(3, 20))
    b.server.add_fault(Fault(kind="reset_after_commit", path=EFFECT_PATH))
    thread = b.new_thread()
    worker.run(thread, ask(b))
    b.noise(worker)
    ids = tool_call_ids(b.checkpointer, thread)
    truth = truth_for(
        b, "sdk_retry", "sdk_retry", thread, ids,
        "A raw HTTP client with urllib3 Retry(allowed_methods=None) resent the POST after the "
        "provider committed and reset the connection; no idempotency key.",
    )
    story = Story(
        "the HTTP client resent a POST without an idempotency key",
        "The tool posts to `/v1/payment_intents` through `requests` with urllib3 "
        "`Retry(total=2, allowed_methods=None)` and sends no `Idempotency-Key`. The provider "
        "created the PaymentIntent, then the connection was reset before the answer arrived; "
        "urllib3 resent the identical request at once and the provider created a second one.",
        "Duplicate, layer **sdk_retry**: two provider requests milliseconds apart with no key, "
        "both under ONE tool span as HTTP client spans with `http.request.resend_count` 0 and 1, "
        "one tool call id in the checkpoints. Fix: send an idempotency key derived from "
        "`thread_id:tool_call_id`, or stop retrying non-idempotent POSTs.",
    )
    return truth, story


def sdk_retry_replayed(b: Bench) -> ScenarioResult:
    tool = ToolOptions(client="stripe", key="none", max_network_retries=2)
    worker = b.worker("worker-a", tool)
    b.noise(worker)
    b.clock.advance(b.rng.uniform(3, 20))
    b.server.add_fault(Fault(kind="reset_after_commit", path=EFFECT_PATH))
    thread = b.new_thread()
    worker.run(thread, ask(b))
    b.noise(worker)
    ids = tool_call_ids(b.checkpointer, thread)
    truth = truth_for(
        b, "sdk_retry_replayed", "sdk_retry", thread, ids,
        "stripe-python (max_network_retries=2) retried after a reset with the same "
        "Idempotency-Key; the provider replayed the first answer: one effect.",
    )
    truth.protected = True
    story = Story(
        "the SDK retried, the provider replayed (protected)",
        "The tool uses stripe-python with `max_network_retries=2`. The provider created the "
        "PaymentIntent and the connection was reset; the SDK slept its backoff and resent the "
        "request with the SAME random `Idempotency-Key` it made for the call. The provider "
        "answered the second request from its idempotency store (`Idempotent-Replayed: true`).",
        "Two provider requests, ONE effect: an SDK retry the idempotency key absorbed. Not a "
        "duplicate charge; twice should show it as protected (same key on both rows, the second "
        "replayed), with HTTP spans `http.request.resend_count` 0 and 1 under one tool span.",
    )
    return truth, story


# ---------------------------------------------------------------------------- 2 gateway_retry


def gateway_retry(b: Bench, key: KeyMode = "none") -> ScenarioResult:
    b.model.id_style = "openai"  # `call_...` ids, as an OpenAI-backed agent writes them
    with Gateway(b.server.url, retries=2, per_try_timeout=5.0, seed=b.seed) as gateway:
        tool = ToolOptions(client="raw", key=key, post_retries=0, timeout=10.0)
        worker = b.worker("worker-a", tool, base_url=gateway.url)
        b.noise(worker)
        b.clock.advance(b.rng.uniform(3, 20))
        b.server.add_fault(Fault(kind="reset_after_commit", path=EFFECT_PATH))
        thread = b.new_thread()
        worker.run(thread, ask(b))
        b.noise(worker)
    ids = tool_call_ids(b.checkpointer, thread)
    truth = truth_for(
        b, "gateway_retry", "gateway_retry", thread, ids,
        "An Envoy-like gateway retried the POST upstream after a reset; the client sent one "
        "request (one HTTP span) without a key.",
    )
    story = Story(
        "the gateway retried upstream",
        "The tool posts once through an egress gateway (Envoy-style route, `retries=2`, "
        "`retry_on=reset,5xx`) without a client retry and without an idempotency key. The "
        "provider committed, the upstream connection was reset, and the gateway resent the "
        "request with `x-envoy-attempt-count: 2`; the client saw only the second answer.",
        "Duplicate, layer **gateway_retry**: two provider requests milliseconds apart, "
        "identical bodies and no key, but only ONE HTTP client span (resend_count 0) and one "
        "tool call id. Fix: a derived idempotency key (then the gateway's resend is replayed), "
        "or no upstream retries for non-idempotent routes. Note: the provider exports here "
        "(events, logs tail, request log CSV) do not carry `x-envoy-attempt-count`; the "
        "column in the table below comes from the lab server's own record of the headers.",
    )
    return truth, story


# ---------------------------------------------------------------------------- 3 step_retry


def step_retry(
    b: Bench,
    key: KeyMode = "none",
    timeout: float = 30.0,
    retry_initial: float = 0.5,
    retry_backoff: float = 2.0,
    retry_attempts: int = 3,
) -> ScenarioResult:
    tool = ToolOptions(
        client="stripe",
        key=key,
        on_timeout="raise",
        timeout=REAL_TIMEOUT,
        nominal_timeout=timeout,
        record_tool_errors=False,
    )
    policy = RetryPolicy(initial_interval=retry_initial, backoff_factor=retry_backoff,
                         max_attempts=retry_attempts)
    worker = b.worker("worker-a", tool, retry_policy=policy)
    b.noise(worker)
    b.clock.advance(b.rng.uniform(3, 20))
    b.server.add_fault(Fault(kind="delay_after_commit", path=EFFECT_PATH, seconds=SLOW_ANSWER))
    thread = b.new_thread()
    worker.run(thread, ask(b))
    b.noise(worker)
    ids = tool_call_ids(b.checkpointer, thread)
    truth = truth_for(
        b, "step_retry", "step_retry", thread, ids,
        f"The Stripe call timed out after {timeout:g} s although the provider had committed; "
        "LangGraph's RetryPolicy re-ran the tools node, the SDK made a new random key: two "
        "charges.",
    )
    story = Story(
        "LangGraph re-ran the tool node after a client timeout",
        f"The tool calls stripe-python with a {timeout:g} s timeout and lets the SDK make its "
        "own random `Idempotency-Key`. The provider committed the PaymentIntent but answered "
        "late; the client timed out, `APIConnectionError` left the tool, and the node's "
        "`RetryPolicy` re-ran it (same tool call id) after its backoff. The re-run built a new "
        "request with a NEW random key, so the provider created a second PaymentIntent. The "
        "tool spans are recorded by a handler that only ends spans on success: the timed-out "
        "attempt has no tool span (its HTTP span points to a parent that was never exported).",
        f"Duplicate, layer **step_retry**: two provider requests "
        f"~{timeout:g}-{timeout + retry_initial + 1.5:g} s apart (timeout plus "
        "backoff) with different keys, ONE tool call id in the checkpoints, and no checkpoint "
        "between them. Fix: derive the key from `thread_id:tool_call_id` "
        "(`sha256(...)[:32]`) so the re-run is replayed.",
    )
    return truth, story


# ---------------------------------------------------------------------------- 5 model_reemission


def model_reemission(
    b: Bench, key: KeyMode = "none", on_timeout: OnTimeout = "fail", timeout: float = 20.0
) -> ScenarioResult:
    tool = ToolOptions(
        client="stripe",
        key=key,
        on_timeout=on_timeout,
        timeout=REAL_TIMEOUT,
        nominal_timeout=timeout,
    )
    worker = b.worker("worker-a", tool)
    b.noise(worker)
    b.clock.advance(b.rng.uniform(3, 20))
    b.server.add_fault(Fault(kind="delay_after_commit", path=EFFECT_PATH, seconds=SLOW_ANSWER))
    thread = b.new_thread()
    worker.run(thread, ask(b))
    b.noise(worker)
    ids = tool_call_ids(b.checkpointer, thread)
    layer = "model_reemission" if len(ids) > 1 else "none"
    truth = truth_for(
        b, "model_reemission", layer, thread, ids,
        f"The tool reported a {timeout:g} s timeout as 'Payment failed'; the model asked again "
        "with a new tool call id and the same arguments: two charges.",
    )
    story = Story(
        "the model asked again after a reported failure",
        f"The tool calls stripe-python with a {timeout:g} s timeout. The provider committed the "
        "PaymentIntent but answered late; the tool caught the timeout and returned "
        "`Payment failed: request timed out`. The model read the failure and emitted a NEW "
        "tool call with the same arguments; the provider created a second PaymentIntent.",
        "Duplicate, layer **model_reemission**: two DIFFERENT tool call ids with the same tool "
        "and arguments, the second right after a ToolMessage reporting failure, two provider "
        f"requests ~{timeout:g}-{timeout + 5:g} s apart (timeout plus one model turn). No retry "
        "fired and no idempotency key can catch it. Fix: report a timeout on a create call as "
        '`{"status": "unknown", ...}` and give the agent a status-lookup tool.',
    )
    return truth, story


# ---------------------------------------------------------------------------- controls


def control_new_turn(b: Bench) -> ScenarioResult:
    b.model.id_style = "openai"
    worker = b.worker("worker-a", ToolOptions(client="stripe", key="none"))
    b.noise(worker)
    b.clock.advance(b.rng.uniform(3, 20))
    thread = b.new_thread()
    amount = b.rng.choice(AMOUNTS)
    worker.run(thread, ask(b, amount))
    b.clock.advance(b.rng.uniform(40, 150))  # the user reads the answer and asks again
    worker.run(
        thread,
        f"Thanks. They added a second seat: please also charge {b.customer} {amount} usd for it.",
    )
    b.noise(worker)
    truth = truth_for(
        b, "control_new_turn", "none", thread, [],
        "Two charges of the same amount in one thread, each asked for by a human message: "
        "not a duplicate.",
    )
    story = Story(
        "two charges a user asked for (control)",
        "One thread, two human turns: the first asks for the subscription charge, the second "
        "(a minute or two later) for another charge of the same amount. The model called the "
        "tool once per turn.",
        "NOT a duplicate: the two tool calls answer two different human messages. twice "
        "should not report a layer here (two tool call ids, each after its own human turn).",
    )
    return truth, story


def control_renewal(b: Bench) -> ScenarioResult:
    worker = b.worker("worker-a", ToolOptions(client="stripe", key="none"))
    subscription = b.subscription()
    amount = b.rng.choice(AMOUNTS)
    text = f"Renewal of subscription {subscription}: charge {b.customer} {amount} usd."
    b.noise(worker)
    first = b.new_thread()
    worker.run(first, text)
    b.noise(worker)
    b.clock.advance(30 * 86400 - b.rng.uniform(600, 3600))  # next month's renewal run
    b.noise(worker)
    second = b.new_thread()
    worker.run(second, text)
    b.noise(worker)
    truth = truth_for(
        b, "control_renewal", "none", second, [],
        f"The same subscription charged a month apart in two threads ({first}, {second}): "
        "two legitimate renewals.",
    )
    truth.related_threads = [first]
    story = Story(
        "the same subscription renewed a month apart (control)",
        f"Two renewal runs, 30 days apart, each in its own thread (`{first}` then "
        f"`{second}`), charge the same customer the same amount with the same arguments.",
        "NOT a duplicate: same arguments but different threads a month apart. twice should not "
        "call it a model re-emission or a redelivery.",
    )
    return truth, story


def control_same_amount(b: Bench) -> ScenarioResult:
    """Two customers charged the same amount and currency seconds apart by two threads."""
    tool = ToolOptions(client="stripe", key="none")
    worker_a = b.worker("worker-a", tool)
    worker_b = b.worker("worker-b", tool)
    b.noise(worker_a)
    b.clock.advance(b.rng.uniform(3, 20))
    amount = b.rng.choice(AMOUNTS)
    thread = b.new_thread()
    worker_a.run(thread, ask(b, amount))
    other_customer = b.rng.choice(b.noise_customers)
    other = b.new_thread()
    charged = first_charge_at(b, thread)
    land_run_at(
        b, worker_b, other,
        f"Please charge {other_customer} {amount} usd for subscription {b.subscription()} "
        "(monthly renewal).",
        charged + dt.timedelta(seconds=b.rng.uniform(1, 5)),
    )
    b.noise(worker_a)
    truth = truth_for(
        b, "control_same_amount", "none", thread, [],
        f"{b.customer} and {other_customer} were charged the same {amount} usd seconds apart by "
        "two threads on two workers: two customers, two legitimate charges.",
    )
    truth.related_threads = [other]
    story = Story(
        "two customers charged the same amount seconds apart (control)",
        f"Thread `{thread}` (worker-a) charged `{b.customer}` {amount} usd; a few seconds later "
        f"thread `{other}` (worker-b) charged another customer, `{other_customer}`, the very "
        "same amount and currency.",
        "NOT a duplicate: two customers, two threads, two tool calls. Same amount and time "
        "close together must not make twice join them.",
    )
    return truth, story


def control_two_subscriptions(b: Bench) -> ScenarioResult:
    """The same customer charged twice the same minute by two threads, two subscriptions."""
    tool = ToolOptions(client="stripe", key="none")
    worker_a = b.worker("worker-a", tool)
    worker_b = b.worker("worker-b", tool)
    b.noise(worker_a)
    b.clock.advance(b.rng.uniform(3, 20))
    first_amount, second_amount = b.rng.sample(AMOUNTS, 2)
    thread = b.new_thread()
    worker_a.run(thread, ask(b, first_amount))
    other = b.new_thread()
    charged = first_charge_at(b, thread)
    land_run_at(
        b, worker_b, other, ask(b, second_amount, "add-on subscription"),
        charged + dt.timedelta(seconds=b.rng.uniform(4, 50)),
    )
    b.noise(worker_a)
    truth = truth_for(
        b, "control_two_subscriptions", "none", thread, [],
        f"{b.customer} was charged {first_amount} usd and {second_amount} usd within a minute by "
        "two threads, for two different subscriptions: two legitimate charges.",
    )
    truth.related_threads = [other]
    story = Story(
        "one customer, two subscriptions, the same minute (control)",
        f"Thread `{thread}` charged `{b.customer}` {first_amount} usd for one subscription; "
        f"within the minute thread `{other}` charged the same customer {second_amount} usd for "
        "another (an add-on bought at the same time).",
        "NOT a duplicate: different amounts, different subscriptions, different threads.",
    )
    return truth, story


DECLINING_CARD = "pm_card_chargeDeclined"  # Stripe's test card that is always declined


def control_declined_retry(b: Bench) -> ScenarioResult:
    """A declined card, then a charge the human asked for again after updating the card."""
    b.model.id_style = "openai"
    worker = b.worker("worker-a", ToolOptions(client="stripe", key="none"))
    b.noise(worker)
    b.clock.advance(b.rng.uniform(3, 20))
    amount = b.rng.choice(AMOUNTS)
    thread = b.new_thread()
    # The customer's card on file is declined; the model reports it and does not retry by
    # itself (a decline is a known outcome, not a lost answer).
    reemit, b.model.reemit_on_failure = b.model.reemit_on_failure, False
    try:
        with patch("twice.lab.agent.PAYMENT_METHOD", DECLINING_CARD):
            worker.run(thread, ask(b, amount))
    finally:
        b.model.reemit_on_failure = reemit
    b.clock.advance(b.rng.uniform(45, 900))  # the human updates the card, then asks again
    worker.run(
        thread,
        f"I updated the card on file. Please try again: charge {b.customer} {amount} usd.",
    )
    b.noise(worker)
    truth = truth_for(
        b, "control_declined_retry", "none", thread, [],
        "The card was declined (HTTP 402, a PaymentIntent left requiring a payment method); the "
        "human updated the card and asked again: one payment, asked for twice by a human.",
    )
    story = Story(
        "a declined card, then a retry the human asked for (control)",
        f"The first charge of {amount} usd was declined by the card issuer (402 `card_declined`); "
        "the model told the user. Minutes later the user updated the card and asked again in "
        "the same thread; the second charge succeeded.",
        "NOT a duplicate: the first attempt failed at the provider (a known outcome) and the "
        "second was asked for by a new human message. One effect.",
    )
    return truth, story


# ---------------------------------------------------------------------------- running

SCENARIOS: dict[str, tuple[Callable[..., ScenarioResult], dt.datetime]] = {
    "sdk_retry": (sdk_retry, dt.datetime(2025, 3, 3, 9, 12, 4, tzinfo=dt.UTC)),
    "sdk_retry_replayed": (sdk_retry_replayed, dt.datetime(2025, 3, 3, 11, 40, 51, tzinfo=dt.UTC)),
    "gateway_retry": (gateway_retry, dt.datetime(2025, 3, 4, 8, 3, 17, tzinfo=dt.UTC)),
    "step_retry": (step_retry, dt.datetime(2025, 3, 4, 14, 2, 11, tzinfo=dt.UTC)),
    "redelivery": (redelivery, dt.datetime(2025, 3, 5, 2, 47, 39, tzinfo=dt.UTC)),
    "model_reemission": (model_reemission, dt.datetime(2025, 3, 5, 16, 21, 8, tzinfo=dt.UTC)),
    "human_pause": (human_pause, dt.datetime(2025, 3, 7, 17, 42, 30, tzinfo=dt.UTC)),
    "control_new_turn": (control_new_turn, dt.datetime(2025, 3, 6, 10, 15, 0, tzinfo=dt.UTC)),
    "control_renewal": (control_renewal, dt.datetime(2025, 2, 1, 6, 0, 5, tzinfo=dt.UTC)),
}
# Controls added with the field realism; not among the samples (sample_data/ is SCENARIOS).
MORE_CONTROLS: dict[str, tuple[Callable[..., ScenarioResult], dt.datetime]] = {
    "control_same_amount": (control_same_amount,
                            dt.datetime(2025, 3, 10, 9, 30, 12, tzinfo=dt.UTC)),
    "control_two_subscriptions": (control_two_subscriptions,
                                  dt.datetime(2025, 3, 11, 15, 4, 40, tzinfo=dt.UTC)),
    "control_declined_retry": (control_declined_retry,
                               dt.datetime(2025, 3, 12, 12, 17, 3, tzinfo=dt.UTC)),
}
ALL_SCENARIOS = {**SCENARIOS, **MORE_CONTROLS}
Realism = Literal["clean", "field"]
REALISMS = get_args(Realism)


def run_scenario(
    name: str,
    out_dir: str | Path,
    seed: int = 7,
    *,
    noise: int | None = None,
    dsn: str | None = None,
    start: dt.datetime | None = None,
    realism: Realism = "clean",
    detailed_truth: bool | None = None,
    **options: Any,
) -> Path:
    """Run one scenario and write its incident folder; returns the folder.

    `realism="field"` draws, from the seed, a variant as hard as production (`twice.lab.field`).
    `detailed_truth` (default: on in field realism) adds the incident's request ids and expected
    findings to truth.json; the clean realism's truth.json is otherwise what it always was."""
    folder, _ = run_scenario_with_server(name, out_dir, seed, noise=noise, dsn=dsn, start=start,
                                         realism=realism, detailed_truth=detailed_truth,
                                         **options)
    return folder


def run_scenario_with_server(
    name: str,
    out_dir: str | Path,
    seed: int = 7,
    *,
    noise: int | None = None,
    dsn: str | None = None,
    start: dt.datetime | None = None,
    realism: Realism = "clean",
    detailed_truth: bool | None = None,
    **options: Any,
) -> tuple[Path, StripeServer]:
    """`run_scenario`, also returning the (stopped) Stripe server with the provider's state, so a
    test can `start()` it again and query it live as an on-call engineer would."""
    if name not in ALL_SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(ALL_SCENARIOS)}")
    if realism not in REALISMS:
        raise OptionError(f"realism={realism!r} is not one of {list(REALISMS)}")
    func, default_start = ALL_SCENARIOS[name]
    out = Path(out_dir)
    if realism == "field":
        from twice.lab.field import run_field  # field realism builds on this module

        return run_field(name, func, out, seed, noise=noise, dsn=dsn, start=start,
                         options=options)
    check_options(name, func, options, dsn)
    # Each scenario gets its own ids and timings from the same user-facing seed.
    bench_seed = zlib.crc32(f"{name}:{seed}".encode())
    with bench(out, seed=bench_seed, start=start or default_start, noise=noise, dsn=dsn) as b:
        truth, story = func(b, **options)
        server = b.server
        facts = collect_facts(server, b.checkpointer, truth.threads) if detailed_truth else None
    # after the checkpointer is closed, so the SQLite file is complete and compacted
    return write_incident(out, server, truth, story, facts), server


class OptionError(ValueError):
    """A scenario option the scenario does not take, or a value it does not accept."""


def check_options(
    name: str, func: Callable[..., ScenarioResult], options: dict[str, Any], dsn: str | None
) -> None:
    """Raise OptionError, before anything runs, for an option `func` cannot use."""
    accepted = set(inspect.signature(func).parameters) - {"b"}
    unknown = set(options) - accepted
    if unknown:
        raise OptionError(f"{name} does not take {sorted(unknown)}; it takes {sorted(accepted)}")
    hints = get_type_hints(func)
    for option, value in options.items():
        allowed = get_args(hints[option]) if get_origin(hints[option]) is Literal else ()
        if allowed and value not in allowed:
            raise OptionError(f"{name}: {option}={value!r} is not one of {list(allowed)}")
    if options.get("queue") == "postgres" and not dsn:
        raise OptionError(f"{name}: queue='postgres' needs a PostgreSQL DSN (--dsn)")
