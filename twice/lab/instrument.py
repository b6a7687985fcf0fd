"""OpenTelemetry instrumentation for the lab agent, written with the real SDK.

- `WorkerTelemetry`: one TracerProvider per worker (resource `service.name`, `host.name`),
  exporting OTLP JSON lines with `opentelemetry-exporter-otlp-json-file`.
- `ToolSpanHandler`: a LangChain callback handler making one `execute_tool` span per tool run.
  With `record_errors=False` it only ends spans on success, like much instrumentation in the
  field: a failed attempt leaves NO span (a span is exported only when it ends).
- `TracedStripeHTTPClient` / `traced_session`: one HTTP CLIENT span per attempt on the wire,
  with `http.request.resend_count` and the idempotency key / request id headers captured.
- `clocked_session` / `clocked_stripe_client`: the same HTTP clients without lab spans (for workers
  traced by field instrumentation, or not at all), keeping the virtual clock's timeout behaviour
  (`advance_on_timeout`, shared by both).
- `ShiftedSpanExporter`: a worker whose host clock runs off by some seconds (span clock skew).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import requests
import stripe
import urllib3
from langchain_core.callbacks import BaseCallbackHandler
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from twice.lab.clock import VirtualClock

SERVICE_NAME = "billing-agent"
SCOPE = "twice.lab"


class KillableSpanProcessor(SimpleSpanProcessor):
    """Exports each span when it ends, until the worker 'dies': then nothing more is written,
    as when a process is killed (spans that never ended are never exported)."""

    def __init__(self, exporter: SpanExporter) -> None:
        super().__init__(exporter)
        self.alive = True

    def on_end(self, span: ReadableSpan) -> None:
        if self.alive:
            super().on_end(span)


class _ShiftedSpan(ReadableSpan):
    """An ended span as a host whose clock is `offset_ns` off would have written it: its start,
    end and event times moved; everything else (ids, attributes, dropped counts) as it was."""

    def __init__(self, span: ReadableSpan, offset_ns: int) -> None:
        def shift(t: int | None) -> int | None:
            return None if t is None else t + offset_ns

        super().__init__(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=span.attributes,
            events=[Event(e.name, e.attributes, shift(e.timestamp)) for e in span.events],
            links=span.links,
            kind=span.kind,
            status=span.status,
            start_time=shift(span.start_time),
            end_time=shift(span.end_time),
            instrumentation_scope=span.instrumentation_scope,
        )
        self._original = span

    @property
    def dropped_attributes(self) -> int:
        return self._original.dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._original.dropped_events

    @property
    def dropped_links(self) -> int:
        return self._original.dropped_links


class ShiftedSpanExporter(SpanExporter):
    """Span clock skew: exports every span with its times (start, end, events) moved by
    `offset_seconds`, as if the span host's clock ran that far off the true time.

    The shift happens at export, after the span ended: the SDK, the instrumentation and the
    processors all see true (virtual-clock) times, as on a real host whose skew only shows when
    its timestamps are compared with another host's. Offsets are exact: whole nanoseconds."""

    def __init__(self, inner: SpanExporter, offset_seconds: float) -> None:
        self.inner = inner
        self.offset_ns = round(offset_seconds * 1e9)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([_ShiftedSpan(span, self.offset_ns) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class WorkerTelemetry:
    """The tracer provider of one worker process, appending OTLP JSON lines to `spans_path`.

    `spans_path=None`: the worker exports nothing (no exporter, no file). `clock_offset`: the
    worker's spans are written `clock_offset` seconds off (`ShiftedSpanExporter`)."""

    def __init__(
        self,
        spans_path: Path | None,
        worker: str,
        service_name: str = SERVICE_NAME,
        *,
        clock_offset: float = 0.0,
    ) -> None:
        self.worker = worker
        resource = Resource.create(
            {"service.name": service_name, "host.name": worker, "service.instance.id": worker}
        )
        self.provider = TracerProvider(resource=resource)
        self.processor: KillableSpanProcessor | None = None
        if spans_path is not None:
            exporter: SpanExporter = FileSpanExporter(spans_path)
            if clock_offset:
                exporter = ShiftedSpanExporter(exporter, clock_offset)
            self.processor = KillableSpanProcessor(exporter)
            self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer(SCOPE)

    def kill(self) -> None:
        """The worker died: whatever has not been exported yet is lost."""
        if self.processor is not None:
            self.processor.alive = False

    def shutdown(self) -> None:
        self.provider.shutdown()


# ---------------------------------------------------------------------------- tool spans


class ToolSpanHandler(BaseCallbackHandler):
    """`execute_tool` spans from LangChain tool callbacks (GenAI semantic conventions)."""

    def __init__(self, tracer: trace.Tracer, *, record_errors: bool = True,
                 roots: bool = False, thread_ids: bool = True, arguments: bool = True) -> None:
        """`roots`: every tool span is opened with no parent context, the root of a trace of its
        own (a callback handler with nothing around the graph run); `thread_ids`,
        `arguments`: whether the span says the thread and the tool call's arguments."""
        self.tracer = tracer
        self.record_errors = record_errors
        self.roots = roots
        self.thread_ids = thread_ids
        self.arguments = arguments
        self._open: dict[UUID, tuple[Span, object]] = {}

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        name = (serialized or {}).get("name") or kwargs.get("name") or "tool"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
        }
        if self.arguments:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(inputs, sort_keys=True) \
                if inputs is not None else input_str
        if kwargs.get("tool_call_id"):
            attributes["gen_ai.tool.call.id"] = kwargs["tool_call_id"]
        thread_id = (metadata or {}).get("thread_id")
        if thread_id and self.thread_ids:
            attributes["gen_ai.conversation.id"] = str(thread_id)
        span = self.tracer.start_span(
            f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes,
            context=otel_context.Context() if self.roots else None,
        )
        # Make the tool span current so HTTP client spans made by the tool nest under it.
        # LangChain copies the context for the tool body after this callback returns.
        token = otel_context.attach(trace.set_span_in_context(span))
        self._open[run_id] = (span, token)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> Any:
        opened = self._open.pop(run_id, None)
        if opened is None:
            return
        span, token = opened
        content = getattr(output, "content", output)
        span.set_attribute("gen_ai.tool.call.result", str(content)[:500])
        span.end()
        _detach(token)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> Any:
        opened = self._open.pop(run_id, None)
        if opened is None:
            return
        span, token = opened
        _detach(token)
        if not self.record_errors:
            # The span is dropped without ending: nothing is exported for this attempt.
            return
        span.record_exception(error)
        span.set_attribute("error.type", _qualified_name(error))
        span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
        span.end()


def _detach(token: object) -> None:
    try:
        otel_context.detach(token)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a token from another context; nothing to restore
        pass


# ---------------------------------------------------------------------------- HTTP spans


def _qualified_name(error: BaseException) -> str:
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_timeout(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(
            seen,
            TimeoutError | requests.exceptions.Timeout | urllib3.exceptions.TimeoutError,
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def advance_on_timeout(
    error: BaseException, started: float, clock: VirtualClock | None, nominal_timeout: float | None
) -> None:
    """An attempt on the wire started at `started` (`time.time()`, the virtual clock) failed with
    `error`: if it timed out, move the virtual clock so the wait reads as `nominal_timeout`
    seconds (measured on the virtual clock, so a clock that stands still moves by all of it).

    The lab's real timeouts are short (a fraction of a second); on the virtual clock they read
    as the nominal ones (30 s, 80 s). Called before the attempt's span (lab or field) ends, so
    that span's duration is the nominal timeout too."""
    if clock is not None and nominal_timeout is not None and _is_timeout(error):
        clock.advance(nominal_timeout - (time.time() - started))


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if not headers:
        return None
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


class _AttemptSpan:
    """One HTTP CLIENT span around one attempt on the wire."""

    def __init__(
        self,
        tracer: trace.Tracer,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        resend_count: int,
        capture_headers: bool = True,
    ) -> None:
        parts = urlsplit(url)
        attributes: dict[str, Any] = {
            "http.request.method": method.upper(),
            "url.full": url,
            "server.address": parts.hostname or "",
            "server.port": parts.port or (443 if parts.scheme == "https" else 80),
        }
        # the lab's spans say every try's count; an instrumentation at its defaults (the stable
        # HTTP conventions) sets it on resends only, and captures no headers
        if capture_headers or resend_count:
            attributes["http.request.resend_count"] = resend_count
        key = _header(headers, "idempotency-key")
        if key and capture_headers:
            attributes["http.request.header.idempotency-key"] = [key]
        self.capture_headers = capture_headers
        self.span = tracer.start_span(method.upper(), kind=SpanKind.CLIENT, attributes=attributes)
        self.started = time.time()

    def response(self, status: int, headers: Mapping[str, str] | None) -> None:
        self.span.set_attribute("http.response.status_code", status)
        for name in ("request-id", "idempotent-replayed"):
            value = _header(headers, name)
            if value and self.capture_headers:
                self.span.set_attribute(f"http.response.header.{name}", [value])
        if status >= 400:
            self.span.set_attribute("error.type", str(status))
            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()

    def error(
        self, error: BaseException, clock: VirtualClock | None, nominal_timeout: float | None
    ) -> None:
        advance_on_timeout(error, self.started, clock, nominal_timeout)
        cause = error.__cause__ or error
        self.span.set_attribute("error.type", _qualified_name(cause))
        self.span.record_exception(cause)
        self.span.set_status(Status(StatusCode.ERROR, str(cause)[:200]))
        self.span.end()


class TracedStripeHTTPClient(stripe.RequestsClient):
    """stripe-python's requests client with one CLIENT span per attempt.

    `HTTPClient._request_with_retries_internal` loops calling `self.request(...)` once per
    attempt and sleeps between them; `request_with_retries` is the entry of one logical call,
    so the attempt counter is reset there.
    """

    def __init__(
        self,
        tracer: trace.Tracer,
        *,
        timeout: float = 80,
        clock: VirtualClock | None = None,
        nominal_timeout: float | None = None,
        capture_headers: bool = True,
    ) -> None:
        super().__init__(timeout=timeout)
        self._tracer = tracer
        self._clock = clock
        self._nominal_timeout = nominal_timeout
        self._capture_headers = capture_headers
        self._attempts = threading.local()

    def request_with_retries(  # type: ignore[override]
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        post_data: Any = None,
        max_network_retries: int | None = None,
        *,
        _usage: list[str] | None = None,
    ) -> tuple[str, int, Mapping[str, str]]:
        self._attempts.n = 0
        return super().request_with_retries(
            method, url, headers, post_data, max_network_retries, _usage=_usage
        )

    def request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        post_data: Any = None,
    ) -> tuple[bytes, int, Mapping[str, str]]:
        resend_count = getattr(self._attempts, "n", 0)
        self._attempts.n = resend_count + 1
        attempt = _AttemptSpan(self._tracer, method, url, headers, resend_count,
                               self._capture_headers)
        try:
            content, status, rheaders = super().request(method, url, headers, post_data)
        except BaseException as error:
            attempt.error(error, self._clock, self._nominal_timeout)
            raise
        attempt.response(status, rheaders)
        return content, status, rheaders


class _WirePoolMixin:
    """A urllib3 pool whose every attempt on the wire keeps the virtual clock's timeout
    behaviour and, given a tracer, makes one lab HTTP CLIENT span."""

    tracer: trace.Tracer | None = None
    clock: VirtualClock | None = None
    nominal_timeout: float | None = None
    capture_headers: bool = True

    def _make_request(self, conn: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        started = time.time()
        attempt = None
        if self.tracer is not None:
            retries = kwargs.get("retries")
            resend_count = len(retries.history) if isinstance(retries, Retry) else 0
            pool: Any = self
            full = f"{pool.scheme}://{pool.host}:{pool.port}{url}"
            attempt = _AttemptSpan(self.tracer, method, full, kwargs.get("headers"), resend_count,
                                   self.capture_headers)
        try:
            response = super()._make_request(conn, method, url, *args, **kwargs)  # type: ignore[misc]
        except BaseException as error:
            if attempt is not None:
                attempt.error(error, self.clock, self.nominal_timeout)
            else:
                advance_on_timeout(error, started, self.clock, self.nominal_timeout)
            raise
        if attempt is not None:
            attempt.response(response.status, response.headers)
        return response


class TracedAdapter(HTTPAdapter):
    """A requests adapter whose urllib3 pools trace every attempt on the wire (no spans when
    `tracer` is None; the virtual clock's timeout behaviour either way).

    urllib3 retries inside `urlopen` (recursively), below requests; `_make_request` is called
    once per attempt, with the `Retry` whose `history` counts the earlier attempts.
    """

    def __init__(
        self,
        tracer: trace.Tracer | None,
        *,
        max_retries: Retry | int = 0,
        clock: VirtualClock | None = None,
        nominal_timeout: float | None = None,
        capture_headers: bool = True,
    ) -> None:
        attrs = {"tracer": tracer, "clock": clock, "nominal_timeout": nominal_timeout,
                 "capture_headers": capture_headers}
        # untraced: urllib3's own class names, which its error messages print
        names = ("TracedHTTPPool", "TracedHTTPSPool") if tracer is not None else (
            "HTTPConnectionPool", "HTTPSConnectionPool")
        self._pool_classes = {
            "http": type(names[0], (_WirePoolMixin, urllib3.HTTPConnectionPool), attrs),
            "https": type(names[1], (_WirePoolMixin, urllib3.HTTPSConnectionPool), attrs),
        }
        super().__init__(max_retries=max_retries)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pool_classes  # type: ignore[assignment]


def traced_session(
    tracer: trace.Tracer | None,
    *,
    post_retries: int = 0,
    clock: VirtualClock | None = None,
    nominal_timeout: float | None = None,
    capture_headers: bool = True,
) -> requests.Session:
    """A requests Session; with `post_retries` > 0 urllib3 resends POSTs after a reset or 5xx
    (`allowed_methods=None` makes every method retryable), as many hand-rolled clients do.
    `tracer=None`: no lab spans (see `clocked_session`); `capture_headers=False`: spans as an
    instrumentation at its defaults writes them (no headers, a resend count on resends)."""
    retry: Retry | int = 0
    if post_retries:
        retry = Retry(
            total=post_retries,
            read=post_retries,
            connect=post_retries,
            allowed_methods=None,
            status_forcelist=(500, 502, 503, 504),
            backoff_factor=0.5,
            raise_on_status=False,
        )
    session = requests.Session()
    adapter = TracedAdapter(tracer, max_retries=retry, clock=clock, nominal_timeout=nominal_timeout,
                            capture_headers=capture_headers)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def clocked_session(
    *,
    post_retries: int = 0,
    clock: VirtualClock | None = None,
    nominal_timeout: float | None = None,
) -> requests.Session:
    """A plain requests Session (urllib3 `Retry` as in `traced_session`) that makes no spans of
    its own: whatever instrumentation wraps `requests` traces it. A timeout still reads as
    `nominal_timeout` on the virtual clock, advanced per attempt below `Session.send`, so a span
    around `send` (opentelemetry-instrumentation-requests) lasts the nominal timeout too."""
    return traced_session(
        None, post_retries=post_retries, clock=clock, nominal_timeout=nominal_timeout
    )


def clocked_stripe_client(
    *,
    timeout: float = 80,
    clock: VirtualClock | None = None,
    nominal_timeout: float | None = None,
) -> stripe.RequestsClient:
    """stripe-python's own requests-based client (`stripe.RequestsClient`, what the SDK uses by
    default), on a `clocked_session`: no lab spans; the SDK's retries and the instrumentation
    of `requests` behave as in the field."""
    session = clocked_session(clock=clock, nominal_timeout=nominal_timeout)
    return stripe.RequestsClient(timeout=timeout, session=session)
