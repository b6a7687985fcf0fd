"""Scenarios where a run is picked up again from its checkpoint: redelivery and human_pause.

`redelivery`: a worker dies after the charge; the queue (SQS through moto, or a PostgreSQL table)
hands the run to another worker after the visibility timeout. `human_pause`: the tool pauses for
a human's approval after the charge; the run resumes ~30 h later, past the provider's key
retention, so even the derived key no longer protects the re-executed tool call.
"""

from __future__ import annotations

from typing import Any, Literal

from twice.lab.agent import KeyMode, ToolOptions, WorkerCrashed
from twice.lab.incident import Story
from twice.lab.lab_run import Bench
from twice.lab.pg_queue import PgRunQueue
from twice.lab.queue import QUEUE_NAME, RunQueue
from twice.lab.scenario_kit import ScenarioResult, ask, tool_call_ids, truth_for

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
    truth = truth_for(
        b, "redelivery", "redelivery", thread, ids,
        f"worker-a died after the charge and before the checkpoint; {queue_text} redelivered "
        "the run "
        f"after the {visibility_timeout} s visibility timeout to worker-b, which resumed from "
        "the checkpoint and re-ran the tool call with a new random key.",
    )
    story = Story(
        "the queue redelivered the run to another worker",
        f"Runs arrive on {'a PostgreSQL table queue' if on_pg else 'an SQS queue (moto)'} "
        f"with a {visibility_timeout} s visibility timeout. "
        "worker-a received the run, the model asked for the charge and the provider created "
        "the PaymentIntent; then worker-a died (killed before LangGraph wrote the tool step's "
        "checkpoint) and never deleted the message. After the visibility timeout worker-b "
        f"received it (`{count_text}` 2), found the thread's checkpoint with the tool "
        "step still pending and resumed it: the same tool call ran again with a NEW random key.",
        "Duplicate, layer **redelivery**: two provider requests minutes apart (about the "
        "visibility timeout: the two receives are >= the timeout apart; the charges are that "
        "less worker-a's model turn before its charge, plus worker-b's poll wait), different "
        "keys, the same tool call id, checkpoints from "
        f"worker-a then worker-b minutes apart, and a queue receive with {count_text} 2 "
        f"(`{'queue.jsonl' if on_pg else 'sqs.jsonl'}`). worker-a's tool span was lost with "
        "the process (its HTTP span is an orphan). Fix: derive the key from "
        "`thread_id:tool_call_id`.",
    )
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
    truth = truth_for(
        b, "human_pause", "none" if fixed else "redelivery", thread, ids,
        f"The tool charged with a derived key, then paused for a human's approval "
        f"(LangGraph interrupt); worker-b resumed the run {pause / 3600:.1f} h later and the tool "
        "ran again with the SAME key, which the provider had pruned after 24 h: two charges."
        if not fixed else
        "The same pause and resume, but the tool looked its derived key up in its own "
        "`agent_effects` table first and did not call the provider again: one charge.",
    )
    story = Story(
        "a human pause longer than the key retention",
        "The tool creates the PaymentIntent with an idempotency key derived from "
        "`thread_id:tool_call_id` (the fix for rows 1-4), then asks a human to approve "
        "provisioning the plan: LangGraph `interrupt()` inside the tool. The run's checkpoint "
        "holds the pending tool call, not its result. The reviewer answered "
        f"{pause / 3600:.1f} h later; worker-b resumed the thread with `Command(resume=...)` "
        "and LangGraph ran the tool again from its first line: the same tool call id, the "
        "same derived key. Stripe keeps keys for at least 24 h, no longer: the provider had "
        "pruned the key and treated the request as new.",
        "Duplicate, layer **redelivery** (the run was picked up again, hours later): the same "
        "tool call id and the SAME idempotency key on two creating requests more than 24 h "
        "apart, checkpoints from worker-a then worker-b, and the finding `key_expired`. Fix: "
        "a durable record of the agent's own effects, checked before the create (here a "
        "`agent_effects` table in the checkpointer's database, keyed by the derived key), or "
        "look the PaymentIntent up by its metadata before charging again.",
    )
    return truth, story
