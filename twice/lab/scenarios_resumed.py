"""Scenarios where a run is picked up again from its checkpoint: redelivery and human_pause.

`redelivery`: a worker dies after the charge; the queue (SQS through moto, or a PostgreSQL table)
hands the run to another worker after the visibility timeout. `human_pause`: the tool pauses for
a human's approval after the charge; the run resumes ~30 h later, past the provider's key
retention, so even the derived key no longer protects the re-executed tool call.
"""

from __future__ import annotations

from typing import Any, Literal

from twice.lab.agent import KeyMode, ToolOptions, WorkerCrashed
from twice.lab.lab_run import Bench
from twice.lab.pg_queue import PgRunQueue
from twice.lab.queue import QUEUE_NAME, RunQueue
from twice.lab.scenario_kit import ScenarioResult, ask, tool_call_ids, truth_for
from twice.lab.stories import narrative

QueueKind = Literal["auto", "sqs", "postgres"]


def open_queue(b: Bench, kind: QueueKind, visibility_timeout: int) -> RunQueue | PgRunQueue:
    """SQS (moto) by default; the PostgreSQL queue when asked, or (auto) when given a DSN."""
    if kind == "postgres" or (kind == "auto" and b.dsn):
        if not b.dsn:
            raise ValueError("the PostgreSQL queue needs a DSN (--dsn)")
        return PgRunQueue(b.dsn, b.out_dir / "queue.jsonl", queue=QUEUE_NAME,
                          visibility_timeout=visibility_timeout)
    return RunQueue(b.out_dir / "sqs.jsonl", visibility_timeout=visibility_timeout)


def redelivery(
    b: Bench, key: KeyMode = "none", visibility_timeout: int = 360, queue: QueueKind = "auto"
) -> ScenarioResult:
    thread = b.new_thread()
    armed = [True]

    def die_after_commit(intent: dict[str, Any]) -> None:
        if armed[0] and intent.get("customer") == b.customer:
            armed[0] = False
            worker_a.telemetry.kill()
            raise WorkerCrashed("worker-a was OOM-killed after the charge, before the checkpoint")

    tool = ToolOptions(client="stripe", key=key)
    worker_a = b.worker("worker-a", tool, after_commit=die_after_commit)
    worker_b = b.worker("worker-b", tool)
    with open_queue(b, queue, visibility_timeout) as run_queue:
        on_pg = isinstance(run_queue, PgRunQueue)
        queue_text = "a PostgreSQL table queue (SKIP LOCKED)" if on_pg else "SQS"
        count_text = "receive_count" if on_pg else "ApproximateReceiveCount"

        def serve_one(worker_name: str) -> dict[str, Any] | None:
            message = run_queue.receive(worker_name)
            if message is None:
                return None
            worker = worker_a if worker_name == "worker-a" else worker_b
            worker.process(message, run_queue.name, run_queue.system)
            run_queue.delete(message)
            return message

        for _ in range(b.noise_count(3, 6)):
            b.clock.advance(b.rng.uniform(2.0, 25.0))
            run_queue.send(*b.noise_request())
            serve_one("worker-a")
        b.clock.advance(b.rng.uniform(3, 20))
        incident_message = run_queue.send(thread, ask(b))
        received = run_queue.receive("worker-a")
        assert received is not None and received["MessageId"] == incident_message
        try:
            worker_a.process(received, run_queue.name, run_queue.system)
        except WorkerCrashed:
            pass  # the process is gone: no checkpoint for the tool step, no delete_message
        crashed_at = b.clock.now()
        window = visibility_timeout + 90
        sends = sorted(b.rng.uniform(5, window) for _ in range(b.noise_count(4, 10)))
        redelivered = False
        for _ in range(10_000):
            elapsed = (b.clock.now() - crashed_at).total_seconds()
            while sends and sends[0] <= elapsed:
                sends.pop(0)
                run_queue.send(*b.noise_request())
            if redelivered and not sends:
                break
            message = run_queue.receive("worker-b")
            if message is not None:
                worker_b.process(message, run_queue.name, run_queue.system)
                run_queue.delete(message)
                redelivered = redelivered or message["MessageId"] == incident_message
                continue
            # an empty long poll: waits up to 20 s, or until the next message is sent
            wait = 20.0 if not sends else min(20.0, max(0.5, sends[0] - elapsed))
            b.clock.advance(wait)
    ids = tool_call_ids(b.checkpointer, thread)
    text, story = narrative(
        "redelivery", queue_text=queue_text, visibility_timeout=visibility_timeout,
        queue_kind="a PostgreSQL table queue" if on_pg else "an SQS queue (moto)",
        count_text=count_text, receive_log="queue.jsonl" if on_pg else "sqs.jsonl")
    truth = truth_for(b, "redelivery", "redelivery", thread, ids, text)
    return truth, story



REVIEW_FROM = 20_000  # charges of $200 or more wait for a human's sign-off
PLAN_AMOUNTS = (24_900, 29_900, 49_900, 99_900)  # annual plans
Effects = Literal["none", "ledger"]


def human_pause(
    b: Bench, key: KeyMode = "derived", effects: Effects = "none", pause_hours: float | None = None
) -> ScenarioResult:
    tool = ToolOptions(
        client="stripe", key=key, review_from=REVIEW_FROM, effects_ledger=effects == "ledger"
    )
    worker_a = b.worker("worker-a", tool)
    worker_b = b.worker("worker-b", tool)
    b.noise(worker_a)
    b.clock.advance(b.rng.uniform(3, 20))
    thread = b.new_thread()
    amount = b.rng.choice(PLAN_AMOUNTS)
    paused = worker_a.run(thread, ask(b, amount, "annual plan upgrade"))
    assert "__interrupt__" in paused, "the charge should have paused for review"
    b.noise(worker_a)
    # the reviewer comes back after the weekend: longer than Stripe's 24 h key retention
    pause = 3600 * (pause_hours if pause_hours is not None else b.rng.uniform(28, 34))
    b.clock.advance(pause)
    b.noise(worker_b)
    b.clock.advance(b.rng.uniform(3, 20))
    worker_b.run(thread, None, resume={"approved": True, "reviewer": "ops@example.com"})
    b.noise(worker_b)
    ids = tool_call_ids(b.checkpointer, thread)
    fixed = effects == "ledger"
    text, story = narrative(
        "human_pause", truth="truth_fixed" if fixed else "truth", pause_hours=pause / 3600)
    truth = truth_for(b, "human_pause", "none" if fixed else "redelivery", thread, ids, text)
    return truth, story
