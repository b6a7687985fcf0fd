"""Run by a side environment's python (tests/side_venvs.py), not by pytest: the real LangGraph
agent of tests/agent_graph.py, traced by a real SDK, whose tool charges the customer through the
real stripe SDK on a Stripe-compatible server, times out, and has its step re-run by its
RetryPolicy 3 s later (the server's times have whole seconds).

    python -m tests.connectors.traced_agent SETTINGS_JSON

SETTINGS_JSON: {"tracer": "langfuse" | "phoenix", "stripe": url, "stripe_key", "customer",
"card", "thread", "call"} and, for Langfuse, {"langfuse": url, "public_key", "secret_key"} (its
LangChain CallbackHandler, OTLP protobuf to the endpoint), for Phoenix, {"phoenix": url,
"project"} (OpenInference's LangChain instrumentation on the OpenTelemetry SDK, OTLP protobuf
over HTTP, as phoenix.otel sets it up). It prints the number of times the tool ran.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def _langfuse(settings: dict[str, str]) -> tuple[list[Any], Callable[[], None]]:
    from langfuse import Langfuse
    from langfuse.langchain import CallbackHandler

    client = Langfuse(public_key=settings["public_key"], secret_key=settings["secret_key"],
                      host=settings["langfuse"])

    def done() -> None:
        client.flush()
        client.shutdown()

    return [CallbackHandler()], done


def _phoenix(settings: dict[str, str]) -> tuple[list[Any], Callable[[], None]]:
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    # what phoenix.otel's `register` sets up (importing it loads Phoenix's whole server: ~30 s
    # here): OTLP protobuf over HTTP, the project named by a resource attribute
    provider = TracerProvider(resource=Resource.create(
        {"openinference.project.name": settings["project"]}))
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=f"{settings['phoenix']}/v1/traces")))
    LangChainInstrumentor().instrument(tracer_provider=provider)

    def done() -> None:
        provider.force_flush()
        provider.shutdown()

    return [], done


def main(settings: dict[str, str]) -> int:
    import stripe
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import RetryPolicy

    from tests.agent_graph import Ledger, build_agent, charge_turn, final_turn, run

    callbacks, done = (_langfuse if settings["tracer"] == "langfuse" else _phoenix)(settings)
    sdk = stripe.StripeClient(settings["stripe_key"],
                              base_addresses={"api": settings["stripe"]})

    def charge(customer_id: str, amount: int, currency: str) -> None:
        intent = sdk.v1.payment_intents.create(params={
            "amount": amount, "currency": currency, "customer": customer_id,
            "payment_method": settings["card"],
            "metadata": {"thread_id": settings["thread"], "tool_call_id": settings["call"]}})
        sdk.v1.payment_intents.confirm(intent.id)

    ledger = Ledger()
    graph = build_agent(InMemorySaver(), [charge_turn(settings["call"],
                                                      customer_id=settings["customer"]),
                                          final_turn()],
                        ledger=ledger, fail_first=TimeoutError("read timed out"),
                        handle_tool_errors=False, provider=charge,
                        tool_retry=RetryPolicy(max_attempts=2, initial_interval=3.0,
                                               jitter=False, retry_on=TimeoutError))
    run(graph.with_config({"callbacks": callbacks}) if callbacks else graph, settings["thread"])
    done()
    return ledger.calls


if __name__ == "__main__":
    print(main(json.loads(sys.argv[1])))
