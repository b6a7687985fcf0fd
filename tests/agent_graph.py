"""A real LangGraph tool-calling agent for tests: scripted model, real graph, any checkpointer.

The graph is the usual ReAct shape: `agent` (a chat model) -> `tools` (LangGraph's ToolNode) ->
`agent` ... until the model answers without tool calls. The model is langchain-core's
`GenericFakeChatModel` replaying a script of `AIMessage`s, so nothing touches the network, but
everything below it (state reducer `add_messages`, ToolNode, the checkpointer writing
checkpoints, blobs and pending writes) is the real library code.

Config scalars reach checkpoint metadata: LangGraph's `get_checkpoint_metadata`
(langgraph/checkpoint/base/__init__.py) copies every str/int/float/bool in `config["metadata"]`
and `config["configurable"]` into each checkpoint's metadata, except `thread_id`,
`checkpoint_id`, `checkpoint_ns`, `checkpoint_map`, `langgraph_*` keys and keys starting with
`__`. So `run(..., worker="worker-a")` puts `"worker": "worker-a"` into every checkpoint's
metadata, as a deployment that stamps its host into the config would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import RetryPolicy


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def charge_turn(
    tool_call_id: str,
    customer_id: str = "cus_QZ4mX8rT2nLk9P",
    amount: int = 4900,
    currency: str = "usd",
    text: str = "",
) -> AIMessage:
    """A model turn asking for one `charge_subscription` call (ids like `toolu_01...`)."""
    return AIMessage(
        content=text,
        id=f"msg_{tool_call_id[-12:]}",
        tool_calls=[{
            "id": tool_call_id,
            "name": "charge_subscription",
            "args": {"customer_id": customer_id, "amount": amount, "currency": currency},
            "type": "tool_call",
        }],
    )


def final_turn(text: str = "The subscription is paid.") -> AIMessage:
    return AIMessage(content=text)


@dataclass
class Ledger:
    """What the tool really did: the side effects a payment provider would have recorded."""

    charges: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0


def make_charge_tool(
    ledger: Ledger, fail_first: BaseException | None = None,
    provider: Callable[[str, int, str], None] | None = None,
) -> Any:
    """`charge_subscription` as a plain function; raises `fail_first` on its first call.
    `provider(customer_id, amount, currency)` charges a real payment provider first, so a
    failure after it is the charge made and its answer lost."""

    def charge_subscription(customer_id: str, amount: int, currency: str) -> str:
        """Charge a customer's subscription (amount in minor units)."""
        ledger.calls += 1
        if provider is not None:
            provider(customer_id, amount, currency)
        if fail_first is not None and ledger.calls == 1:
            raise fail_first
        charge = {"id": f"ch_3Pq{ledger.calls:04d}", "customer": customer_id,
                  "amount": amount, "currency": currency}
        ledger.charges.append(charge)
        return json.dumps({"status": "succeeded", "charge": charge["id"]})

    return charge_subscription


def build_agent(
    checkpointer: BaseCheckpointSaver[Any],
    script: Sequence[AIMessage],
    *,
    ledger: Ledger | None = None,
    fail_first: BaseException | None = None,
    handle_tool_errors: bool = True,
    tool_retry: RetryPolicy | None = None,
    on_node: Callable[[str], None] | None = None,
    crash_beside_tools: BaseException | None = None,
    provider: Callable[[str, int, str], None] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the agent graph over `checkpointer`; the model answers with `script` in order.

    With `handle_tool_errors` (the default here), a tool that raises becomes a ToolMessage with
    `status="error"`, as LangGraph's ToolNode does when error handling is on.
    `on_node(name)` is called as each node starts (tests move a frozen clock there).
    `crash_beside_tools` adds a `notify` node that runs in the same step as `tools` and raises:
    the step never completes, so no checkpoint follows and the tool's ToolMessage survives only
    as a pending write (what a worker dying mid-step leaves behind). `provider`: see
    `make_charge_tool`.
    """
    model = GenericFakeChatModel(messages=iter(list(script)))
    charge = make_charge_tool(ledger if ledger is not None else Ledger(), fail_first, provider)
    tools = ToolNode([charge], handle_tool_errors=handle_tool_errors)

    def agent(state: AgentState) -> dict[str, list[AnyMessage]]:
        if on_node is not None:
            on_node("agent")
        return {"messages": [model.invoke(state["messages"])]}

    def run_tools(state: AgentState) -> Any:
        if on_node is not None:
            on_node("tools")
        return tools.invoke(state)

    def notify(state: AgentState) -> dict[str, Any]:
        if on_node is not None:
            on_node("notify")
        assert crash_beside_tools is not None
        raise crash_beside_tools

    def route(state: AgentState) -> list[str]:
        if tools_condition(dict(state)) == END:
            return [END]
        return ["tools", "notify"] if crash_beside_tools is not None else ["tools"]

    builder = StateGraph(AgentState)
    builder.add_node("agent", agent)
    builder.add_node("tools", run_tools, retry_policy=tool_retry)
    builder.add_edge(START, "agent")
    if crash_beside_tools is not None:
        builder.add_node("notify", notify)
        builder.add_edge("notify", "agent")
    builder.add_conditional_edges("agent", route, ["tools", "notify", END]
                                  if crash_beside_tools is not None else ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def run(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    thread_id: str,
    request: str = "Please renew my subscription.",
    *,
    worker: str | None = None,
) -> dict[str, Any]:
    """Invoke the graph for one user request on `thread_id` (optionally stamping a worker)."""
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if worker is not None:
        configurable["worker"] = worker
    result: dict[str, Any] = graph.invoke(
        {"messages": [HumanMessage(content=request)]}, {"configurable": configurable}
    )
    return result
