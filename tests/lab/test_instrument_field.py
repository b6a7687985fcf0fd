"""Lab workers traced by the REAL field instrumentation (OpenInference's LangChain instrumentor,
OpenTelemetry's `requests` instrumentor, at their defaults), not traced at all, or with a skewed
span clock; and what the spans connector reads from them, as OTLP JSON lines and as Jaeger JSON.

Every run is a real LangGraph run of the lab agent against the lab Stripe server, on the
virtual clock. Assertions depend on no machine speed: the virtual clock's nominal timeouts are
lower bounds, ids and attributes are exact, and the byte-for-byte check runs on frozen time.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import langgraph.checkpoint.base.id as langgraph_ids
import pandas as pd
import pytest
import requests
import stripe
import time_machine
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from twice.connectors import spans as spans_connector
from twice.lab import instrument_field
from twice.lab.agent import Instrumentation, ToolOptions, Worker, WorkerCrashed
from twice.lab.jaeger_export import write_jaeger
from twice.lab.lab_run import Bench, bench
from twice.lab.scenario_kit import EFFECT_PATH, REAL_TIMEOUT, SLOW_ANSWER, ask, tool_call_ids
from twice.lab.stripe_server import Fault, FaultKind

START = dt.datetime(2026, 2, 2, 10, 0, tzinfo=dt.UTC)
NOMINAL = 30.0  # the client timeout as it reads on the virtual clock
OI_SCOPE = "openinference.instrumentation.langchain"
REQUESTS_SCOPE = "opentelemetry.instrumentation.requests"
FIELD_TOOL = ToolOptions(client="stripe", on_timeout="raise", timeout=REAL_TIMEOUT,
                         nominal_timeout=NOMINAL)


# ---------------------------------------------------------------------------- reading spans


def _value(v: dict[str, Any]) -> Any:
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    ((kind, raw),) = v.items()
    return int(raw) if kind == "intValue" else raw


def _attrs(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {a["key"]: _value(a["value"]) for a in items or []}


def read_spans(path: Path) -> list[dict[str, Any]]:
    """Every span of an OTLP JSON lines file, with `attrs`, `host` and `scope` beside it."""
    out = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            resource = _attrs(rs["resource"]["attributes"])
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    out.append({**s, "attrs": _attrs(s.get("attributes")),
                                "host": resource["host.name"], "resource": resource,
                                "scope": ss["scope"]["name"]})
    return out


def of(all_spans: list[dict[str, Any]], host: str, scope: str | None = None,
       name: str | None = None) -> list[dict[str, Any]]:
    return [s for s in all_spans if s["host"] == host and (scope is None or s["scope"] == scope)
            and (name is None or s["name"] == name)]


def seconds(span: dict[str, Any]) -> float:
    return (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1e9


def exception_types(span: dict[str, Any]) -> list[str]:
    return [_attrs(e.get("attributes"))["exception.type"] for e in span.get("events", [])
            if e["name"] == "exception"]


# ---------------------------------------------------------------------------- the runs


@dataclass
class Run:
    thread: str
    call_ids: list[str]
    virtual_seconds: float  # how far the virtual clock moved during the run
    error: BaseException | None = None


@dataclass
class FieldRuns:
    folder: Path
    runs: dict[str, Run] = field(default_factory=dict)

    @property
    def spans_path(self) -> Path:
        return self.folder / "spans.jsonl"


def run_one(b: Bench, worker: Worker, fault: FaultKind | None = None) -> Run:
    if fault is not None:
        seconds_ = SLOW_ANSWER if fault == "delay_after_commit" else 0.0
        b.server.add_fault(Fault(kind=fault, path=EFFECT_PATH, seconds=seconds_))
    thread = b.new_thread()
    before = b.clock.now()
    error: BaseException | None = None
    try:
        worker.run(thread, ask(b))
    except (stripe.APIConnectionError, requests.ConnectionError) as exc:
        error = exc
    moved = (b.clock.now() - before).total_seconds()
    return Run(thread, tool_call_ids(b.checkpointer, thread), moved, error)


@pytest.fixture(scope="module")
def field_runs(tmp_path_factory: pytest.TempPathFactory) -> FieldRuns:
    """One bench, one process: field-instrumented workers beside lab and untraced ones."""
    out = FieldRuns(tmp_path_factory.mktemp("field"))
    with bench(out.folder, seed=21, start=START, noise=0) as b:
        oi = b.worker("worker-oi", FIELD_TOOL, instrumentation="openinference")
        oi_raw = b.worker("worker-oi-raw", ToolOptions(client="raw", on_timeout="raise",
                                                       timeout=10.0),
                          instrumentation="openinference")
        lab = b.worker("worker-lab", FIELD_TOOL)
        quiet = b.worker("worker-none", FIELD_TOOL, instrumentation="none")
        out.runs["oi_ok"] = run_one(b, oi)
        out.runs["lab_ok"] = run_one(b, lab)
        out.runs["none_ok"] = run_one(b, quiet)
        out.runs["oi_timeout"] = run_one(b, oi, "delay_after_commit")
        out.runs["lab_timeout"] = run_one(b, lab, "delay_after_commit")
        out.runs["oi_reset"] = run_one(b, oi_raw, "reset_after_commit")
        out.runs["oi_ok_2"] = run_one(b, oi)
    return out


@pytest.fixture(scope="module")
def field_spans(field_runs: FieldRuns) -> list[dict[str, Any]]:
    return read_spans(field_runs.spans_path)


@pytest.fixture(scope="module")
def field_rows(field_runs: FieldRuns) -> pd.DataFrame:
    result = spans_connector.load(field_runs.spans_path)
    assert result.warnings == []
    return result.rows


# ---------------------------------------------------------------------------- what is written


def test_the_runs_went_as_planned(field_runs: FieldRuns) -> None:
    runs = field_runs.runs
    assert all(len(r.call_ids) == 1 for r in runs.values())
    assert [k for k, r in runs.items() if r.error is not None] == [
        "oi_timeout", "lab_timeout", "oi_reset"]
    assert isinstance(runs["oi_timeout"].error, stripe.APIConnectionError)
    assert isinstance(runs["oi_reset"].error, requests.ConnectionError)


def test_openinference_tool_span_is_the_instrumentations_own(
        field_runs: FieldRuns, field_spans: list[dict[str, Any]]) -> None:
    tools = of(field_spans, "worker-oi", OI_SCOPE, "charge_subscription")
    by_thread = {s["attrs"]["session.id"]: s for s in tools}
    ok, failed = field_runs.runs["oi_ok"], field_runs.runs["oi_timeout"]
    assert set(by_thread) == {ok.thread, failed.thread, field_runs.runs["oi_ok_2"].thread}
    for span in tools:
        attrs = span["attrs"]
        assert attrs["openinference.span.kind"] == "TOOL"
        assert attrs["tool.name"] == "charge_subscription"
        assert set(json.loads(attrs["input.value"])) == {"customer_id", "amount", "currency"}
        assert json.loads(attrs["metadata"])["thread_id"] == attrs["session.id"]
        # no tool call id attribute of any name
        assert not [k for k in attrs if "call" in k and k.endswith("id")]
        assert span["kind"] == 1 and span.get("parentSpanId")  # under LangGraph's `tools` chain
    # success: the id only inside output.value, the serialised ToolMessage
    message = json.loads(by_thread[ok.thread]["attrs"]["output.value"])
    assert message["type"] == "tool" and message["data"]["type"] == "tool"
    assert message["data"]["tool_call_id"] == ok.call_ids[0]
    assert message["data"]["status"] == "success"
    # failure: error status and an exception event, no output at all
    bad = by_thread[failed.thread]
    assert "output.value" not in bad["attrs"]
    assert bad["status"]["code"] == 2
    assert exception_types(bad) == ["stripe._error.APIConnectionError"]


def test_openinference_http_spans_old_semconv_no_parent(
        field_spans: list[dict[str, Any]]) -> None:
    http = of(field_spans, "worker-oi", REQUESTS_SCOPE) + of(field_spans, "worker-oi-raw",
                                                             REQUESTS_SCOPE)
    assert len(http) == 4  # ok, timeout, ok (SDK), reset (raw)
    for span in http:
        assert span["name"] == "POST" and span["kind"] == 3
        assert "parentSpanId" not in span  # not a child of the tool span: a trace of its own
        assert set(span["attrs"]) <= {"http.method", "http.url", "http.status_code",
                                      "user_agent.original"}
        assert span["attrs"]["http.method"] == "POST"
        assert urlsplit(span["attrs"]["http.url"]).path == EFFECT_PATH
    assert sorted(s["attrs"].get("http.status_code", 0) for s in http) == [0, 0, 200, 200]
    # only the field instrumentation wrote spans for these workers
    assert {s["scope"] for s in field_spans if s["host"].startswith("worker-oi")} == {
        OI_SCOPE, REQUESTS_SCOPE}


def test_timeout_advances_the_virtual_clock_as_in_lab_mode(
        field_runs: FieldRuns, field_spans: list[dict[str, Any]]) -> None:
    runs = field_runs.runs
    assert runs["oi_timeout"].virtual_seconds >= NOMINAL
    assert runs["lab_timeout"].virtual_seconds >= NOMINAL
    assert runs["oi_ok"].virtual_seconds < NOMINAL
    (oi,) = [s for s in of(field_spans, "worker-oi", REQUESTS_SCOPE) if s.get("events")]
    (lab,) = [s for s in of(field_spans, "worker-lab", "twice.lab", "POST") if s.get("events")]
    for span in (oi, lab):
        # the span lasts the nominal timeout (the clock moved before the span ended)
        assert NOMINAL - 1e-6 <= seconds(span) < NOMINAL + 10
        assert span["status"]["code"] == 2
    assert exception_types(oi) == ["requests.exceptions.ReadTimeout"]
    assert oi["status"]["message"].startswith("ReadTimeout: ")
    assert "http.status_code" not in oi["attrs"] and "error.type" not in oi["attrs"]
    # the failed TOOL span ends after the timeout too
    (tool,) = [s for s in of(field_spans, "worker-oi", OI_SCOPE, "charge_subscription")
               if s["attrs"]["session.id"] == runs["oi_timeout"].thread]
    assert seconds(tool) >= NOMINAL - 1e-6


def test_reset_shows_as_an_exception_and_error_status(
        field_runs: FieldRuns, field_spans: list[dict[str, Any]]) -> None:
    (span,) = of(field_spans, "worker-oi-raw", REQUESTS_SCOPE)
    assert exception_types(span) == ["requests.exceptions.ConnectionError"]
    assert span["status"]["code"] == 2
    assert "Connection reset by peer" in span["status"]["message"]
    assert "http.status_code" not in span["attrs"]
    assert field_runs.runs["oi_reset"].virtual_seconds < NOMINAL  # no timeout: no nominal wait


def test_lab_and_untraced_workers_are_untouched_by_the_field_instrumentation(
        field_spans: list[dict[str, Any]]) -> None:
    assert not of(field_spans, "worker-none")
    lab = of(field_spans, "worker-lab")
    assert {s["scope"] for s in lab} == {"twice.lab"}
    names = sorted(s["name"] for s in lab)
    assert names == sorted(["invoke_agent billing-agent", "execute_tool charge_subscription",
                            "POST"] * 2)
    by_id = {s["spanId"]: s for s in lab}
    for http in (s for s in lab if s["name"] == "POST"):
        # still nested: HTTP span under the tool span under the agent span
        tool = by_id[http["parentSpanId"]]
        assert tool["name"] == "execute_tool charge_subscription"
        assert by_id[tool["parentSpanId"]]["name"] == "invoke_agent billing-agent"
        assert "http.request.resend_count" in http["attrs"]


# ---------------------------------------------------------------------------- the connector


def test_connector_reads_openinference_tool_spans(field_runs: FieldRuns,
                                                  field_rows: pd.DataFrame) -> None:
    tools = field_rows[(field_rows["kind"] == "tool_span") & (field_rows["worker"] == "worker-oi")]
    by_thread = tools.set_index("thread_id")
    for key in ("oi_ok", "oi_ok_2", "oi_timeout"):
        run = field_runs.runs[key]
        row = by_thread.loc[run.thread]
        assert row["tool_name"] == "charge_subscription"
        args = json.loads(str(row["args"]))
        assert (row["subject"], row["amount"], row["currency"]) == (
            args["customer_id"], args["amount"], "usd")
        if key == "oi_timeout":
            assert pd.isna(row["tool_call_id"])  # a failed call has no ToolMessage
            assert row["outcome"] == "timeout"
            assert row["detail"].startswith("stripe._error.APIConnectionError")
        else:
            assert row["tool_call_id"] == run.call_ids[0]
            assert row["outcome"] == "ok"


def test_connector_reads_old_semconv_http_spans(field_rows: pd.DataFrame) -> None:
    http = field_rows[(field_rows["kind"] == "http_span")
                      & field_rows["worker"].str.startswith("worker-oi")].sort_values("at")
    assert len(http) == 4
    assert (http["method"] == "POST").all() and (http["path"] == EFFECT_PATH).all()
    assert http["status"].tolist()[0] == 200
    assert http["resend_count"].isna().all()  # old semconv: unknown, not "try 0"
    assert http["parent_span_id"].isna().all() and http["thread_id"].isna().all()
    assert http["tool_call_id"].isna().all()
    assert sorted(http["outcome"]) == ["error", "ok", "ok", "timeout"]
    reset = http[http["outcome"] == "error"].iloc[0]
    assert reset["worker"] == "worker-oi-raw"
    assert reset["detail"].startswith("requests.exceptions.ConnectionError")
    lab = field_rows[(field_rows["kind"] == "http_span") & (field_rows["worker"] == "worker-lab")]
    assert lab["resend_count"].tolist() == [0, 0]  # stable semconv: try 0


def test_jaeger_export_gives_the_same_rows(field_runs: FieldRuns, tmp_path: Path) -> None:
    path = write_jaeger(field_runs.spans_path, tmp_path / "jaeger.json")
    answer = json.loads(path.read_text())
    assert list(answer) == ["data", "total", "limit", "offset", "errors"]
    assert (answer["total"], answer["limit"], answer["offset"], answer["errors"]) == (
        0, 0, 0, None)
    otlp = spans_connector.load(field_runs.spans_path)
    jaeger = spans_connector.load(path)
    assert otlp.warnings == [] and jaeger.warnings == []
    key = ["trace_id", "span_id"]
    a = otlp.rows.sort_values(key, ignore_index=True)
    b = jaeger.rows.sort_values(key, ignore_index=True)
    assert len(a) == 12  # a tool span and an HTTP span per traced run (6 of 7 runs)
    times = ["at", "at_aligned", "end"]
    pd.testing.assert_frame_equal(a.drop(columns=["origin", *times]),
                                  b.drop(columns=["origin", *times]))
    a_ns = a["at"].astype("int64")
    assert (b["at"].astype("int64") == a_ns // 1000 * 1000).all()  # microseconds, truncated
    # Jaeger keeps start and duration in whole us: the end is at most 2 us early
    gap = a["end"].astype("int64") - b["end"].astype("int64")
    assert ((gap >= 0) & (gap < 2000)).all()


# ---------------------------------------------------------------------------- skew, none, kill


@pytest.mark.parametrize("mode", ["openinference", "lab"])
def test_span_clock_offset_shifts_every_time_exactly(tmp_path: Path,
                                                     mode: Instrumentation) -> None:
    offset = -93.123456789
    with bench(tmp_path, seed=4, start=START, noise=0) as b:
        worker = b.worker("worker-skew", FIELD_TOOL, instrumentation=mode,
                          span_clock_offset=offset)
        true_times = InMemorySpanExporter()  # beside the file: the same spans, unshifted
        worker.telemetry.provider.add_span_processor(SimpleSpanProcessor(true_times))
        run_one(b, worker)
        run_one(b, worker, "delay_after_commit")  # spans with exception events
    written = {s["spanId"]: s for s in read_spans(tmp_path / "spans.jsonl")}
    true = {f"{s.context.span_id:016x}": s for s in true_times.get_finished_spans()}
    assert set(written) == set(true) and len(true) >= 6
    shift = round(offset * 1e9)
    events = 0
    for span_id, span in true.items():
        out = written[span_id]
        assert span.start_time is not None and span.end_time is not None
        assert int(out["startTimeUnixNano"]) == span.start_time + shift
        assert int(out["endTimeUnixNano"]) == span.end_time + shift
        assert [int(e["timeUnixNano"]) for e in out.get("events", [])] == [
            e.timestamp + shift for e in span.events]
        events += len(span.events)
        true_attrs = {k: list(v) if isinstance(v, tuple) else v
                      for k, v in (span.attributes or {}).items()}
        assert (out["name"], out["attrs"]) == (span.name, true_attrs)
    assert events >= 2  # the failed HTTP attempt and the failed tool


def test_none_mode_writes_no_spans(tmp_path: Path) -> None:
    with bench(tmp_path, seed=5, start=START, noise=0) as b:
        worker = b.worker("worker-none", FIELD_TOOL, instrumentation="none")
        instrument_field.install()  # field instrumentation in the process changes nothing
        run = run_one(b, worker)
        timed_out = run_one(b, worker, "delay_after_commit")
    assert run.call_ids and timed_out.virtual_seconds >= NOMINAL
    assert not (tmp_path / "spans.jsonl").exists()


def test_a_killed_openinference_worker_exports_nothing_more(tmp_path: Path) -> None:
    with bench(tmp_path, seed=6, start=START, noise=0) as b:
        armed = [True]

        def die_after_commit(intent: dict[str, Any]) -> None:
            if armed[0]:
                armed[0] = False
                worker.telemetry.kill()
                raise WorkerCrashed("OOM-killed after the charge")

        worker = b.worker("worker-oi", ToolOptions(), instrumentation="openinference",
                          after_commit=die_after_commit)
        with pytest.raises(WorkerCrashed):
            worker.run(b.new_thread(), ask(b))
        before = read_spans(tmp_path / "spans.jsonl")
        second = run_one(b, worker)  # the process is gone: whatever it does is not exported
    after = read_spans(tmp_path / "spans.jsonl")
    assert second.call_ids and second.error is None
    assert len(after) == len(before)
    # the HTTP attempt ended before the kill (exported); the tool and the graph never ended
    assert [s["scope"] for s in before if s["scope"] == REQUESTS_SCOPE] == [REQUESTS_SCOPE]
    assert not of(before, "worker-oi", OI_SCOPE, "charge_subscription")


# ---------------------------------------------------------------------------- lab mode unchanged


def _uninstrument_field() -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    for instrumentor in (LangChainInstrumentor(), RequestsInstrumentor()):
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


def _frozen_lab_run(folder: Path) -> tuple[str, pd.DataFrame]:
    """A lab-mode incident (a POST resent by urllib3 after a reset: two HTTP attempts under one
    tool span) on frozen time: every byte of its spans is determined by the seed, except the
    server's port. Returns (the spans file with the port blanked, the connector's rows)."""
    with bench(folder, seed=8, start=START, noise=0) as b:
        with time_machine.travel(START, tick=False):
            langgraph_ids._last_v6_timestamp = None
            worker = b.worker("worker-a", ToolOptions(client="raw", key="derived",
                                                      post_retries=1, timeout=10.0))
            run_one(b, worker, "reset_after_commit")
            port = urlsplit(b.server.url).port
    lines = []
    for line in (folder / "spans.jsonl").read_text().splitlines():
        doc = json.loads(line)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    for attr in span.get("attributes", []):
                        if attr["key"] == "url.full":
                            value = attr["value"]["stringValue"]
                            attr["value"]["stringValue"] = value.replace(f":{port}/", ":PORT/")
                        elif attr["key"] == "server.port":
                            assert attr["value"] == {"intValue": str(port)}
                            attr["value"] = {"intValue": "0"}
        lines.append(json.dumps(doc, separators=(",", ":")))
    rows = spans_connector.load(folder / "spans.jsonl").rows.drop(columns="origin")
    return "\n".join(lines), rows


def test_lab_mode_is_byte_for_byte_the_same_with_field_instrumentation_installed(
        tmp_path: Path) -> None:
    _uninstrument_field()
    without, rows_without = _frozen_lab_run(tmp_path / "without")
    # an openinference worker runs first: both instrumentors installed and used in the process
    with bench(tmp_path / "oi", seed=9, start=START, noise=0) as b:
        run_one(b, b.worker("worker-oi", ToolOptions(), instrumentation="openinference"))
    assert read_spans(tmp_path / "oi" / "spans.jsonl")
    with_field, rows_with = _frozen_lab_run(tmp_path / "with")
    assert with_field == without
    pd.testing.assert_frame_equal(rows_with, rows_without)
    http = rows_with[rows_with["kind"] == "http_span"]
    assert http["resend_count"].tolist() == [0, 1]
    assert http["idempotency_key"].nunique() == 1
