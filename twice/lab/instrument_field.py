"""Field instrumentation for lab workers: the REAL OpenInference LangChain instrumentor and the
REAL OpenTelemetry `requests` instrumentor, at their default settings.

What they write is poorer than the lab's own spans (`twice.lab.instrument`): a TOOL span with
`tool.name`, `input.value`, `output.value` and `session.id` but no tool-call id attribute, and
HTTP CLIENT spans in the OLD semantic conventions (`http.method`, `http.url`, `http.status_code`),
with no resend count, no headers and no parent. Reading such spans is what the connector must
be able to do on real incidents.

Routing. Instrumentors are process-global: `instrument()` patches LangChain's callback manager
and `requests.Session.send` once, for the whole process, with ONE tracer provider, and keeps the
tracers it got from it. The lab runs many workers (each its own `TracerProvider`: its own
resource `host.name`, its own file, its own kill switch) and many scenarios in one process. So
the instrumentors get `ROUTER`, a `RoutingTracerProvider` whose tracers decide per span:

- inside `routed_to(provider)` (a worker in "openinference" mode is running: `Worker.run` enters
  it), a span is started by `provider`'s tracer for the same instrumentation scope, so it lands
  in that worker's file with that worker's resource, and dies with it (`WorkerTelemetry.kill`);
- anywhere else, the span is non-recording and carries the current span context unchanged (as
  an unsampled span would): nothing is exported, and children started under it keep their
  real parent.

The routing key is a `contextvars.ContextVar`, so it follows the run into the threads LangChain
and LangGraph start (they copy the context) and does not leak into concurrent runs.

Workers in the other modes ("lab", "none") run under `suppressed()`: OpenTelemetry's own
suppress-instrumentation context keys, which both instrumentors honour. They then make no span
at all, not even a non-recording one, and `requests` injects no `traceparent` header; the lab's
own spans (made with the SDK directly, which ignores those keys) are exactly as without the
field instrumentation installed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.util import types

__all__ = ["ROUTER", "RoutingTracerProvider", "install", "routed_to", "suppressed"]

_ACTIVE: ContextVar[trace.TracerProvider | None] = ContextVar("twice_lab_span_route", default=None)
_INSTALL_LOCK = threading.Lock()


class _RoutingTracer(trace.Tracer):
    """A tracer of one instrumentation scope that starts each span with the tracer of the same
    scope from the provider routed to at that moment, or a non-recording span if none is."""

    def __init__(self, scope: tuple[Any, ...]) -> None:
        self._scope = scope  # get_tracer's arguments: name, version, schema_url, attributes

    def _target(self) -> trace.Tracer | None:
        provider = _ACTIVE.get()
        return None if provider is None else provider.get_tracer(*self._scope)

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> Span:
        """As `Tracer.start_span` (its arguments passed on as given)."""
        target = self._target()
        if target is None:
            context = kwargs.get("context", args[0] if args else None)
            return trace.NonRecordingSpan(trace.get_current_span(context).get_span_context())
        return target.start_span(name, *args, **kwargs)

    # the API types this as its private `_AgnosticContextManager`; a plain one works the same
    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        """`start_span` made current, as the SDK's own tracer does it."""
        span = self.start_span(name, context, kind, attributes, links, start_time,
                               record_exception, set_status_on_exception)
        with trace.use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                            set_status_on_exception=set_status_on_exception) as current:
            yield current


class RoutingTracerProvider(trace.TracerProvider):
    """The provider the process-global instrumentors are given (see the module docstring)."""

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> trace.Tracer:
        return _RoutingTracer(
            (instrumenting_module_name, instrumenting_library_version, schema_url, attributes)
        )


ROUTER = RoutingTracerProvider()


def install() -> None:
    """Instrument LangChain (OpenInference) and `requests` (OpenTelemetry) for the process, with
    their default settings and `ROUTER` as tracer provider. Idempotent; an instrumentor already
    installed (by this function, or by someone else with another provider) is left as it is."""
    # imported here: a lab that never runs such a worker does not load them
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    with _INSTALL_LOCK:
        for instrumentor in (LangChainInstrumentor(), RequestsInstrumentor()):
            if not instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.instrument(tracer_provider=ROUTER)


@contextmanager
def routed_to(provider: trace.TracerProvider) -> Iterator[None]:
    """Spans the field instrumentation starts in this context go to `provider`."""
    token = _ACTIVE.set(provider)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextmanager
def suppressed() -> Iterator[None]:
    """No field instrumentation in this context (OpenTelemetry's suppression keys; the lab's own
    SDK spans are unaffected). Nothing routed to either."""
    token = _ACTIVE.set(None)
    try:
        with suppress_instrumentation():  # `requests`' HTTP check includes this key
            yield
    finally:
        _ACTIVE.reset(token)

