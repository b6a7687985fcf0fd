"""Trace backends (Jaeger, Tempo) against the lab's TraceServer, fed spans the real OpenTelemetry
SDK wrote with `opentelemetry-exporter-otlp-json-file`: what they fetch must be what the spans
connector reads from the original file."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypedDict

import httpx
import pandas as pd
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode

from twice.connectors import spans
from twice.connectors.base import SourceError
from twice.connectors.live.tempo import traceql
from twice.connectors.live.traces import TraceNotFoundError, backend_from_url, save_traces
from twice.lab.trace_server import TraceServer, parse_traceql
from twice.timeline import validate

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TRACE_A = "5b8efff798038103d269b633813fc60c"  # billing-agent, thread-7, at T0
TRACE_B = "0000000000000000" "00f067aa0ba902b7"  # mailer, thread-9; Jaeger/Tempo drop the zeros
TRACE_C = "a3ce929d0e0e47364bf92f3577b34da6"  # billing-agent, thread-7, two hours later
NOTE = 'a "quoted" \\ value'
SECRET = "s3cret-t0ken"
BACKENDS = ["jaeger", "tempo"]


def ns(seconds: float) -> int:
    return int((T0 - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 10**9 \
        + round(seconds * 1e9) + 789  # sub-microsecond digits: Jaeger keeps microseconds only


class FixedTraceIds(RandomIdGenerator):
    def __init__(self, trace_id: str) -> None:
        self.trace_id = int(trace_id, 16)

    def generate_trace_id(self) -> int:
        return self.trace_id


def _tracer(path: Path, service: str, host: str, trace_id: str) -> tuple[TracerProvider,
                                                                         trace.Tracer]:
    provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                        "host.name": host}),
                              id_generator=FixedTraceIds(trace_id))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    return provider, provider.get_tracer("lab.agent", "1.0")


def _charge(path: Path, trace_id: str, at: float, call_id: str, note: str | None = None) -> None:
    """A billing-agent run: a charge tool whose first HTTP attempt times out and is resent."""
    provider, tracer = _tracer(path, "billing-agent", "worker-a", trace_id)
    root = tracer.start_span("invoke_agent billing", start_time=ns(at), attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "thread-7"})
    attrs = {"gen_ai.tool.name": "create_charge", "gen_ai.tool.call.id": call_id,
             "gen_ai.conversation.id": "thread-7",
             "gen_ai.tool.call.arguments": '{"customer": "cus_9", "amount": 5000}'}
    if note is not None:
        attrs["lab.note"] = note
    tool = tracer.start_span("execute_tool create_charge", context=trace.set_span_in_context(root),
                             start_time=ns(at + 1), attributes=attrs)
    in_tool = trace.set_span_in_context(tool)
    first = tracer.start_span("POST", context=in_tool, kind=SpanKind.CLIENT,
                              start_time=ns(at + 1.1), attributes={
                                  "http.request.method": "POST",
                                  "url.full": "https://api.stripe.com/v1/charges",
                                  "error.type": "httpx.ReadTimeout"})
    first.record_exception(httpx.ReadTimeout("The read operation timed out"),
                           timestamp=ns(at + 31.1))
    first.set_status(Status(StatusCode.ERROR, "The read operation timed out"))
    first.end(end_time=ns(at + 31.1))
    tracer.start_span("POST", context=in_tool, kind=SpanKind.CLIENT, start_time=ns(at + 31.7),
                      attributes={"http.request.method": "POST",
                                  "url.full": "https://api.stripe.com/v1/charges",
                                  "http.request.resend_count": 1,
                                  "http.response.status_code": 200,
                                  "http.response.header.request-id": [f"req_{call_id}"]},
                      ).end(end_time=ns(at + 32.2005))
    tool.set_status(Status(StatusCode.OK))
    tool.end(end_time=ns(at + 32.3))
    root.end(end_time=ns(at + 35))
    provider.shutdown()


def _receipt(path: Path) -> None:
    provider, tracer = _tracer(path, "mailer", "worker-b", TRACE_B)
    tool = tracer.start_span("execute_tool send_receipt", start_time=ns(60), attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "send_receipt",
        "gen_ai.tool.call.id": "toolu_02", "gen_ai.conversation.id": "thread-9"})
    tracer.start_span("POST", context=trace.set_span_in_context(tool), kind=SpanKind.CLIENT,
                      start_time=ns(60.2), attributes={
                          "http.request.method": "POST", "url.path": "/v3/mail/send",
                          "http.response.status_code": 502,
                          "http.response.header.request-id": ["req_mail"]},
                      ).end(end_time=ns(60.9))
    tool.end(end_time=ns(61))
    provider.shutdown()


@pytest.fixture(scope="module")
def spans_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "spans.jsonl"
    _charge(path, TRACE_A, 0, "toolu_01")
    _receipt(path)
    _charge(path, TRACE_C, 7200, "toolu_03", note=NOTE)
    return path


@pytest.fixture()
def server(spans_file: Path) -> Iterator[TraceServer]:
    with TraceServer(spans_file) as srv:
        yield srv


def expected_rows(spans_file: Path, trace_id: str) -> pd.DataFrame:
    rows = spans.load(spans_file).rows
    return rows[rows["trace_id"] == trace_id]


def comparable(df: pd.DataFrame, backend: str) -> pd.DataFrame:
    """Rows without `origin`; for Jaeger (microseconds on the wire) times floored to us and
    `end` dropped (compared apart: Jaeger rebuilds it from start + duration)."""
    out = df.drop(columns=["origin"]).sort_values("span_id").reset_index(drop=True)
    if backend == "jaeger":
        for column in ("at", "at_aligned"):
            out[column] = out[column].dt.floor("us")
        out = out.drop(columns=["end"])
    return out


def assert_same_rows(got: pd.DataFrame, want: pd.DataFrame, backend: str) -> None:
    validate(got)
    pd.testing.assert_frame_equal(comparable(got, backend), comparable(want, backend))
    got_end = got.sort_values("span_id")["end"].reset_index(drop=True)
    want_end = want.sort_values("span_id")["end"].reset_index(drop=True)
    if backend == "jaeger":  # start (us) + duration (us) may land 1 us below the true end
        gap = want_end.dt.floor("us") - got_end
        assert gap.between(pd.Timedelta(0), pd.Timedelta(microseconds=1)).all(), gap
    else:
        pd.testing.assert_series_equal(got_end, want_end)


class Window(TypedDict):
    start: datetime
    end: datetime


def window(start_s: float, end_s: float) -> Window:
    return {"start": T0 + timedelta(seconds=start_s), "end": T0 + timedelta(seconds=end_s)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_find_traces_by_tag_and_service_within_the_window(
    server: TraceServer, backend: str
) -> None:
    api = backend_from_url(f"{backend}+{server.url}")
    thread_7 = {"gen_ai.conversation.id": "thread-7"}
    assert api.find_traces(tags=thread_7, **window(-60, 600)) == [TRACE_A]
    assert api.find_traces(tags=thread_7, **window(-60, 3 * 3600)) == [TRACE_C, TRACE_A]
    assert api.find_traces(tags=thread_7, service="billing-agent", limit=1,
                           **window(-60, 3 * 3600)) == [TRACE_C]
    assert api.find_traces(service="mailer", **window(-60, 600)) == [TRACE_B]
    assert api.find_traces(service="mailer", **window(300, 600)) == []
    assert api.find_traces(tags={"lab.note": NOTE}, **window(0, 3 * 3600)) == [TRACE_C]
    assert api.find_traces(tags=thread_7, service="mailer", **window(-60, 3 * 3600)) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_get_trace_gives_the_rows_of_the_original_file(
    server: TraceServer, spans_file: Path, backend: str
) -> None:
    api = backend_from_url(f"{backend}+{server.url}")
    for trace_id in (TRACE_A, TRACE_B):
        result, doc = api.get_trace(trace_id)
        want = expected_rows(spans_file, trace_id)
        assert len(want) == (3 if trace_id == TRACE_A else 2)
        assert result.warnings == []
        assert_same_rows(result.rows, want, backend)
        assert set(result.rows["origin"]) == {f"{backend}+{server.url}/api/"
                                              f"{'v2/' if backend == 'tempo' else ''}traces/"
                                              f"{trace_id}"}
    tool = result.rows[result.rows["kind"] == "tool_span"].iloc[0]
    assert (tool["tool_call_id"], tool["thread_id"]) == ("toolu_02", "thread-9")
    http = result.rows[result.rows["kind"] == "http_span"].iloc[0]
    assert (http["request_id"], http["status"], http["outcome"]) == ("req_mail", 502, "error")


def test_jaeger_answers_in_jaegers_model(server: TraceServer) -> None:
    _, doc = backend_from_url(f"jaeger+{server.url}").get_trace(TRACE_B)
    (trace_doc,) = doc["data"]
    assert trace_doc["traceID"] == "f067aa0ba902b7"  # Jaeger prints no leading zeros
    assert {p["serviceName"] for p in trace_doc["processes"].values()} == {"mailer"}
    http = next(s for s in trace_doc["spans"] if s["operationName"] == "POST")
    assert http["references"][0]["refType"] == "CHILD_OF"
    assert {"key": "span.kind", "type": "string", "value": "client"} in http["tags"]
    assert {"key": "http.response.status_code", "type": "int64", "value": 502} in http["tags"]
    assert isinstance(http["startTime"], int) and http["duration"] == 700_000


@pytest.mark.parametrize("backend", BACKENDS)
def test_saved_traces_load_back_as_the_same_rows(
    server: TraceServer, tmp_path: Path, backend: str
) -> None:
    api = backend_from_url(f"{backend}+{server.url}")
    fetched = [api.get_trace(t) for t in (TRACE_A, TRACE_B)]
    path = tmp_path / f"{backend}.json"
    save_traces([doc for _, doc in fetched], backend, path)
    loaded = spans.load(path)
    assert loaded.warnings == []
    got = pd.concat([r.rows for r, _ in fetched], ignore_index=True)
    pd.testing.assert_frame_equal(comparable(loaded.rows, "tempo"), comparable(got, "tempo"))
    if backend == "tempo":
        assert len(path.read_text().splitlines()) == 2  # one OTLP export object per trace


def test_tempo_falls_back_to_the_v1_api_of_an_older_tempo(spans_file: Path) -> None:
    with TraceServer(spans_file, tempo_v2=False) as srv:
        api = backend_from_url(f"tempo+{srv.url}/tempo")
        result, doc = api.get_trace(TRACE_A)
        assert "batches" in doc
        assert_same_rows(result.rows, expected_rows(spans_file, TRACE_A), "tempo")
        api.get_trace(TRACE_B)
        paths = [p for p, _ in srv.requests]
        assert paths == [f"/tempo/api/v2/traces/{TRACE_A}", f"/tempo/api/traces/{TRACE_A}",
                         f"/tempo/api/traces/{TRACE_B}"]  # v2 is not asked again


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_missing_trace_is_an_error_naming_it(server: TraceServer, backend: str) -> None:
    missing = "1" * 32
    with pytest.raises(TraceNotFoundError, match=f"trace {missing} not found"):
        backend_from_url(f"{backend}+{server.url}").get_trace(missing)
    with pytest.raises(ValueError, match="not a trace id"):
        backend_from_url(f"{backend}+{server.url}").get_trace("not-hex")


@pytest.mark.parametrize("backend", BACKENDS)
def test_unreachable_backend_is_a_source_error(backend: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    api = backend_from_url(f"{backend}+http://ops:{SECRET}@127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(SourceError) as err:
        api.find_traces(service="mailer", **window(0, 60))
    assert err.value.source == f"{backend}+http://ops:***@127.0.0.1:{port}"
    assert "cannot reach" in err.value.reason and SECRET not in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_credentials_are_sent_as_basic_auth_and_never_shown(
    spans_file: Path, backend: str
) -> None:
    with TraceServer(spans_file, auth=("ops", SECRET)) as srv:
        host = srv.url.removeprefix("http://")
        result, _ = backend_from_url(f"{backend}+http://ops:{SECRET}@{host}").get_trace(TRACE_A)
        assert len(result.rows) == 3 and srv.requests[-1][1] == "ops"
        assert not result.rows.astype(str).apply(lambda c: c.str.contains(SECRET)).any().any()
        with pytest.raises(SourceError, match="HTTP 401") as err:
            backend_from_url(f"{backend}+http://ops:wrong-{SECRET}@{host}").find_traces(
                service="mailer", **window(0, 60))
        assert SECRET not in str(err.value) and "***" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("userinfo", [f"ops:wrong-{SECRET}", f"tok-{SECRET}"],
                         ids=["user-and-password", "token-as-user"])
def test_a_backend_that_echoes_the_credentials_shows_none_of_them(
    spans_file: Path, backend: str, userinfo: str
) -> None:
    """A 401 page quoting the Authorization header, the decoded user:password and the URL
    with them in it (as some proxies do): the error names the backend, never the secret."""
    secret = userinfo.partition(":")[2] or userinfo
    basic = base64.b64encode((userinfo if ":" in userinfo else userinfo + ":").encode()).decode()
    with TraceServer(spans_file, auth=("ops", SECRET), echo_credentials=True) as srv:
        host = srv.url.removeprefix("http://")
        with pytest.raises(SourceError, match="HTTP 401") as err:
            backend_from_url(f"{backend}+http://{userinfo}@{host}").find_traces(
                service="mailer", **window(0, 60))
        # the echo really carries the secret: unmasked, it would be in the message
        with httpx.Client() as client:
            raw = client.get(f"{srv.url}/api/search", auth=(
                userinfo.partition(":")[0], userinfo.partition(":")[2])).text
        assert secret in raw and basic in raw
    for text in (str(err.value), repr(err.value), err.value.source):
        assert secret not in text and basic not in text
    # masked before it was cut, and only the start of the page is quoted
    assert "***" in err.value.reason and "Authorization" not in err.value.reason
    quoted = err.value.reason.partition("/api/search: ")[2] or err.value.reason.partition(
        "/api/traces: ")[2]
    assert 0 < len(quoted) <= 61


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("status", "body", "reason"), [
    (503, "upstream connect error", "HTTP 503 for GET /api/"),
    (200, "<html>Sign in</html>", "not JSON"),
])
def test_error_pages_are_source_errors(
    server: TraceServer, backend: str, status: int, body: str, reason: str
) -> None:
    server.outage = (status, body)
    with pytest.raises(SourceError, match=reason):
        backend_from_url(f"{backend}+{server.url}").get_trace(TRACE_A)


@pytest.mark.parametrize(("backend", "other"), [("jaeger", "tempo"), ("tempo", "jaeger")])
def test_a_backend_of_the_other_kind_is_named_not_misread(
    server: TraceServer, backend: str, other: str
) -> None:
    with pytest.raises(SourceError, match=f"not a {backend.title()} answer"):
        backend_from_url(f"{backend}+{server.url}/{other}").get_trace(TRACE_A)


@pytest.mark.parametrize("url", ["http://127.0.0.1:16686", "zipkin+http://h:9411",
                                 "jaeger+ftp://h", "tempo+https://"])
def test_backend_from_url_names_the_accepted_forms(url: str) -> None:
    with pytest.raises(ValueError, match=r"jaeger\+http://host:16686.*tempo\+http"):
        backend_from_url(url)


@pytest.mark.parametrize(("url", "why"), [
    ("jaeger+http://[::1:bad", "Invalid IPv6 URL"),
    ("tempo+http://reader:s3cret@[::1/tempo", "Invalid IPv6 URL"),
    ("jaeger+http://h:99999", "Port out of range"),
    ("jaeger+http://h:port", "Port could not be cast"),
])
def test_a_malformed_url_is_named_with_why(url: str, why: str) -> None:
    with pytest.raises(ValueError) as caught:
        backend_from_url(url)
    message = str(caught.value)
    assert why in message and "s3cret" not in message
    assert url.replace("s3cret", "***") in message  # the source, named (password masked)


def test_traceql_quotes_names_and_values() -> None:
    query = traceql("bill\"ing", {"gen_ai.conversation.id": "t-7", "x-request-id": 'a"b\\c'})
    assert query == ('{ .gen_ai.conversation.id = "t-7" && ."x-request-id" = "a\\"b\\\\c" '
                     '&& resource.service.name = "bill\\"ing" }')
    assert parse_traceql(query) == [("", "gen_ai.conversation.id", "=", "t-7"),
                                    ("", "x-request-id", "=", 'a"b\\c'),
                                    ("resource", "service.name", "=", 'bill"ing')]
    assert traceql() == "{}"
