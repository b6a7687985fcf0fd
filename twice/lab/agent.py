"""The lab agent: a real LangGraph StateGraph whose tool charges a subscription through Stripe.

- `agent` node: a scripted chat model (`twice.lab.model.ScriptedChatModel`), no network.
- `tools` node: LangGraph's `ToolNode` running `charge_subscription(customer_id, amount,
  currency)`, which creates a confirmed PaymentIntent, either with the real `stripe` SDK
  (`StripeClient(..., base_addresses={"api": url})`) or with a raw HTTP POST through `requests`.
- checkpoints: `SqliteSaver` on a file, or `PostgresSaver` when a DSN is given.

The options reproduce the bugs and their fixes: who makes the idempotency key (nobody / the
SDK's random UUID per call, vs. `sha256(f"{thread_id}:{tool_call_id}")[:32]`), and what the tool
does when the provider does not answer (raise, report a failure, or report an unknown outcome).
The worker's name goes into the run config; LangGraph copies scalar `configurable` values into
each checkpoint's metadata (`langgraph.checkpoint.base.get_checkpoint_metadata`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypedDict

import requests
import stripe
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, RetryPolicy, interrupt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from twice.lab import instrument_field
from twice.lab.clock import VirtualClock
from twice.lab.effects import Effect, EffectLedger
from twice.lab.instrument import (
    ToolSpanHandler,
    TracedStripeHTTPClient,
    WorkerTelemetry,
    clocked_session,
    clocked_stripe_client,
    traced_session,
)
from twice.lab.model import FAILURE_PREFIX, ScriptedChatModel

API_KEY = "sk_test_twice"
PAYMENT_METHOD = "pm_card_visa"

KeyMode = Literal["none", "derived"]
OnTimeout = Literal["raise", "fail", "unknown"]


class WorkerCrashed(BaseException):
    """The worker process died (OOM kill, node eviction). A BaseException, so neither the tool,
    ToolNode nor RetryPolicy handle it and LangGraph writes no checkpoint for the step."""


def derived_key(thread_id: str, tool_call_id: str) -> str:
    """The fix: a key every re-execution of the same tool call re-derives."""
    return hashlib.sha256(f"{thread_id}:{tool_call_id}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class ToolOptions:
    client: Literal["stripe", "raw"] = "stripe"
    key: KeyMode = "none"  # none: the SDK's own random key (stripe) or no key at all (raw)
    on_timeout: OnTimeout = "raise"
    max_network_retries: int = 0  # stripe SDK retries (same key each time)
    post_retries: int = 0  # raw client: urllib3 resends POSTs (no key)
    timeout: float = 80.0  # real client timeout, seconds
    nominal_timeout: float | None = None  # how long the timeout reads on the virtual clock
    record_tool_errors: bool = True  # False: tool spans end only on success
    # charges of at least this amount wait for a human's review AFTER the charge (LangGraph
    # `interrupt()` inside the tool): on resume the tool body runs again from its first line
    review_from: int | None = None
    effects_ledger: bool = False  # the fix past key retention: look the derived key up first


class Payments(Protocol):
    def create_payment_intent(
        self, params: Mapping[str, Any], idempotency_key: str | None
    ) -> dict[str, Any]: ...


class PaymentRejected(Exception):
    """The provider answered with an error status (not a lost answer)."""


class StripeSdkPayments:
    def __init__(self, base_url: str, http_client: stripe.HTTPClient, max_network_retries: int):
        self.client = stripe.StripeClient(
            API_KEY,
            base_addresses={"api": base_url},
            http_client=http_client,
            max_network_retries=max_network_retries,
        )

    def create_payment_intent(
        self, params: Mapping[str, Any], idempotency_key: str | None
    ) -> dict[str, Any]:
        options: stripe.RequestOptions = {}
        if idempotency_key:
            options["idempotency_key"] = idempotency_key
        create = self.client.v1.payment_intents.create
        try:
            intent = create(params=dict(params), options=options)  # type: ignore[arg-type]
        except stripe.APIConnectionError:
            raise
        except stripe.StripeError as error:
            raise PaymentRejected(str(error)) from error
        return intent.to_dict()


class RawHttpPayments:
    """A hand-rolled client: form POST, no idempotency key unless one is given."""

    def __init__(self, base_url: str, session: requests.Session, timeout: float) -> None:
        self.url = base_url.rstrip("/") + "/v1/payment_intents"
        self.session = session
        self.timeout = timeout

    def create_payment_intent(
        self, params: Mapping[str, Any], idempotency_key: str | None
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        response = self.session.post(
            self.url, data=_form(params), headers=headers, timeout=self.timeout
        )
        if response.status_code >= 400:
            raise PaymentRejected(f"HTTP {response.status_code}: {response.text[:200]}")
        body: dict[str, Any] = response.json()
        return body


def _form(params: Mapping[str, Any]) -> dict[str, str]:
    """Stripe's form encoding of flat params plus one level of hashes (`metadata[k]=v`)."""
    form: dict[str, str] = {}
    for name, value in params.items():
        if isinstance(value, Mapping):
            form.update({f"{name}[{k}]": str(v) for k, v in value.items()})
        elif isinstance(value, bool):
            form[name] = "true" if value else "false"
        else:
            form[name] = str(value)
    return form


def _no_answer(error: BaseException) -> bool:
    """The request may have reached the provider but no answer came back."""
    lost = stripe.APIConnectionError | requests.ConnectionError | requests.Timeout
    return isinstance(error, lost)


def make_charge_tool(
    payments: Payments,
    options: ToolOptions,
    after_commit: Callable[[dict[str, Any]], None] | None = None,
    ledger: EffectLedger | None = None,
) -> BaseTool:
    @tool("charge_subscription")
    def charge_subscription(
        customer_id: str,
        amount: int,
        currency: str,
        tool_call_id: Annotated[str, InjectedToolCallId],
        config: RunnableConfig,
    ) -> str:
        """Charge a customer's subscription: creates and confirms a Stripe PaymentIntent."""
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        key = derived_key(thread_id, tool_call_id) if options.key == "derived" else None
        params: dict[str, Any] = {
            "amount": amount,
            "currency": currency,
            "customer": customer_id,
            "confirm": True,
            "payment_method": PAYMENT_METHOD,
            "metadata": {"thread_id": thread_id},
        }
        recorded = ledger.find(key) if ledger is not None and key else None
        if recorded is not None:
            # the agent's own record says this tool call already created its effect
            intent: dict[str, Any] = {"id": recorded.object_id, "status": recorded.status}
            return _charged(intent, amount, currency, options)
        try:
            intent = payments.create_payment_intent(params, key)
        except PaymentRejected as error:
            return f"{FAILURE_PREFIX}: {error}"
        except Exception as error:
            if not _no_answer(error) or options.on_timeout == "raise":
                raise
            if options.on_timeout == "fail":
                return f"{FAILURE_PREFIX}: request timed out"
            return json.dumps(
                {
                    "status": "unknown",
                    "idempotency_key": key,
                    "detail": "no answer from the provider; the charge may exist. Look it up "
                    "by idempotency key before charging again.",
                }
            )
        if ledger is not None and key:
            ledger.record(Effect(key, thread_id, tool_call_id, str(intent.get("id")),
                                 str(intent.get("status", "succeeded")),
                                 datetime.now(UTC).isoformat(timespec="microseconds")))
        if after_commit is not None:
            after_commit(intent)
        return _charged(intent, amount, currency, options)

    return charge_subscription


def _charged(intent: Mapping[str, Any], amount: int, currency: str, options: ToolOptions) -> str:
    """The tool's answer for a created PaymentIntent, after a human's review when one is due."""
    if options.review_from is not None and amount >= options.review_from:
        # Pauses the run; LangGraph checkpoints the pending tool call (not this result) and, on
        # `Command(resume=...)`, runs this tool again from its first line; then `interrupt`
        # returns the human's answer instead of pausing.
        interrupt(
            {
                "question": "Approve provisioning the plan for this charge?",
                "payment_intent": intent.get("id"),
                "amount": amount,
                "currency": currency,
            }
        )
    return json.dumps(
        {
            "status": intent.get("status", "succeeded"),
            "payment_intent": intent.get("id"),
            "amount": amount,
            "currency": currency,
        }
    )


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def build_graph(
    model: ScriptedChatModel,
    charge_tool: BaseTool,
    checkpointer: BaseCheckpointSaver[Any],
    *,
    retry_policy: RetryPolicy | None = None,
    think: Callable[[], None] | None = None,
) -> Any:
    def agent(state: AgentState) -> dict[str, list[AnyMessage]]:
        if think is not None:
            think()  # a model turn takes seconds
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: AgentState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(AgentState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([charge_tool]), retry_policy=retry_policy)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


@contextmanager
def open_checkpointer(
    sqlite_path: Path | None = None, dsn: str | None = None
) -> Iterator[BaseCheckpointSaver[Any]]:
    """SqliteSaver on a file, or PostgresSaver when a DSN is given."""
    if dsn:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(dsn) as saver:
            saver.setup()
            yield saver
        return
    if sqlite_path is None:
        raise ValueError("give a SQLite path or a PostgreSQL DSN")
    conn = sqlite3.connect(str(sqlite_path), check_same_thread=False)
    try:
        sqlite_saver = SqliteSaver(conn)
        sqlite_saver.setup()
        yield sqlite_saver
    finally:
        conn.close()


Instrumentation = Literal["lab", "openinference", "callback", "none"]
INSTRUMENTATIONS: tuple[Instrumentation, ...] = ("lab", "openinference", "callback", "none")


class Worker:
    """One agent worker process: its own tracer provider (host.name), HTTP client and graph.

    `instrumentation` says who writes the worker's spans (to `spans_path`, OTLP JSON lines):
    - "lab": the lab's own GenAI spans (`twice.lab.instrument`): an `invoke_agent` root, a consumer
      span per queue delivery, `execute_tool` spans with `gen_ai.tool.call.id`, and one HTTP
      CLIENT span per attempt on the wire, under the tool span, with resend count and headers;
    - "openinference": what a team gets from the real `openinference-instrumentation-langchain`
      and `opentelemetry-instrumentation-requests` at their defaults (`twice.lab.instrument_field`):
      the stripe SDK on its own `stripe.RequestsClient`, the raw client on a plain `requests`
      Session; no lab spans at all;
    - "callback": a LangChain callback handler opening each tool span with no parent context
      (nothing wraps the graph run), as a team writes one: every tool span is the root of its
      own trace, with `gen_ai.tool.call.id` but no arguments, and a thread id only when
      `span_thread_ids`; the HTTP client spans are its children, as an instrumentation at its
      defaults writes them (a resend count on resends, no headers); a queue delivery is a
      `process_message` root of its own with the receive count; a failed attempt leaves its tool
      span only with the error-path fix (`error_spans`);
    - "none": no spans (no file written by this worker).
    In every mode a client timeout reads as `nominal_timeout` on the virtual clock.
    `span_clock_offset`: the worker's host clock is that many seconds off; every time in its
    spans (start, end, events) is shifted by it (`twice.lab.instrument.ShiftedSpanExporter`).
    """

    def __init__(
        self,
        name: str,
        *,
        base_url: str,
        spans_path: Path,
        checkpointer: BaseCheckpointSaver[Any],
        model: ScriptedChatModel,
        clock: VirtualClock,
        tool: ToolOptions | None = None,
        retry_policy: RetryPolicy | None = None,
        think_seconds: Callable[[], float] | None = None,
        after_commit: Callable[[dict[str, Any]], None] | None = None,
        ledger: EffectLedger | None = None,
        instrumentation: Instrumentation = "lab",
        span_clock_offset: float = 0.0,
        error_spans: bool | None = None,
        span_thread_ids: bool = True,
    ) -> None:
        if instrumentation not in INSTRUMENTATIONS:
            raise ValueError(f"unknown instrumentation {instrumentation!r}")
        self.name = name
        self.options = tool or ToolOptions()
        self.instrumentation: Instrumentation = instrumentation
        self.telemetry = WorkerTelemetry(
            None if instrumentation == "none" else spans_path, name,
            clock_offset=span_clock_offset,
        )
        tracer = self.telemetry.tracer
        self.handler: ToolSpanHandler | None = None
        own_spans = instrumentation in ("lab", "callback")  # spans the lab's code writes
        callback = instrumentation == "callback"
        if own_spans:
            self.handler = ToolSpanHandler(
                tracer, record_errors=self.options.record_tool_errors if error_spans is None
                else error_spans, roots=callback, thread_ids=span_thread_ids or not callback,
                arguments=not callback)
        elif instrumentation == "openinference":
            instrument_field.install()
        payments: Payments
        nominal = self.options.nominal_timeout
        if self.options.client == "stripe":
            http_client: stripe.HTTPClient
            if own_spans:
                http_client = TracedStripeHTTPClient(
                    tracer, timeout=self.options.timeout, clock=clock, nominal_timeout=nominal,
                    capture_headers=not callback,
                )
            else:
                http_client = clocked_stripe_client(
                    timeout=self.options.timeout, clock=clock, nominal_timeout=nominal
                )
            payments = StripeSdkPayments(base_url, http_client, self.options.max_network_retries)
        else:
            if own_spans:
                session = traced_session(
                    tracer, post_retries=self.options.post_retries, clock=clock,
                    nominal_timeout=nominal, capture_headers=not callback,
                )
            else:
                session = clocked_session(
                    post_retries=self.options.post_retries, clock=clock, nominal_timeout=nominal
                )
            payments = RawHttpPayments(base_url, session, self.options.timeout)
        charge = make_charge_tool(payments, self.options, after_commit, ledger)

        def think() -> None:
            if think_seconds is not None:
                clock.advance(think_seconds())

        self.graph = build_graph(
            model, charge, checkpointer, retry_policy=retry_policy, think=think
        )

    def config(self, thread_id: str) -> RunnableConfig:
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "worker": self.name},
            "metadata": {"worker": self.name},
        }
        if self.handler is not None:
            config["callbacks"] = [self.handler]
        return config

    def run(
        self,
        thread_id: str,
        message: str | None,
        *,
        delivery: Mapping[str, Any] | None = None,
        resume: Any = None,
    ) -> dict[str, Any]:
        """Run (message) or resume from the last checkpoint (message None) one thread;
        `resume` answers an `interrupt()` (a human's decision) and continues from it.

        With `delivery` (a received queue message) the run sits under a CONSUMER span (lab
        instrumentation only: the field instrumentation has none for the queue)."""
        graph_input: Any = None if message is None else {"messages": [HumanMessage(message)]}
        if resume is not None:
            graph_input = Command(resume=resume)
        if self.instrumentation == "openinference":
            with instrument_field.routed_to(self.telemetry.provider):
                field_result: dict[str, Any] = self.graph.invoke(
                    graph_input, self.config(thread_id)
                )
            return field_result
        with instrument_field.suppressed():
            if self.instrumentation == "none":
                quiet_result: dict[str, Any] = self.graph.invoke(
                    graph_input, self.config(thread_id)
                )
                return quiet_result
            tracer = self.telemetry.tracer
            if self.instrumentation == "callback":
                with _consumer_root_span(tracer, delivery):
                    callback_result: dict[str, Any] = self.graph.invoke(
                        graph_input, self.config(thread_id))
                return callback_result
            with _delivery_span(tracer, delivery):
                with tracer.start_as_current_span(
                    "invoke_agent billing-agent",
                    kind=SpanKind.INTERNAL,
                    attributes={
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": "billing-agent",
                        "gen_ai.conversation.id": thread_id,
                    },
                    end_on_exit=True,
                ):
                    result: dict[str, Any] = self.graph.invoke(
                        graph_input, self.config(thread_id)
                    )
        return result

    def process(
        self, message: Mapping[str, Any], queue_name: str, system: str = "aws_sqs"
    ) -> dict[str, Any]:
        """Handle one received queue message: start the run, or resume it from its checkpoint
        when an earlier delivery got part of the way (the graph still has steps to run)."""
        body = json.loads(message["Body"])
        thread_id = str(body["thread_id"])
        state = self.graph.get_state({"configurable": {"thread_id": thread_id}})
        text = None if state.next else str(body["input"])
        delivery = {**message, "queue": queue_name, "system": system}
        return self.run(thread_id, text, delivery=delivery)


@contextmanager
def _consumer_root_span(tracer: trace.Tracer, delivery: Mapping[str, Any] | None
                        ) -> Iterator[None]:
    """The queue consumer's own span as many SQS consumers write it: `process_message <queue>`,
    the root of a trace of its own (nothing links it to the run's spans), with the receive
    count under `aws.sqs.approximate_receive_count`; it lasts as long as the run it started."""
    if delivery is None:
        yield
        return
    queue = str(delivery.get("queue", ""))
    span = tracer.start_span(f"process_message {queue}", kind=SpanKind.CONSUMER,
                             context=otel_context.Context(), attributes={
        "aws.sqs.approximate_receive_count": int(
            delivery.get("Attributes", {}).get("ApproximateReceiveCount", 1)),
        "messaging.message.id": str(delivery.get("MessageId", "")),
    })
    try:
        yield
    except BaseException as error:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
        raise
    finally:
        span.end()


@contextmanager
def _delivery_span(tracer: trace.Tracer, delivery: Mapping[str, Any] | None) -> Iterator[None]:
    if delivery is None:
        yield
        return
    system = str(delivery.get("system") or "aws_sqs")
    # SQS's count under its semantic-convention-style name; other queues under their own
    count_name = "approximate_receive_count" if system == "aws_sqs" else "receive_count"
    attributes: dict[str, str | int] = {
        "messaging.system": system,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": str(delivery.get("queue", "")),
        "messaging.message.id": str(delivery.get("MessageId", "")),
        f"messaging.{system}.{count_name}": int(
            delivery.get("Attributes", {}).get("ApproximateReceiveCount", 1)
        ),
    }
    with tracer.start_as_current_span(
        f"process {attributes['messaging.destination.name']}",
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    ):
        yield
