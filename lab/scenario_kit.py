"""What every lab scenario shares: timings, the effect path, the ask, the truth, the ids."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from lab.incident import Story, Truth
from lab.lab_run import AMOUNTS, Bench

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


def truth_for(b: Bench, name: str, layer: str, thread: str, ids: list[str], text: str) -> Truth:
    return Truth(name, layer, thread, b.customer, ids, 0, text)
