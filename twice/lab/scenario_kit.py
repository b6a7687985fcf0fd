"""What every lab scenario shares: timings, the effect path, the ask, the truth, the ids."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from twice.lab.agent import Worker
from twice.lab.incident import Story, Truth
from twice.lab.lab_run import AMOUNTS, Bench
from twice.lab.stripe_server import Fault, RequestRecord
from twice.lab.truth_detail import thread_of

REAL_TIMEOUT = 0.25  # the lab's real client timeout, seconds ...
SLOW_ANSWER = 1.0  # ... and how long the provider sits on the committed answer
EFFECT_PATH = "/v1/payment_intents"

ScenarioResult = tuple[Truth, Story]


def tool_call_ids(checkpointer: BaseCheckpointSaver[Any], thread_id: str) -> list[str]:
    """The tool call ids the model emitted in a thread, from its latest checkpoint."""
    latest = checkpointer.get_tuple({"configurable": {"thread_id": thread_id}})
    if latest is None:
        return []
    messages = latest.checkpoint["channel_values"].get("messages", [])
    return [
        str(c["id"]) for m in messages if isinstance(m, AIMessage) for c in m.tool_calls
    ]


def ask(b: Bench, amount: int | None = None, note: str = "monthly renewal") -> str:
    amount = amount or b.rng.choice(AMOUNTS)
    return f"Please charge {b.customer} {amount} usd for subscription {b.subscription()} ({note})."


def run_incident(b: Bench, worker: Worker, fault: Fault) -> tuple[str, list[str]]:
    """The scenarios' usual run: noise, a pause, the provider's fault armed, the incident's
    thread asking for one charge, noise again. Returns the thread and its tool call ids."""
    b.noise(worker)
    b.clock.advance(b.rng.uniform(3, 20))
    b.server.add_fault(fault)
    thread = b.new_thread()
    worker.run(thread, ask(b))
    b.noise(worker)
    return thread, tool_call_ids(b.checkpointer, thread)


def truth_for(b: Bench, name: str, layer: str, thread: str, ids: list[str], text: str) -> Truth:
    return Truth(name, layer, thread, b.customer, ids, 0, text)


def charges_of(b: Bench, thread: str) -> list[RequestRecord]:
    """The create requests a thread's tool calls sent that reached the provider, oldest first."""
    return sorted(
        (r for r in b.server.requests
         if r.method == "POST" and r.path == EFFECT_PATH and r.logged and thread_of(r) == thread),
        key=lambda r: r.created,
    )


def agent_time(b: Bench, record: RequestRecord) -> dt.datetime:
    """When a provider request happened on the agent's clock (the provider's runs ahead)."""
    return dt.datetime.fromtimestamp(record.created - b.server.clock_offset, dt.UTC)


def first_charge_at(b: Bench, thread: str) -> dt.datetime:
    charges = charges_of(b, thread)
    if not charges:
        raise RuntimeError(f"thread {thread} sent no charge")
    return agent_time(b, charges[0])


def land_run_at(b: Bench, worker: Worker, thread: str, text: str, at: dt.datetime) -> None:
    """Run a new thread so that its charge reaches the provider at about `at` (agent clock):
    the run starts one model turn earlier, at its own time even if that is in the past (another
    thread of the same window). The clock then comes back if the run ended before where it was."""
    think = b.think()
    b.scripted_thinks.insert(0, think)
    before = b.clock.now()
    b.travel_to(at - dt.timedelta(seconds=think))
    worker.run(thread, text)
    if b.clock.now() < before:
        b.travel_to(before)


def land_second_thread(b: Bench, worker: Worker, after: str, text: Callable[[], str],
                       lag: tuple[float, float]) -> str:
    """A new thread on `worker` whose charge lands a drawn `lag` (seconds) after the first
    charge of thread `after`; `text` (its request) is made once the thread is. Returns it."""
    other = b.new_thread()
    charged = first_charge_at(b, after)
    land_run_at(b, worker, other, text(), charged + dt.timedelta(seconds=b.rng.uniform(*lag)))
    return other
