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
"unknown": the fix), `failed_spans` for step_retry (True: the failed attempt's tool span is
exported too), `visibility_timeout` for redelivery (seconds, default 360) and `queue`
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

from twice.lab.agent import KeyMode, OnTimeout, ToolOptions, Worker
from twice.lab.gateway import Gateway
from twice.lab.incident import write_incident
from twice.lab.lab_run import AMOUNTS, Bench, bench
from twice.lab.scenario_kit import (
    EFFECT_PATH,
    REAL_TIMEOUT,
    SLOW_ANSWER,
    ScenarioResult,
    ask,
    land_second_thread,
    run_incident,
    tool_call_ids,
    truth_for,
)
from twice.lab.scenarios_resumed import human_pause, redelivery
from twice.lab.stories import narrative
from twice.lab.stripe_server import Fault, StripeServer
from twice.lab.truth_detail import collect_facts

__all__ = ["ALL_SCENARIOS", "SCENARIOS", "EFFECT_PATH", "MORE_CONTROLS", "OptionError",
           "ScenarioResult", "check_options", "run_scenario", "run_scenario_with_server",
           "tool_call_ids"]


# ---------------------------------------------------------------------------- 1 sdk_retry


def sdk_retry(b: Bench, key: KeyMode = "none") -> ScenarioResult:
    tool = ToolOptions(client="raw", key=key, post_retries=2, timeout=10.0)
    worker = b.worker("worker-a", tool)
    thread, ids = run_incident(b, worker, Fault(kind="reset_after_commit", path=EFFECT_PATH))
    text, story = narrative("sdk_retry")
    truth = truth_for(b, "sdk_retry", "sdk_retry", thread, ids, text)
    return truth, story


def sdk_retry_replayed(b: Bench) -> ScenarioResult:
    tool = ToolOptions(client="stripe", key="none", max_network_retries=2)
    worker = b.worker("worker-a", tool)
    thread, ids = run_incident(b, worker, Fault(kind="reset_after_commit", path=EFFECT_PATH))
    text, story = narrative("sdk_retry_replayed")
    truth = truth_for(b, "sdk_retry_replayed", "sdk_retry", thread, ids, text)
    truth.protected = True
    return truth, story


# ---------------------------------------------------------------------------- 2 gateway_retry


def gateway_retry(b: Bench, key: KeyMode = "none") -> ScenarioResult:
    b.model.id_style = "openai"  # `call_...` ids, as an OpenAI-backed agent writes them
    with Gateway(b.server.url, retries=2, per_try_timeout=5.0, seed=b.seed) as gateway:
        tool = ToolOptions(client="raw", key=key, post_retries=0, timeout=10.0)
        worker = b.worker("worker-a", tool, base_url=gateway.url)
        thread, ids = run_incident(b, worker, Fault(kind="reset_after_commit", path=EFFECT_PATH))
    text, story = narrative("gateway_retry")
    truth = truth_for(b, "gateway_retry", "gateway_retry", thread, ids, text)
    return truth, story


# ---------------------------------------------------------------------------- 3 step_retry


def step_retry(
    b: Bench,
    key: KeyMode = "none",
    timeout: float = 30.0,
    retry_initial: float = 0.5,
    retry_backoff: float = 2.0,
    retry_attempts: int = 3,
    failed_spans: bool = False,
) -> ScenarioResult:
    # failed_spans=False: like many callback handlers, tool spans end only on success, so the
    # failed attempt leaves no tool span (True: it leaves one with an error status)
    tool = ToolOptions(
        client="stripe",
        key=key,
        on_timeout="raise",
        timeout=REAL_TIMEOUT,
        nominal_timeout=timeout,
        record_tool_errors=failed_spans,
    )
    policy = RetryPolicy(initial_interval=retry_initial, backoff_factor=retry_backoff,
                         max_attempts=retry_attempts)
    worker = b.worker("worker-a", tool, retry_policy=policy)
    late = Fault(kind="delay_after_commit", path=EFFECT_PATH, seconds=SLOW_ANSWER)
    thread, ids = run_incident(b, worker, late)
    text, story = narrative(
        "step_retry", timeout=timeout, retry_upper=timeout + retry_initial + 1.5)
    truth = truth_for(b, "step_retry", "step_retry", thread, ids, text)
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
    late = Fault(kind="delay_after_commit", path=EFFECT_PATH, seconds=SLOW_ANSWER)
    thread, ids = run_incident(b, worker, late)
    layer = "model_reemission" if len(ids) > 1 else "none"
    text, story = narrative("model_reemission", timeout=timeout, turn_upper=timeout + 5)
    truth = truth_for(b, "model_reemission", layer, thread, ids, text)
    return truth, story


# ---------------------------------------------------------------------------- controls


def control(b: Bench, name: str, thread: str, /, *, related: list[str] | None = None,
            **values: Any) -> ScenarioResult:
    """A control's result: no layer repeated anything, no tool call was executed twice;
    `related`: its other threads, charged legitimately; its narrative filled from `values`."""
    text, story = narrative(name, **values)
    truth = truth_for(b, name, "none", thread, [], text)
    if related is not None:
        truth.related_threads = related
    return truth, story


def _chat_worker(b: Bench) -> Worker:
    """worker-a with a keyless Stripe tool and an OpenAI-style model (`call_...` ids), after
    the usual noise and pause."""
    b.model.id_style = "openai"
    worker = b.worker("worker-a", ToolOptions(client="stripe", key="none"))
    b.noise(worker)
    b.clock.advance(b.rng.uniform(3, 20))
    return worker


def _human_asks_again(b: Bench, worker: Worker, thread: str, lag: tuple[float, float],
                      text: str) -> None:
    """A drawn `lag` (seconds) later the human writes `text` in the same thread; then noise."""
    b.clock.advance(b.rng.uniform(*lag))
    worker.run(thread, text)
    b.noise(worker)


def control_new_turn(b: Bench) -> ScenarioResult:
    worker = _chat_worker(b)
    thread = b.new_thread()
    amount = b.rng.choice(AMOUNTS)
    worker.run(thread, ask(b, amount))
    _human_asks_again(  # the user reads the answer and asks again
        b, worker, thread, (40, 150),
        f"Thanks. They added a second seat: please also charge {b.customer} {amount} usd for it.")
    return control(b, "control_new_turn", thread)


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
    return control(b, "control_renewal", second, related=[first], first=first, second=second)


def _two_workers(b: Bench) -> tuple[Worker, Worker]:
    """Two workers with the same tool, after the usual noise and pause."""
    tool = ToolOptions(client="stripe", key="none")
    worker_a = b.worker("worker-a", tool)
    worker_b = b.worker("worker-b", tool)
    b.noise(worker_a)
    b.clock.advance(b.rng.uniform(3, 20))
    return worker_a, worker_b


def control_same_amount(b: Bench) -> ScenarioResult:
    """Two customers charged the same amount and currency seconds apart by two threads."""
    worker_a, worker_b = _two_workers(b)
    amount = b.rng.choice(AMOUNTS)
    thread = b.new_thread()
    worker_a.run(thread, ask(b, amount))
    other_customer = b.rng.choice(b.noise_customers)
    other = land_second_thread(
        b, worker_b, thread,
        lambda: f"Please charge {other_customer} {amount} usd for subscription "
                f"{b.subscription()} (monthly renewal).",
        (1, 5))
    b.noise(worker_a)
    return control(b, "control_same_amount", thread, related=[other],
                   customer=b.customer, other_customer=other_customer, amount=amount,
                   thread=thread, other=other)


def control_two_subscriptions(b: Bench) -> ScenarioResult:
    """The same customer charged twice the same minute by two threads, two subscriptions."""
    worker_a, worker_b = _two_workers(b)
    first_amount, second_amount = b.rng.sample(AMOUNTS, 2)
    thread = b.new_thread()
    worker_a.run(thread, ask(b, first_amount))
    other = land_second_thread(b, worker_b, thread,
                               lambda: ask(b, second_amount, "add-on subscription"), (4, 50))
    b.noise(worker_a)
    return control(b, "control_two_subscriptions", thread, related=[other],
                   customer=b.customer, first_amount=first_amount, second_amount=second_amount,
                   thread=thread, other=other)


DECLINING_CARD = "pm_card_chargeDeclined"  # Stripe's test card that is always declined


def control_declined_retry(b: Bench) -> ScenarioResult:
    """A declined card, then a charge the human asked for again after updating the card."""
    worker = _chat_worker(b)
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
    _human_asks_again(  # the human updates the card, then asks again
        b, worker, thread, (45, 900),
        f"I updated the card on file. Please try again: charge {b.customer} {amount} usd.")
    return control(b, "control_declined_retry", thread, amount=amount)


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


def run_scenario(name: str, out_dir: str | Path, seed: int = 7, **kwargs: Any) -> Path:
    """Run one scenario and write its incident folder; returns the folder. The keywords are
    `run_scenario_with_server`'s (noise, dsn, start, realism, detailed_truth) and the
    scenario's own options."""
    folder, _ = run_scenario_with_server(name, out_dir, seed, **kwargs)
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
    repeatable: bool = False,
    fixed: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[Path, StripeServer]:
    """Run one scenario and write its incident folder; returns the folder and the (stopped)
    Stripe server with the provider's state, so a test can `start()` it again and query it live
    as an on-call engineer would.

    `realism="field"` draws, from the seed, a variant as hard as production (`twice.lab.field`).
    `detailed_truth` (default: on in field realism) adds the incident's request ids and expected
    findings to truth.json; the clean realism's truth.json is otherwise what it always was.
    `repeatable=True`: the same seed writes the same evidence, to the microsecond
    (`twice.lab.repeatable`; the default clock ticks with real time). `fixed` (field realism
    only): variant fields set instead of drawn (`twice.lab.field.with_fixed`)."""
    if name not in ALL_SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(ALL_SCENARIOS)}")
    if realism not in REALISMS:
        raise OptionError(f"realism={realism!r} is not one of {list(REALISMS)}")
    func, default_start = ALL_SCENARIOS[name]
    out = Path(out_dir)
    if realism == "field":
        from twice.lab.field import run_field  # field realism builds on this module

        return run_field(name, func, out, seed, noise=noise, dsn=dsn, start=start,
                         options=options, repeatable=repeatable, fixed=fixed)
    if fixed:
        raise OptionError("fixed variant fields need realism='field'")
    check_options(name, func, options, dsn)
    # Each scenario gets its own ids and timings from the same user-facing seed.
    bench_seed = zlib.crc32(f"{name}:{seed}".encode())
    with bench(out, seed=bench_seed, start=start or default_start, noise=noise, dsn=dsn,
               repeatable=repeatable) as b:
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
