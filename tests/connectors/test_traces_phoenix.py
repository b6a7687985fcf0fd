"""The Phoenix trace backend (`phoenix+http://...`) against the lab's trace server answering
Phoenix's spans API (`GET /v1/projects/{p}/spans/otlpv1`) with the spans the real OpenTelemetry
SDK wrote (test_traces.py's fixture), through the same bounded HTTP client as Jaeger and Tempo."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.connectors.test_traces import (  # noqa: F401 (spans_file: a fixture)
    NOTE,
    SECRET,
    TRACE_A,
    TRACE_B,
    TRACE_C,
    spans_file,
    window,
)
from twice.connectors import spans
from twice.connectors.base import SourceError
from twice.connectors.live.phoenix import PhoenixBackend
from twice.connectors.live.traces import (
    TraceNotFoundError,
    backend_from_url,
    parse_url,
    save_traces,
)
from twice.lab.trace_server import TraceServer
from twice.timeline import validate


@pytest.fixture()
def server(spans_file: Path) -> Iterator[TraceServer]:  # noqa: F811
    with TraceServer(spans_file) as srv:
        yield srv


def _comparable(df: pd.DataFrame) -> pd.DataFrame:
    """Rows without origin and worker: a Phoenix span carries no resource (host.name)."""
    return df.drop(columns=["origin", "worker"]).sort_values("span_id").reset_index(drop=True)


def test_find_traces_by_thread_within_the_window(server: TraceServer) -> None:
    api = backend_from_url(f"phoenix+{server.url}/billing")
    thread_7 = {"gen_ai.conversation.id": "thread-7"}
    assert api.find_traces(tags=thread_7, **window(-60, 600)) == [TRACE_A]
    assert api.find_traces(tags=thread_7, **window(-60, 3 * 3600)) == [TRACE_C, TRACE_A]
    assert api.find_traces(tags=thread_7, limit=1, **window(-60, 3 * 3600)) == [TRACE_C]
    assert api.find_traces(tags={"lab.note": NOTE}, **window(0, 3 * 3600)) == [TRACE_C]
    assert api.find_traces(tags=thread_7, **window(300, 600)) == []
    assert any(path == "/v1/projects/billing/spans/otlpv1" for path, _ in server.requests)


def test_get_trace_gives_the_rows_of_the_original_file(server: TraceServer,
                                                       spans_file: Path) -> None:  # noqa: F811
    endpoint = parse_url(f"phoenix+{server.url}")[1]
    api = PhoenixBackend(endpoint, page_size=1)  # a page a span: the cursor is followed
    rows = spans.load(spans_file).rows
    for trace_id in (TRACE_A, TRACE_B):
        result, doc = api.get_trace(trace_id)
        assert result.warnings == []
        validate(result.rows)
        pd.testing.assert_frame_equal(_comparable(result.rows),
                                      _comparable(rows[rows["trace_id"] == trace_id]))
        assert doc["next_cursor"] is None and len(doc["data"]) >= 2


def test_saved_traces_load_back_as_the_same_rows(server: TraceServer, tmp_path: Path) -> None:
    api = backend_from_url(f"phoenix+{server.url}/default")
    fetched = [api.get_trace(t) for t in (TRACE_A, TRACE_B)]
    path = tmp_path / "spans.jsonl"
    save_traces([doc for _, doc in fetched], "phoenix", path)
    loaded = spans.load(path)
    assert loaded.warnings == []
    got = pd.concat([r.rows for r, _ in fetched], ignore_index=True)
    pd.testing.assert_frame_equal(_comparable(loaded.rows), _comparable(got))


def test_a_missing_trace_is_an_error_naming_it(server: TraceServer) -> None:
    with pytest.raises(TraceNotFoundError, match="not found"):
        backend_from_url(f"phoenix+{server.url}").get_trace("ab" * 16)


def test_the_api_key_is_a_bearer_token_and_never_shown(spans_file: Path) -> None:  # noqa: F811
    with TraceServer(spans_file, auth=("ops", SECRET)) as srv:
        host = srv.url.removeprefix("http://")
        result, _ = backend_from_url(f"phoenix+http://:{SECRET}@{host}/p").get_trace(TRACE_A)
        assert len(result.rows) == 3
        with pytest.raises(SourceError) as err:
            backend_from_url(f"phoenix+http://:wrong-{SECRET}@{host}/p").find_traces(
                tags={"gen_ai.conversation.id": "thread-7"}, **window(-60, 600))
    assert "401" in str(err.value) and SECRET not in str(err.value)


def test_an_answer_that_is_not_phoenixs_is_named(server: TraceServer) -> None:
    server.outage = (200, '{"spans": "no"}')
    with pytest.raises(SourceError, match="not a Phoenix answer"):
        backend_from_url(f"phoenix+{server.url}").get_trace(TRACE_A)
