"""Spans interpreted on columns give the very timeline and warnings the per-span way gives
(issue 24), and a file the columnar way cannot read exactly is declined to the per-span way."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from twice.connectors.base import LoadResult, Warnings
from twice.connectors.jsonfile import MAX_VALUES
from twice.connectors.spans import connector, fast
from twice.connectors.spans.columnar import Decline, line_starts, span_columns, span_tables
from twice.connectors.spans.interpret import Options
from twice.connectors.spans.read import span_documents
from twice.timeline import validate

T0 = 1_767_225_600_000_000_000
DEFAULT = Options()


def _per_span(path: Path, options: Options = DEFAULT) -> LoadResult:
    """The file read as before the columnar way: a line at a time, a span at a time."""
    warnings = Warnings()
    documents = span_documents(path, warnings, decode=fast.decode)
    result = connector.parse_spans(documents, str(path), tool_attribute=options.tool_attribute,
                                   request_id_attribute=options.request_id_attribute)
    result.warnings[:0] = warnings
    return result


def assert_same(path: Path, options: Options = DEFAULT) -> LoadResult:
    """The columnar way (it must not decline) gives what the per-span way gives."""
    expected = _per_span(path, options)
    got = connector._columnar(path, options)
    pd.testing.assert_frame_equal(got.rows, expected.rows)
    assert list(got.warnings) == list(expected.warnings)
    validate(got.rows)
    return got


def _provider(path: Path, host: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"host.name": host}))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))  # a line a span
    return provider


def _fail(span: trace.Span, n: int) -> None:
    """What a failed call leaves on its span through the SDK, in one of several ways: exception
    events (one or two, with or without a message or timeout's words, with attributes of every
    scalar type), a status message, other events, or several of these at once."""
    way = n % 6
    if way in (0, 3, 5):
        error = (TimeoutError("read timed out") if way == 0 else ValueError("card declined")
                 if way == 3 else RuntimeError())
        try:
            raise error
        except Exception as exc:  # noqa: BLE001 - recorded as the SDK records it
            span.record_exception(exc, attributes={"retry.count": n, "fatal": way == 5,
                                                   "backoff": 0.5})
    if way == 3:
        span.record_exception(ConnectionError("upstream deadline exceeded"))
    if way in (1, 3):
        span.set_status(Status(StatusCode.ERROR, f"charge {n} failed: timed out" if way == 1
                               else "card_declined"))
    if way in (2, 5):
        span.add_event("retry", {"attempt": n, "jitter": 0.25, "final": False,
                                 "codes": [500, 502], "ratios": [0.5, 1.0],
                                 "flags": [True, False], "hosts": ["a", "b"]})
    if way == 4:
        span.set_status(Status(StatusCode.OK))
        span.record_exception(KeyError("ignored"))


def _agent_run(path: Path, calls: int, *, threads: bool = True, roots: bool = False,
               failures: bool = False, links_too: bool = False) -> None:
    """What an agent's run exports, through the real SDK: tool spans around HTTP attempts (some
    retried, failed, timed out or replayed), queue receives, OpenInference TOOL spans whose call
    id is only in the returned ToolMessage, HTTP spans as trace roots, old and new HTTP semconv,
    spans of two hosts. `failures`: some tool and HTTP spans carry what `_fail` leaves;
    `links_too`: queue receives link to their tool span, as messaging instrumentations do."""
    for host in ("worker-a", "worker-b"):
        provider = _provider(path, host)
        tracer = provider.get_tracer("lab.agent")
        for n in range(calls):
            at = T0 + n * 10**9 + (host == "worker-b") * 5 * 10**8
            args = orjson.dumps({"customer_id": f"cus_{n % 3}", "amount": 100 * n,
                                 "currency": "USD" if n % 2 else "eur"}).decode()
            tool_attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool",
                                          "gen_ai.tool.call.arguments": args}
            if n % 4:
                tool_attrs["gen_ai.tool.call.id"] = f"toolu_{host}_{n}"
            if n % 5:
                tool_attrs["gen_ai.tool.name"] = "charge"
            if threads:
                tool_attrs["gen_ai.conversation.id"] = f"thread-{n % 2}"
            tool = tracer.start_span("execute_tool charge", start_time=at,
                                     attributes=tool_attrs)
            context = None if roots and n % 3 == 0 else trace.set_span_in_context(tool)
            for attempt in range(1 + n % 3):
                http_attrs: dict[str, Any] = {
                    "http.request.header.idempotency-key": [f"key-{n}"],
                    "http.response.header.request-id": [f"req_{host}_{n}_{attempt}"],
                    "url.full": f"https://api.stripe.com/v1/charges?n={n}",
                    "http.response.status_code": 500 if attempt < n % 3 else 200,
                }
                if n % 2:
                    http_attrs["http.request.method"] = "post"
                else:
                    http_attrs["http.method"] = "POST"
                if attempt:
                    http_attrs["http.request.resend_count"] = attempt
                if n % 7 == 6:
                    http_attrs["http.response.header.idempotent-replayed"] = ["true"]
                if n % 6 == 5:
                    http_attrs["error.type"] = "ReadTimeout: timed out"
                http = tracer.start_span("POST", kind=SpanKind.CLIENT, context=context,
                                         start_time=at + 1000 * (attempt + 1),
                                         attributes=http_attrs)
                if n % 6 == 5:
                    http.set_status(Status(StatusCode.ERROR, None))
                if failures and attempt < n % 3 and n % 4 == 2:
                    _fail(http, n + attempt)
                http.end(end_time=at + 1000 * (attempt + 1) + 500)
            if n % 8 == 3:  # OpenInference: no call id attribute, the id in the output
                output = orjson.dumps({"type": "tool", "data": {
                    "type": "tool", "tool_call_id": f"toolu_oi_{n}", "content": "ok"}}).decode()
                inner = tracer.start_span("charge", context=trace.set_span_in_context(tool),
                                          start_time=at + 10, attributes={
                                              "openinference.span.kind": "TOOL",
                                              "tool.name": "charge", "output.value": output})
                inner.end(end_time=at + 20)
            if n % 4 == 1:
                # a consumer's span links to the span that sent the message (read past)
                links = [trace.Link(tool.get_span_context(), {
                    "messaging.operation.type": "receive", "n": n, "first": n == 1,
                    "lag": 0.25})] if links_too else []
                receive = tracer.start_span("receive", kind=SpanKind.CONSUMER, start_time=at,
                                            links=links, attributes={
                                                "messaging.message.id": f"m-{n}",
                                                "messaging.gcp_pubsub.message.delivery_attempt":
                                                    1 + n % 2,
                                                "gen_ai.conversation.id": f"thread-{n % 2}"})
                receive.end(end_time=at + 5)
            if n % 5 == 0:
                tool.set_status(Status(StatusCode.OK))
            if failures and n % 2:
                _fail(tool, n // 2)
            tool.end(end_time=at + 10_000)
        provider.shutdown()


@pytest.mark.parametrize("shape", [
    {}, {"threads": False}, {"roots": True}, {"threads": False, "roots": True},
], ids=["threads", "no thread ids", "HTTP spans as trace roots", "roots, no thread ids"])
def test_an_agents_spans_read_as_the_per_span_way_reads_them(tmp_path: Path,
                                                             shape: dict[str, Any]) -> None:
    path = tmp_path / "traces.jsonl"
    _agent_run(path, 24, **shape)
    got = assert_same(path)
    kinds = set(got.rows["kind"])
    assert kinds == {"tool_span", "http_span", "queue_receive"}
    assert got.rows["tool_call_id"].notna().any()


def test_links_to_other_spans_are_read_past_on_columns(tmp_path: Path) -> None:
    """A consumer's links to other spans (attributes of every scalar type) keep the file on
    columns, and mean nothing to either way."""
    path = tmp_path / "traces.jsonl"
    _agent_run(path, 24, links_too=True)
    assert '"links"' in path.read_text()
    got = assert_same(path)
    starts, general = line_starts(path, MAX_VALUES)
    assert not general and not any(
        len(span_columns(table).declined) for _, table in span_tables(path, starts))
    plain = tmp_path / "plain.jsonl"
    _agent_run(plain, 24)
    without = connector._columnar(plain, DEFAULT).rows
    ids = ["trace_id", "span_id", "tool_call_id", "thread_id", "outcome"]
    assert got.rows["kind"].tolist() == without["kind"].tolist()
    assert got.rows[ids].isna().equals(without[ids].isna())


@pytest.mark.parametrize("shape", [{}, {"roots": True}], ids=["threads", "roots"])
def test_failed_calls_exception_events_and_status_messages_are_read_on_columns(
        tmp_path: Path, shape: dict[str, Any]) -> None:
    """Spans the SDK gave exception events, status messages and other events (values of every
    type), among ordinary spans: read on columns (not declined), as the per-span way reads
    them."""
    path = tmp_path / "traces.jsonl"
    _agent_run(path, 24, failures=True, **shape)
    text = path.read_text()
    assert '"exception.stacktrace"' in text and '"boolValue"' in text
    assert '"doubleValue"' in text and '"message"' in text
    got = assert_same(path)
    starts, general = line_starts(path, MAX_VALUES)
    assert not general and not any(  # no line left to the per-span way either
        len(span_columns(table).declined) for _, table in span_tables(path, starts))
    details = set(got.rows["detail"].dropna())
    assert "TimeoutError: read timed out" in details
    assert "ConnectionError: upstream deadline exceeded" in details  # the last exception's
    assert "RuntimeError" in details  # an exception without a message
    assert any(d.startswith("charge ") for d in details)  # a status message, no exception
    assert {"timeout", "error", "ok"} <= set(got.rows["outcome"])


def test_the_options_name_the_same_attributes(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    _agent_run(path, 12)
    assert_same(path, Options(tool_attribute="gen_ai.tool.name",
                              request_id_attribute="url.full"))


def test_lines_the_columnar_reader_leaves_are_read_the_per_span_way_in_place(
        tmp_path: Path) -> None:
    """A line with a span the per-span way warns about (an id of zeros, an unreadable value) is
    read that way alone; its rows keep their place among the others, its warnings are given."""
    path = tmp_path / "traces.jsonl"
    _agent_run(path, 6)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    spans = [span for line in lines for rs in line["resourceSpans"] for ss in rs["scopeSpans"]
             for span in ss["spans"]]
    spans[3]["traceId"] = "0" * 32  # no trace id: skipped with a warning
    spans[5]["attributes"][0]["value"] = {"intValue": "-1"}  # read, but not by the columns
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    got = assert_same(path)
    assert got.warnings  # the per-span way's own warnings on those lines


def _declines(path: Path) -> None:
    with pytest.raises(Decline):
        connector._columnar(path, Options())
    loaded = connector.load(path)  # the per-span way, as before
    expected = _per_span(path)
    pd.testing.assert_frame_equal(loaded.rows, expected.rows)
    assert list(loaded.warnings) == list(expected.warnings)


def test_a_span_given_twice_is_declined_to_the_per_span_way(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    _agent_run(path, 4)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines + lines[:1]))
    _declines(path)


def _first_span_with(key: str, change: Any) -> Any:
    def edit(lines: list[Any]) -> None:
        for line in lines:
            for rs in line["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for span in ss["spans"]:
                        for pair in span["attributes"]:
                            if pair["key"] == key:
                                change(span, pair)
                                return
        raise AssertionError(key)
    return edit


@pytest.mark.parametrize("edit", [
    _first_span_with("gen_ai.operation.name",  # Langfuse's attributes: read per span
                     lambda span, pair: pair.update(key="langfuse.observation.type")),
    _first_span_with("gen_ai.operation.name",  # an event value the schema does not hold
                     lambda span, pair: span.update(events=[{"name": "exception", "attributes": [
                         {"key": "exception.type", "value": {"stringValue": "ValueError"}},
                         {"key": "state", "value": {"kvlistValue": {"values": []}}}]}])),
    _first_span_with("gen_ai.operation.name",  # a link value the schema does not hold
                     lambda span, pair: span.update(links=[{
                         "traceId": span["traceId"], "spanId": span["spanId"], "attributes": [
                             {"key": "state", "value": {"kvlistValue": {"values": []}}}]}])),
    _first_span_with("gen_ai.operation.name",  # a field the schema does not hold
                     lambda span, pair: span.update(entityRefs=[])),
], ids=["Langfuse", "a kvlist event value", "a kvlist link value", "an unknown field"])
def test_a_file_the_columns_cannot_read_exactly_is_declined(tmp_path: Path, edit: Any) -> None:
    _declines(_edited(tmp_path, edit))


@pytest.mark.parametrize("edit", [
    _first_span_with("gen_ai.tool.call.arguments",
                     lambda span, pair: pair.update(value={"intValue": "7"})),
    _first_span_with("messaging.gcp_pubsub.message.delivery_attempt",
                     lambda span, pair: pair.update(value={"stringValue": " 2"})),
    _first_span_with("gen_ai.conversation.id",
                     lambda span, pair: pair.update(value={"stringValue": '["thread-9"]'})),
], ids=["arguments as an int", "a count as text", "a thread id as JSON text"])
def test_values_of_other_types_are_read_one_by_one(tmp_path: Path, edit: Any) -> None:
    assert_same(_edited(tmp_path, edit))


def _edited(tmp_path: Path, edit: Any) -> Path:
    path = tmp_path / "traces.jsonl"
    _agent_run(path, 4)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    edit(lines)
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def test_a_parent_loop_is_declined(tmp_path: Path) -> None:
    def span(span_id: str, parent: str, **attrs: str) -> dict[str, Any]:
        return {"traceId": "ab" * 16, "spanId": span_id, "parentSpanId": parent, "name": "x",
                "kind": 3, "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 5),
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in
                               {"http.request.method": "POST", **attrs}.items()]}
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [s]}]}]})
                              + b"\n" for s in (
        span("a1" * 8, "b1" * 8, **{"gen_ai.conversation.id": "t-a"}),
        span("b1" * 8, "a1" * 8))))
    _declines(path)


# generated spans: any mix of the attributes the interpretation reads, in every form a value
# may take (text to strip, JSON-looking text, ints, header arrays), under random parents
_KEYS = ("gen_ai.conversation.id", "session.id", "thread_id", "gen_ai.tool.call.id",
         "tool_call.id", "gen_ai.tool.name", "gen_ai.operation.name", "openinference.span.kind",
         "gen_ai.tool.call.arguments", "input.value", "tool.parameters", "output.value",
         "http.request.method", "http.method", "http.response.status_code", "url.full",
         "http.target", "http.request.resend_count", "http.response.header.request-id",
         "http.response.header.idempotent-replayed", "http.request.header.idempotency-key",
         "http.request.header.x-envoy-attempt-count", "error.type", "messaging.message.id",
         "messaging.rabbitmq.x_delivery_count", "host.name")
_TEXT = st.one_of(
    st.sampled_from(["POST", "get", "execute_tool", "TOOL", "tool", "true", "1", " x ", "",
                     "[1]", '["a", "b"]', "[", "https://a.example/v1/x?q=1", "/v1/y",
                     '{"customer": "cus_1", "amount": 5, "currency": "EUR"}', "{}", "{bad",
                     '{"type": "tool", "data": {"type": "tool", "tool_call_id": "c1"}}',
                     "timed out", "Deadline exceeded", "caf\u00e9", "\u00a0x"]),
    st.text(st.characters(codec="utf-8"), max_size=6))
_VALUE = st.one_of(
    *[st.builds(lambda s: {"stringValue": s}, _TEXT)] * 3,
    st.builds(lambda n: {"intValue": str(n)}, st.integers(0, 10**18)),
    st.builds(lambda v: {"arrayValue": {"values": [{"stringValue": s} for s in v]}},
              st.lists(_TEXT, max_size=2)))


# events: exception events whose type and message are text (words of a timeout among them),
# empty, of another type or absent; other events with values of other types
_EVENT_VALUE = st.one_of(
    *[st.builds(lambda s: {"stringValue": s}, _TEXT)] * 3,
    st.builds(lambda n: {"intValue": str(n)}, st.integers(0, 10**18)),
    st.builds(lambda b: {"boolValue": b}, st.booleans()),
    st.builds(lambda d: {"doubleValue": d}, st.floats(-1e3, 1e3)),
    st.builds(lambda s: {"bytesValue": s}, st.sampled_from(["QUJD", "dGltZWQgb3V0"])),
    st.builds(lambda v: {"arrayValue": {"values": [{"doubleValue": d} for d in v]}},
              st.lists(st.floats(-1, 1), max_size=2)))
_EVENT = st.fixed_dictionaries({
    "name": st.sampled_from(["exception", "exception", "retry", "Exception"]),
    "timeUnixNano": st.just(str(T0)),
    "attributes": st.lists(st.fixed_dictionaries({
        "key": st.sampled_from(["exception.type", "exception.message", "exception.stacktrace",
                                "exception.escaped", "attempt"]),
        "value": _EVENT_VALUE}), max_size=4)})


@st.composite
def _spans(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for n in range(draw(st.integers(1, 8))):
        trace_id = draw(st.sampled_from(["ab" * 16, "cd" * 16]))
        parent = draw(st.one_of(st.none(), st.integers(0, 9)))
        keys = draw(st.lists(st.sampled_from(_KEYS), max_size=6))
        span: dict[str, Any] = {
            "traceId": trace_id, "spanId": "", "name": draw(st.sampled_from(
                ["execute_tool charge", "execute_tool  ", "POST", "x"])),
            "startTimeUnixNano": str(T0 + n), "endTimeUnixNano": str(T0 + n + 5),
            "attributes": [{"key": key, "value": draw(_VALUE)} for key in keys]}
        if parent is not None:
            span["parentSpanId"] = parent  # an id, once the spans of every line are numbered
        if (kind := draw(st.one_of(st.none(), st.integers(0, 6)))) is not None:
            span["kind"] = kind
        status = draw(st.fixed_dictionaries({}, optional={
            "code": st.integers(0, 3), "message": st.one_of(_TEXT, st.none())}))
        if status or draw(st.booleans()):
            span["status"] = status
        if events := draw(st.lists(_EVENT, max_size=3)):
            span["events"] = events
        out.append(span)
    return out


_HOSTS = st.lists(st.sampled_from(["worker-a", " worker-b", "[1]", "caf\u00e9"]), max_size=2)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_spans(), min_size=1, max_size=4), st.data())
def test_generated_spans_read_as_the_per_span_way_reads_them(lines: list[list[Any]],
                                                             data: st.DataObject) -> None:
    """Lines of one or more ResourceSpans (each with its own hosts) of one or more scopes."""
    every = [span for spans in lines for span in spans]
    for n, span in enumerate(every):  # ids unique across lines; a parent before (no loop) or
        span["spanId"] = f"{n + 1:016x}"  # an unknown one, on any line
        if "parentSpanId" in span:
            up = span["parentSpanId"] % (n + 1)
            span["parentSpanId"] = f"{up + 1 if up < n else len(every) + 9:016x}"

    def resource_spans(spans: list[Any]) -> list[Any]:
        cut = data.draw(st.integers(0, len(spans)))  # two ResourceSpans, the first maybe empty
        return [{"resource": {"attributes": [
                    {"key": "host.name", "value": {"stringValue": h}}
                    for h in data.draw(_HOSTS)]},
                 "scopeSpans": [{"spans": part[:1]}, {"spans": part[1:]}]}
                for part in (spans[:cut], spans[cut:])]

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "traces.jsonl"
        path.write_bytes(b"".join(orjson.dumps({"resourceSpans": resource_spans(spans)}) + b"\n"
                                  for spans in lines))
        try:
            connector._columnar(path, Options())
        except Decline:
            event("declined")
            _declines(path)
            return
        event("read on columns")
        assert_same(path)


def test_a_file_of_one_line_is_one_document(tmp_path: Path) -> None:
    """One export line (a BatchSpanProcessor's flush): its rows are named by the file alone."""
    path = tmp_path / "traces.jsonl"
    _agent_run(path, 3)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    path.write_bytes(orjson.dumps({"resourceSpans": [
        rs for line in lines for rs in line["resourceSpans"]]}) + b"\n")
    got = assert_same(path)
    assert set(got.rows["origin"]) == {str(path)}
