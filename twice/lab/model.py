"""A scripted chat model: a real LangChain chat model that decides from the message history.

No network: it reads the last message and answers the way a tool-calling model does.
- a human message "charge cus_X 2900 usd ..." -> one `charge_subscription` tool call;
- a tool result reporting failure ("Payment failed: ...") -> it asks again, with a NEW tool
  call id and the same arguments (the model re-emission layer), up to `max_reemissions`;
- a tool result with `"status": "unknown"` -> it stops and says the outcome must be checked;
- a success -> a short confirmation.
Tool call ids look like the providers' (`toolu_01` + 22 base62, or `call_` + 24), seeded.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
TOOL_NAME = "charge_subscription"
FAILURE_PREFIX = "Payment failed"

_CUSTOMER = re.compile(r"\b(cus_[A-Za-z0-9]+)\b")
_AMOUNT = re.compile(r"\b(\d+)\s*([A-Za-z]{3})\b")


def tool_call_id(rng: random.Random, style: Literal["anthropic", "openai"]) -> str:
    if style == "anthropic":
        return "toolu_01" + "".join(rng.choice(BASE62) for _ in range(22))
    return "call_" + "".join(rng.choice(BASE62) for _ in range(24))


class ScriptedChatModel(BaseChatModel):
    """Decides the next AIMessage from the history; see the module docstring."""

    seed: int = 0
    id_style: Literal["anthropic", "openai"] = "anthropic"
    reemit_on_failure: bool = True
    max_reemissions: int = 1
    _rng: random.Random = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._rng = random.Random(self.seed)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self.decide(messages)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def decide(self, messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            args = parse_charge_request(str(last.content))
            if args is None:
                return AIMessage("I can only charge subscriptions: name a customer and an amount.")
            return self._call(args)
        if isinstance(last, ToolMessage):
            return self._after_tool(messages, last)
        return AIMessage("How can I help with billing?")

    def _call(self, args: dict[str, Any]) -> AIMessage:
        call_id = tool_call_id(self._rng, self.id_style)
        return AIMessage(
            "",
            tool_calls=[
                {"name": TOOL_NAME, "args": dict(args), "id": call_id, "type": "tool_call"}
            ],
            response_metadata={"model_name": "scripted-billing-model"},
        )

    def _after_tool(self, messages: Sequence[BaseMessage], result: ToolMessage) -> AIMessage:
        content = str(result.content)
        args = _args_of(messages, result.tool_call_id)
        if content.startswith(FAILURE_PREFIX):
            failures = _failures_since_human(messages)
            if self.reemit_on_failure and args is not None and failures <= self.max_reemissions:
                # The model reads "failed" and tries again: a new tool call, same arguments.
                return self._call(args)
            return AIMessage(f"The charge could not be completed: {content}")
        try:
            payload = json.loads(content)
        except ValueError:
            payload = {}
        status = payload.get("status") if isinstance(payload, dict) else None
        if status == "unknown":
            return AIMessage(
                "The payment provider did not answer in time, so the charge may or may not have "
                "gone through. I will not charge again; the status must be looked up first."
            )
        if status == "succeeded" and args is not None:
            return AIMessage(
                f"Charged {args['amount']} {args['currency']} to {args['customer_id']} "
                f"({payload.get('payment_intent')})."
            )
        return AIMessage(f"The tool answered: {content[:200]}")


def parse_charge_request(text: str) -> dict[str, Any] | None:
    customer = _CUSTOMER.search(text)
    amount = _AMOUNT.search(text)
    if customer is None or amount is None:
        return None
    return {
        "customer_id": customer.group(1),
        "amount": int(amount.group(1)),
        "currency": amount.group(2).lower(),
    }


def _args_of(messages: Sequence[BaseMessage], call_id: str) -> dict[str, Any] | None:
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call["id"] == call_id:
                    return dict(call["args"])
    return None


def _failures_since_human(messages: Sequence[BaseMessage]) -> int:
    failures = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, ToolMessage) and str(message.content).startswith(FAILURE_PREFIX):
            failures += 1
    return failures
