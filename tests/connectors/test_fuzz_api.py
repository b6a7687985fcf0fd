"""Fuzzing the connectors that read an API: the live Stripe connector (the real stripe SDK against
a loopback server answering `GET /v1/events` with bad pages) and the Jaeger / Tempo trace
backends (their query API answering with bad bodies). Every case ends as rows + warnings or one
SourceError; never another exception, never a hang."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.connectors.fuzz_inputs import json_text, json_values, mutate, mutated_records
from tests.connectors.fuzz_summary import check, fuzz_settings, record
from tests.connectors.test_fuzz_provider import EVENTS
from twice.connectors.base import LoadResult, SourceError
from twice.connectors.live import stripe_api
from twice.connectors.live.traces import backend_from_url
from twice.lab.loopback import LoopbackServer

SPANS = Path(__file__).parent / "data" / "spans"
JAEGER: dict[str, Any] = orjson.loads((SPANS / "jaeger_traces.json").read_bytes())
OTLP: dict[str, Any] = orjson.loads((SPANS / "otlp_base64_ids.json").read_bytes())
KEY = "sk_test_fuzz0000000000000000"
SINCE = datetime(2024, 4, 1, tzinfo=UTC)
UNTIL = datetime(2024, 6, 1, tzinfo=UTC)
TRACE_ID = "5b8efff798038103d269b633813fc60c"


class Canned:
    """What the loopback server answers every GET with (status, body), and the paths asked."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b"{}"
        self.paths: list[str] = []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        canned: Canned = self.server.owner  # type: ignore[attr-defined]
        canned.paths.append(self.path)
        self.send_response(canned.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(canned.body)))
        self.send_header("Request-Id", "req_fuzz")
        self.end_headers()
        self.wfile.write(canned.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LoopbackServer, Canned]]:
    canned = Canned()
    srv = LoopbackServer(_Handler, canned, "fuzz-api").serve()
    yield srv, canned
    srv.close()


_status = st.sampled_from([200, 200, 200, 200, 201, 204, 301, 400, 401, 402, 403, 404, 409, 429,
                           500, 502, 503])


# --- stripe_api ---------------------------------------------------------------------------------


def _stripe(server: tuple[LoopbackServer, Canned], subject: str) -> LoadResult:
    srv, _ = server
    result, _fetched = stripe_api.load(KEY, stripe_api.Subject(subject), SINCE, UNTIL,
                                       base_url=srv.url)
    return result


@fuzz_settings(40)
@given(events=mutated_records(EVENTS), has_more=st.sampled_from([True, False, None, "yes"]),
       status=_status)
def test_stripe_api_bad_pages(server: tuple[LoopbackServer, Canned], events: list[Any],
                              has_more: Any, status: int) -> None:
    _, canned = server
    canned.status = status
    canned.body = json_text({"object": "list", "data": events, "has_more": has_more,
                             "url": "/v1/events"})
    result = check("stripe_api", lambda: _stripe(server, "cus_Q1dUOq0l2nDnvT"))
    for text in ([result.reason] if isinstance(result, SourceError)
                 else [w.detail for w in result.warnings]):
        assert KEY not in text


@fuzz_settings(30)
@given(body=json_values.map(json_text) | st.binary(max_size=100), status=_status)
def test_stripe_api_any_body(server: tuple[LoopbackServer, Canned], body: bytes,
                             status: int) -> None:
    _, canned = server
    canned.status, canned.body = status, body
    check("stripe_api", lambda: _stripe(server, "pi_3PBkbBK3pQ9fRwz83k4"))


def test_stripe_api_a_page_that_repeats_forever_stops(
    server: tuple[LoopbackServer, Canned]
) -> None:
    """A server that answers `has_more: true` with the same page again must not be paged
    forever (the next `starting_after` would be the same id)."""
    _, canned = server
    canned.status = 200
    canned.body = json_text({"object": "list", "data": EVENTS[:2], "has_more": True})
    canned.paths.clear()
    result = check("stripe_api", lambda: _stripe(server, "cus_Q1dUOq0l2nDnvT"))
    assert isinstance(result, LoadResult)
    assert len(canned.paths) == 2
    assert any("the same page again" in w.detail for w in result.warnings)


# --- traces (Jaeger, Tempo) ---------------------------------------------------------------------


def _traces(server: tuple[LoopbackServer, Canned], backend: str) -> LoadResult:
    srv, _ = server
    client = backend_from_url(f"{backend}+{srv.url}", timeout_s=5)
    result, _doc = client.get_trace(TRACE_ID)
    return result


def _found(server: tuple[LoopbackServer, Canned], backend: str) -> list[str]:
    srv, _ = server
    client = backend_from_url(f"{backend}+{srv.url}", timeout_s=5)
    return client.find_traces(service="billing-agent", tags={"k": "v"}, start=SINCE, end=UNTIL)


def _find_case(server: tuple[LoopbackServer, Canned], backend: str) -> None:
    """find_traces returns trace ids (32 lower-case hex) or raises one SourceError."""
    try:
        ids = _found(server, backend)
    except SourceError as exc:
        assert exc.source and exc.reason
        record(f"traces_{backend}", "source_error")
        return
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids), ids
    record(f"traces_{backend}", "ok")


_jaeger_docs = st.builds(
    lambda trace, errors: {"data": [trace], "errors": errors},
    mutate(JAEGER["data"][0]), st.none() | st.lists(json_values, max_size=2))
_tempo_docs = st.one_of(
    mutate(OTLP).map(lambda d: {"trace": d}),
    mutate(OTLP).map(lambda d: {"batches": d.get("resourceSpans")}),
)


@fuzz_settings(40)
@given(doc=_jaeger_docs | json_values, status=_status)
def test_jaeger_bad_answers(server: tuple[LoopbackServer, Canned], doc: Any,
                            status: int) -> None:
    _, canned = server
    canned.status, canned.body = status, json_text(doc)
    check("traces_jaeger", lambda: _traces(server, "jaeger"))
    _find_case(server, "jaeger")


@fuzz_settings(40)
@given(doc=_tempo_docs | json_values, status=_status)
def test_tempo_bad_answers(server: tuple[LoopbackServer, Canned], doc: Any, status: int) -> None:
    _, canned = server
    canned.status, canned.body = status, json_text(doc)
    check("traces_tempo", lambda: _traces(server, "tempo"))
    canned.body = json_text({"traces": [doc], "metrics": {}} if isinstance(doc, dict) else doc)
    _find_case(server, "tempo")


@fuzz_settings(20)
@given(body=st.binary(max_size=200), backend=st.sampled_from(["jaeger", "tempo"]))
def test_trace_backends_any_bytes(server: tuple[LoopbackServer, Canned], body: bytes,
                                  backend: str) -> None:
    _, canned = server
    canned.status, canned.body = 200, body
    check(f"traces_{backend}", lambda: _traces(server, backend))
    _find_case(server, backend)


def test_jaeger_answer_with_a_huge_body(server: tuple[LoopbackServer, Canned]) -> None:
    trace = copy.deepcopy(JAEGER["data"][0])
    trace["spans"][0]["operationName"] = "x" * 10_000_000
    _, canned = server
    canned.status, canned.body = 200, json_text({"data": [trace]})
    check("traces_jaeger", lambda: _traces(server, "jaeger"))
