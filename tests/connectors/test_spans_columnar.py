"""The columnar reader of OTLP JSON lines reads each line it takes exactly as the general way
does, and leaves to the general way every line it cannot read so (issue 24)."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

from twice.connectors.base import Warnings
from twice.connectors.jsonfile import MAX_VALUES
from twice.connectors.spans import fast
from twice.connectors.spans.columnar import Decline, line_starts, span_columns, span_tables
from twice.connectors.spans.model import SpanRecord
from twice.connectors.spans.read import span_documents

T0 = 1_767_225_600_000_000_000
KEYS = ("gen_ai.tool.call.id", "gen_ai.conversation.id", "http.request.method",
        "http.response.status_code", "http.request.header.idempotency-key")


def _general(path: Path) -> list[list[SpanRecord] | None]:
    """Each line's spans the existing way; None where that way warns or reads it slowly."""
    out: list[list[SpanRecord] | None] = []
    for _, doc in span_documents(path, Warnings(), decode=fast.decode):
        out.append(fast.records(doc, "x") if isinstance(doc, fast.FastDocument) else None)
    return out


def _columnar(path: Path, chunk: int = 2**20) -> tuple[list[tuple[Any, ...]], set[int]]:
    """(span fields, declined line numbers) the columnar way."""
    spans: list[tuple[Any, ...]] = []
    declined: set[int] = set()
    starts, general = line_starts(path, MAX_VALUES)
    assert not general
    read = 0
    for first, table in span_tables(path, starts, chunk):
        assert first == read  # the runs take the lines in turn
        cols = span_columns(table)
        declined |= {first + int(n) for n in cols.declined}
        every = np.arange(len(cols.start_ns))
        attrs = {key: cols.attribute(key).python(every) for key in KEYS}
        exceptions: list[list[Any]] = [[] for _ in every]
        for k, *pair in zip(cols.exception_span.tolist(), *(
                cols.exceptions.attribute(key).text.to_pylist()
                for key in ("exception.type", "exception.message")), strict=True):
            exceptions[k].append(tuple(pair))
        fields = zip(cols.trace_id.to_pylist(), cols.span_id.to_pylist(),
                     cols.parent_span_id.to_pylist(), cols.name.to_pylist(),
                     cols.status_message.to_pylist(), strict=True)
        for k, (trace_id, span_id, parent, name, message) in enumerate(fields):
            spans.append((first + int(cols.line[k]), trace_id, span_id, parent, name,
                          int(cols.start_ns[k]), int(cols.end_ns[k]),
                          {key: attrs[key][k] for key in KEYS}, message or None,
                          exceptions[k]))
        read += cols.lines
    assert read == len(starts)
    return spans, declined


def _fields(line: int, rec: SpanRecord) -> tuple[Any, ...]:
    return (line, rec.trace_id, rec.span_id, rec.parent_span_id, rec.name, rec.start_ns,
            rec.end_ns, {key: rec.attributes.get(key) for key in KEYS}, rec.status_message,
            rec.exceptions)


def assert_same(path: Path, chunk: int = 2**20) -> set[int]:
    general = _general(path)
    spans, declined = _columnar(path, chunk)
    expected = [_fields(n, rec) for n, recs in enumerate(general) if n not in declined
                for rec in recs or []]
    assert spans == expected
    assert {n for n, recs in enumerate(general) if recs is None} <= declined
    return declined


def _record(path: Path, calls: int) -> None:
    provider = TracerProvider(resource=Resource.create({"host.name": "worker-a"}))
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(path),
                                                       max_queue_size=max(2 * calls, 512)))
    tracer = provider.get_tracer("lab.agent")
    for n in range(calls):
        at = T0 + n * 10**9
        tool = tracer.start_span("execute_tool charge", start_time=at, attributes={
            "gen_ai.tool.name": "charge", "gen_ai.tool.call.id": f"toolu_{n}",
            "gen_ai.conversation.id": "thread-7"})
        http = tracer.start_span("POST", kind=SpanKind.CLIENT, start_time=at + 1000,
                                 context=trace.set_span_in_context(tool), attributes={
                                     "http.request.method": "POST",
                                     "http.response.status_code": 200,
                                     "http.request.header.idempotency-key": [f"key-{n}"]})
        http.end(end_time=at + 2000)
        tool.end(end_time=at + 3000)
    provider.shutdown()


def test_the_sdks_lines_read_as_the_general_way_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    _record(path, 50)
    assert assert_same(path) == set()


def test_a_file_past_the_chunk_size_reads_run_by_run(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    _record(path, 3000)
    assert path.stat().st_size > 4 * 2**18
    assert assert_same(path, chunk=2**18) == set()



def test_a_run_refused_past_the_first_is_refused_after_the_runs_before_it(
        tmp_path: Path) -> None:
    """Each run is parsed ahead, while the caller works on the one before: a run pyarrow
    refuses still reaches the caller in the file's order, after every run before it, and a
    caller that stops early leaves no parse running on a closed file."""
    path = tmp_path / "traces.jsonl"
    _record(path, 600)
    good = path.read_bytes()
    path.write_bytes(good + b'{"resourceSpans": [\n' + good)
    starts, _ = line_starts(path, MAX_VALUES)
    chunk = 2**14
    assert len(good) > 4 * chunk  # several runs before the refused line
    firsts: list[int] = []
    with pytest.raises(Decline, match="pyarrow refuses"):
        for first, table in span_tables(path, starts, chunk):
            firsts.append(first)
            assert table.num_rows > 0
    before = good.count(b"\n")
    assert firsts[0] == 0 and len(firsts) >= 3
    assert firsts[-1] < before  # every run the caller had lies before the refused line
    runs = span_tables(path, starts, chunk)
    assert next(runs)[0] == 0
    runs.close()  # the caller stops: the parse ahead is waited for, then the file closes
    assert not [t for t in threading.enumerate() if t.name.startswith("twice-spans-parse")]

def _line(**span: Any) -> bytes:
    base: dict[str, Any] = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "POST",
                            "kind": 3, "startTimeUnixNano": str(T0),
                            "endTimeUnixNano": str(T0 + 5), "attributes": []}
    base.update(span)
    return orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [base]}]}]}) + b"\n"


@pytest.mark.parametrize("span", [
    {"traceId": "0" * 32}, {"traceId": "AB" * 16}, {"spanId": "abc"},
    {"parentSpanId": "0" * 16}, {"startTimeUnixNano": "12"},
    {"startTimeUnixNano": "1e18"}, {"endTimeUnixNano": str(T0 - 1)},
    {"endTimeUnixNano": "9" * 20},
    {"attributes": [{"key": "a", "value": {"stringValue": "x", "intValue": "1"}}]},
    {"attributes": [{"key": "a", "value": {}}]},
    {"attributes": [{"key": "a", "value": {"intValue": "-1"}}]},
    {"attributes": [{"key": "a", "value": {"intValue": "9" * 19}}]},
    {"events": [{"name": "exception", "attributes": [
        {"key": "exception.type", "value": {"stringValue": None}}]}]},
    {"events": [{"name": "exception", "attributes": [
        {"key": "exception.message", "value": {"intValue": "1e3"}}]}]},
    {"events": [{"name": "exception", "attributes": [
        {"key": "a", "value": {"boolValue": True, "doubleValue": 1.5}}]}]},
    {"events": [{"name": "exception", "attributes": [{"key": None, "value": {}}]}]},
    {"events": [{"name": "exception", "attributes": [  # read as text the general way
        {"key": "exception.type", "value": {"bytesValue": "QUJD"}}]}]},
], ids=repr)
def test_a_line_the_general_way_warns_about_is_declined(tmp_path: Path,
                                                          span: dict[str, Any]) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_bytes(_line() + _line(**span) + _line(spanId="ef" * 8))
    assert assert_same(path) == {1}


@pytest.mark.parametrize("line", [
    _line(entityRefs=[{"type": "host"}]),  # a field the schema does not hold
    _line(events=[{"name": "retry", "attributes": [  # an event value the schema does not hold
        {"key": "a", "value": {"kvlistValue": {"values": []}}}]}]),
    _line(kind="3"),  # a value of another type
    b'{"resourceSpans": [\n',  # not JSON
    _line(name="caf\u00e9").replace(b"\xc3\xa9", b"\xe9"),  # not UTF-8
], ids=["unknown field", "kvlist event value", "other type", "not JSON", "not UTF-8"])
def test_a_block_pyarrow_refuses_is_declined_whole(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_bytes(_line() + line)
    with pytest.raises(Decline):
        _columnar(path)


_TEXT = st.text(st.characters(codec="utf-8"), max_size=8)  # hostile text: quotes, controls
_HEX = st.text("0123456789abcdefAB", min_size=15, max_size=33)
_TIME = st.one_of(st.integers(0, 10**20).map(str), _TEXT)
_VALUE = st.one_of(
    st.builds(lambda s: {"stringValue": s}, _TEXT),
    st.builds(lambda s: {"intValue": s}, st.one_of(st.integers(-5, 10**19).map(str), _TEXT)),
    st.builds(lambda v: {"arrayValue": {"values": [{"stringValue": s} for s in v]}},
              st.lists(_TEXT, max_size=3)),
    st.just({}),
)


def _mostly(valid: Any, other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The valid value four times in five: most lines then read the columnar way."""
    return st.one_of(*[st.just(valid)] * 4, other)


_SCALAR = st.one_of(
    st.builds(lambda s: {"stringValue": s}, _TEXT),
    st.builds(lambda s: {"intValue": s}, st.one_of(st.integers(-5, 10**19).map(str), _TEXT)),
    st.builds(lambda b: {"boolValue": b}, st.booleans()),
    st.builds(lambda d: {"doubleValue": d}, st.floats(allow_nan=False, allow_infinity=False)),
    st.builds(lambda s: {"bytesValue": s}, _TEXT),
    st.just({}), st.just({"stringValue": None}), st.just({"stringValue": "x", "boolValue": None}),
    st.just({"stringValue": "x", "boolValue": False}))
_EVENT_VALUE = st.one_of(_SCALAR, st.builds(lambda v: {"arrayValue": {"values": v}},
                                             st.lists(_SCALAR, max_size=2)),
                         st.just({"arrayValue": {}}))
_EVENT = st.fixed_dictionaries({"name": _mostly("exception", st.sampled_from(["retry", ""]))},
                               optional={"timeUnixNano": st.just(str(T0)),
                                         "attributes": st.lists(st.fixed_dictionaries({
                                             "key": st.one_of(st.sampled_from([
                                                 "exception.type", "exception.message"]),
                                                 _TEXT, st.none()),
                                             "value": _EVENT_VALUE}), max_size=3)})
_SPAN = st.fixed_dictionaries({
    "traceId": _mostly("ab" * 16, _HEX), "spanId": _mostly("cd" * 8, _HEX),
    "startTimeUnixNano": _mostly(str(T0), _TIME),
    "endTimeUnixNano": _mostly(str(T0 + 5), _TIME),
    "name": _TEXT,
    "attributes": st.lists(st.fixed_dictionaries({
        "key": st.one_of(st.sampled_from(KEYS), _TEXT),
        "value": st.one_of(*[st.builds(lambda s: {"stringValue": s}, _TEXT)] * 4, _VALUE)}),
        max_size=4),
}, optional={"parentSpanId": _mostly("ef" * 8, st.one_of(_HEX, st.just(""))),
             "kind": st.integers(0, 5), "events": st.lists(_EVENT, max_size=2),
             "status": st.fixed_dictionaries({}, optional={
                 "code": st.integers(0, 3), "message": st.one_of(_TEXT, st.none())})})


@settings(deadline=None)  # a loaded machine must not fail it (events make lines longer)
@given(st.lists(st.lists(_SPAN, min_size=1, max_size=3), min_size=1, max_size=4))
def test_generated_lines_read_as_the_general_way_reads_them(lines: list[list[Any]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "traces.jsonl"
        path.write_bytes(b"".join(
            orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + b"\n"
            for spans in lines))
        try:
            assert_same(path)
        except Decline:
            pass  # the whole block goes the general way: nothing to compare
