"""The same incident, whichever store its traces come from: OTLP files, Jaeger JSON, Tempo JSON,
Phoenix (its spans API's page and its UI's download, snake_case), Langfuse-attributed OTLP, what
the live Langfuse backend reads of it from a Langfuse-compatible server's observations API, and
LangSmith runs all give the same verdict through `twice analyze <folder>` (the format sniffed in
the folder), and the same tool-span rows. The shapes are made from the sample's OTLP spans by
`tests.connectors.trace_formats`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.connectors import trace_formats
from twice.cli import main
from twice.connectors import registry, spans

SAMPLES = Path(__file__).parents[2] / "sample_data"
FORMATS = ["otlp", "jaeger", "tempo", "phoenix_page", "phoenix_download", "langfuse",
           "langfuse_live", "langsmith"]
TOOL_COLUMNS = ["at", "end", "trace_id", "tool_call_id", "thread_id", "tool_name", "outcome",
                "args_fingerprint"]


def _folder(sample: str, fmt: str, tmp: Path) -> tuple[Path, Path]:
    """The sample's folder with its spans.jsonl replaced by the spans in `fmt`."""
    out = tmp / f"{sample}-{fmt}"
    out.mkdir()
    for path in (SAMPLES / sample).iterdir():
        if path.name != "spans.jsonl":
            shutil.copy(path, out / path.name)
    return out, trace_formats.write(fmt, SAMPLES / sample / "spans.jsonl", out)


def _verdict(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[tuple[Any, ...]]:
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not [w for w in report["warnings"] if "spans" in w["source"]], report["warnings"]
    return [(g["group_id"], g["tool_call_ids"], [d["layer"] for d in g["duplicates"]])
            for g in report["groups"]]


def _tool_rows(path: Path) -> pd.DataFrame:
    rows = spans.load(path).rows
    tools = rows[rows["kind"] == "tool_span"][TOOL_COLUMNS]
    return tools.sort_values(["at", "tool_call_id"]).reset_index(drop=True)


def _same_rows(got: pd.DataFrame, expected: pd.DataFrame, fmt: str) -> None:
    """Equal, times to within 2 us: Jaeger and LangSmith keep microseconds (Jaeger's end is
    its start plus a duration, each rounded). A LangSmith run says it succeeded (`status`),
    where the span left its status unset."""
    if fmt == "langsmith":
        expected = expected.assign(outcome=expected["outcome"].replace("unknown", "ok"))
    # Langfuse keeps milliseconds (ClickHouse's DateTime64(3)): its times are cut to them
    precision = pd.Timedelta(1, "ms") if fmt == "langfuse_live" else pd.Timedelta(2, "us")
    for column in ("at", "end"):
        assert ((got[column] - expected[column]).abs() <= precision).all(), column
    others = [c for c in TOOL_COLUMNS if c not in ("at", "end")]
    pd.testing.assert_frame_equal(got[others], expected[others])


@pytest.mark.parametrize("sample", ["step_retry", "sdk_retry"])
@pytest.mark.parametrize("fmt", FORMATS[1:])
def test_the_same_verdict_from_every_trace_format(
        sample: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline, baseline_spans = _folder(sample, "otlp", tmp_path)
    folder, converted = _folder(sample, fmt, tmp_path)
    assert registry.detect(converted) == "spans"
    expected = _verdict(baseline, capsys)
    assert [layers for _, _, layers in expected] == [[sample]]
    assert _verdict(folder, capsys) == expected
    _same_rows(_tool_rows(converted), _tool_rows(baseline_spans), fmt)


# --- what each store's own spelling carries ------------------------------------------------------
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns
THREAD = "a619f96e-265f-48a5-9188-0dbea6772c3b"


def _phoenix_value(**one: Any) -> dict[str, Any]:
    """An AnyValue as Phoenix's API prints it: every field, all but one null."""
    value: dict[str, Any] = dict.fromkeys(("string_value", "bool_value", "int_value",
                                           "double_value", "array_value", "kvlist_value",
                                           "bytes_value"))
    value.update(one)
    return value


def _openinference_tool(span_id: str, start: int, *, ok: bool) -> dict[str, Any]:
    """An OpenInference TOOL span as Phoenix answers it (openinference-instrumentation-langchain
    writes `session.id` and no tool call id; the id is only in a returned ToolMessage)."""
    message = {"type": "tool", "data": {"content": "charged", "type": "tool",
                                        "name": "charge_customer", "tool_call_id": "call_7",
                                        "status": "success"}}
    attributes = [
        ("openinference.span.kind", _phoenix_value(string_value="TOOL")),
        ("tool.name", _phoenix_value(string_value="charge_customer")),
        ("input.value", _phoenix_value(string_value='{"customer": "cus_1", "amount": 500}')),
        ("session.id", _phoenix_value(string_value=THREAD)),
        ("llm.token_count.total", _phoenix_value(int_value=12)),
    ]
    if ok:
        attributes.append(("output.value", _phoenix_value(string_value=json.dumps(message))))
    return {
        "trace_id": "ad696d1b9bb21256db929107805c8c30", "span_id": span_id,
        "parent_span_id": None, "name": "charge_customer", "kind": "SPAN_KIND_INTERNAL",
        "start_time_unix_nano": start, "end_time_unix_nano": start + 10**9,
        "attributes": [{"key": k, "value": v} for k, v in attributes],
        "events": [] if ok else [{"name": "exception", "time_unix_nano": start + 10**9,
                                  "attributes": [{"key": "exception.type", "value":
                                                  _phoenix_value(string_value="TimeoutError")}]}],
        "status": {"code": 1 if ok else 2, "message": "" if ok else "read timed out"},
        "dropped_attributes_count": 0, "links": None, "trace_state": None, "flags": None,
    }


def test_phoenix_openinference_tool_spans(tmp_path: Path) -> None:
    page = {"data": [_openinference_tool("00000000000000a1", T0, ok=False),
                     _openinference_tool("00000000000000a2", T0 + 30 * 10**9, ok=True)],
            "next_cursor": None}
    path = tmp_path / "phoenix.json"
    path.write_text(json.dumps(page))
    assert registry.detect(path) == "spans"
    result = spans.load(path)
    assert result.warnings == []
    rows = result.rows.sort_values("at")
    assert list(rows["kind"]) == ["tool_span", "tool_span"]
    assert list(rows["thread_id"]) == [THREAD, THREAD]  # session.id is the thread
    assert list(rows["outcome"]) == ["timeout", "ok"]
    assert list(rows["tool_call_id"].fillna("")) == ["", "call_7"]
    assert set(rows["tool_name"]) == {"charge_customer"} and set(rows["amount"]) == {500}


def _langfuse_tool(span_id: str, start: int, *, failed: bool) -> dict[str, Any]:
    """A tool span the Langfuse SDK's CallbackHandler makes (metadata values JSON-encoded by
    `_flatten_and_serialize_metadata`), decoded from protobuf to its canonical JSON."""
    from twice.lab.otlp_json import attribute

    meta = "langfuse.observation.metadata."
    attributes = [attribute("langfuse.observation.type", "tool"),
                  attribute("langfuse.observation.input", '{"customer":"cus_1","amount":500}'),
                  attribute(meta + "tool_call_id", json.dumps("call_abc")),
                  attribute(meta + "thread_id", json.dumps(THREAD)),
                  attribute(meta + "langgraph_step", "3"),
                  attribute("langfuse.observation.metadata.ls_provider", json.dumps("x\x1b[2J"))]
    if failed:
        attributes += [attribute("langfuse.observation.level", "ERROR"),
                       attribute("langfuse.observation.status_message",
                                 "httpx.ReadTimeout: The read operation timed out")]
    return {"traceId": "rWlteZu7IS7X15vPgezIMA==", "spanId": span_id, "name": "charge_customer",
            "kind": "SPAN_KIND_INTERNAL", "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 10**9), "attributes": attributes}


def test_langfuse_tool_spans_by_default(tmp_path: Path) -> None:
    doc = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{
        "scope": {"name": "langfuse-sdk"},
        "spans": [_langfuse_tool("AAAAAAAAAKE=", T0, failed=True),
                  _langfuse_tool("AAAAAAAAAKI=", T0 + 30 * 10**9, failed=False)]}]}]}
    path = tmp_path / "langfuse.json"
    path.write_text(json.dumps(doc))
    result = spans.load(path)
    assert result.warnings == []
    rows = result.rows.sort_values("at")
    assert list(rows["kind"]) == ["tool_span", "tool_span"]
    assert list(rows["tool_call_id"]) == ["call_abc", "call_abc"]  # unquoted
    assert list(rows["thread_id"]) == [THREAD, THREAD]
    assert set(rows["tool_name"]) == {"charge_customer"}
    assert list(rows["outcome"]) == ["timeout", "unknown"]
    assert "ReadTimeout" in rows["detail"].iloc[0]


def _run(run_id: str, start: str, end: str, **fields: Any) -> dict[str, Any]:
    return {"id": run_id, "trace_id": "2f1e0c3a-9b8d-4c7e-a6f5-0e1d2c3b4a59",
            "name": "charge_customer", "run_type": "tool", "start_time": start,
            "end_time": end, "inputs": {"input": '{"customer": "cus_1", "amount": 500}'},
            "outputs": None, "error": None, "parent_run_id": None, "status": "success",
            "extra": {"metadata": {"thread_id": THREAD, "langgraph_step": 3,
                                   "langgraph_node": "tools", "checkpoint_ns": "tools:1"},
                      "tool_call_id": "call_abc"}, **fields}


def test_langsmith_tool_runs(tmp_path: Path) -> None:
    traceback = ("Traceback (most recent call last):\n  File \"tools.py\", line 9, in charge\n"
                 "httpx.ReadTimeout: The read operation timed out\n")
    runs = [
        _run("0b5a8c1e-0000-4000-8000-000000000001", "2026-01-01T00:00:00.250000",
             "2026-01-01T00:00:30.000000", error=traceback, status="error"),
        _run("0b5a8c1e-0000-4000-8000-000000000002", "2026-01-01T00:00:31.000000+00:00",
             "2026-01-01T00:00:32Z", outputs={"output": {"lc": 1, "type": "constructor",
                                                         "kwargs": {"content": "ok",
                                                                    "tool_call_id": "call_abc"}}}),
        {**_run("0b5a8c1e-0000-4000-8000-000000000003", "2026-01-01T00:00:00",
                "2026-01-01T00:01:00"), "run_type": "chain", "name": "LangGraph"},
        {"id": "not-a-uuid", "run_type": "tool", "start_time": "2026-01-01T00:00:00"},
    ]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": runs, "cursors": {"next": None}}))
    assert registry.detect(path) == "spans"
    result = spans.load(path)
    assert [w.detail for w in result.warnings] == ["runs[3]: no valid run id (a UUID); skipped"]
    rows = result.rows.sort_values("at")
    assert list(rows["kind"]) == ["tool_span", "tool_span"]  # the chain run is no row
    assert list(rows["tool_call_id"]) == ["call_abc", "call_abc"]
    assert list(rows["thread_id"]) == [THREAD, THREAD]
    assert list(rows["outcome"]) == ["timeout", "ok"]
    assert rows["detail"].iloc[0] == "httpx.ReadTimeout: The read operation timed out"
    assert rows["at"].iloc[0] == pd.Timestamp("2026-01-01T00:00:00.25Z")
    assert set(rows["amount"]) == {500}


@pytest.mark.parametrize(("text", "amount"), [
    ("{'customer': 'cus_1', 'amount': 500}", 500),  # langchain-core 1.2 traces str(dict)
    ('{"customer": "cus_1", "amount": 700}', 700),  # and later ones JSON (or the dict itself)
    ("__import__('os').system('echo hi')", None),  # a literal only: nothing runs
    ("{'amount': {1, 2}}", None),  # no JSON for a set: no arguments, the run is still read
    ("[" * 100_000, None),  # past the cap: not parsed at all
])
def test_langsmith_tool_input_text(tmp_path: Path, text: str, amount: int | None) -> None:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([_run("0b5a8c1e-0000-4000-8000-000000000001",
                                     "2026-01-01T00:00:00", "2026-01-01T00:00:01",
                                     inputs={"input": text})]))
    result = spans.load(path)
    assert result.warnings == [] and len(result.rows) == 1
    got = result.rows["amount"].iloc[0]
    assert (pd.isna(got) if amount is None else got == amount)


def test_langsmith_runs_of_a_real_langgraph_step_retry(tmp_path: Path) -> None:
    """The runs langchain_core's tracer hands LangSmith (`langsmith.RunTree`, dumped as the API
    lists them) for a real LangGraph graph whose tool node timed out once and was retried by
    its RetryPolicy: two tool runs of one tool call in one thread, the first failed."""
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langchain_core.tracers.base import BaseTracer
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode
    from langgraph.types import RetryPolicy

    class Collected(BaseTracer):
        def __init__(self) -> None:
            super().__init__()
            self.roots: list[Any] = []

        def _persist_run(self, run: Any) -> None:
            self.roots.append(run)

    calls: list[int] = []

    @tool
    def charge_customer(customer: str, amount: int) -> str:
        """Charge the customer."""
        calls.append(amount)
        if len(calls) == 1:
            raise TimeoutError("read timed out")
        return "charged"

    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("", tool_calls=[{
            "name": "charge_customer", "args": {"customer": "cus_1", "amount": 500},
            "id": "call_abc"}])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([charge_customer], handle_tool_errors=False),
                   retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.01, jitter=False,
                                            retry_on=lambda exc: True))
    graph.add_edge(START, "model")
    graph.add_edge("model", "tools")
    graph.add_edge("tools", END)
    tracer = Collected()
    graph.compile(checkpointer=InMemorySaver()).invoke(
        {"messages": []}, {"configurable": {"thread_id": THREAD}, "callbacks": [tracer]})
    assert len(calls) == 2

    def every(run: Any) -> Iterator[Any]:
        yield run
        for child in run.child_runs:
            yield from every(child)

    runs = [run.model_dump(mode="json", exclude={"child_runs"})
            for root in tracer.roots for run in every(root)]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(run) + "\n" for run in runs))
    assert registry.detect(path) == "spans"
    result = spans.load(path)
    assert result.warnings == []
    tools = result.rows[result.rows["kind"] == "tool_span"].sort_values("at")
    assert list(tools["tool_call_id"]) == ["call_abc", "call_abc"]
    assert list(tools["thread_id"]) == [THREAD, THREAD]
    assert list(tools["outcome"]) == ["timeout", "ok"]
    assert tools["detail"].iloc[0] == "TimeoutError: read timed out"
    assert set(tools["tool_name"]) == {"charge_customer"} and set(tools["amount"]) == {500}
    assert tools["trace_id"].nunique() == 1  # one invocation: the graph's run is the root
