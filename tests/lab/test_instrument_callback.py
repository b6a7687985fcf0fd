"""The lab's `callback` instrumentation: a team's own LangChain callback handler with nothing
around the graph run, as production often has it. Tool spans are the roots of their own traces,
with the tool call id but no arguments and (on these workers) no thread id; HTTP client spans
are their children with a resend count on resends only and no headers; the queue consumer's
`process_message` span is a root of its own with `aws.sqs.approximate_receive_count`; without
the error-path fix a failed attempt leaves no tool span, only its client span.

And the engine on them: traces are not read as runs, the checkpoints and the consumer span
decide."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from twice.cli.root import main

ROOT = Path(__file__).resolve().parents[2]
NO_THREADS = {f"worker-{c}": False for c in "abcdef"}
INCIDENTS = {  # name: (scenario, seed, the error-path fix); seeds drawn without a fixed key
    "step_retry": ("step_retry", 7303, False),  # a 6.4 s client timeout: the seconds band
    "step_retry_fixed": ("step_retry", 7302, True),  # a 91.5 s timeout
    "redelivery": ("redelivery", 7301, False),  # a 37 s visibility timeout: tens of seconds
}
RUN = """
import json, sys
from twice.lab.scenarios import run_scenario
for name, seed, out, errors, threads in json.loads(sys.argv[1]):
    run_scenario(name, out, seed=seed, realism="field", fixed={
        "instrumentation": "callback", "trace_format": "otlp",
        "callback": {"error_spans": errors, "thread_ids": threads}})
"""


@pytest.fixture(scope="module")
def incidents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("callback")
    specs = [(scenario, seed, str(root / name), errors, NO_THREADS)
             for name, (scenario, seed, errors) in INCIDENTS.items()]
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(specs)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: root / name for name in INCIDENTS}


def _spans(folder: Path) -> Iterator[dict[str, Any]]:
    for line in (folder / "spans.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                yield from ss["spans"]


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}


@pytest.mark.parametrize("name", sorted(INCIDENTS))
def test_tool_spans_are_roots_and_client_spans_their_children(incidents: dict[str, Path],
                                                               name: str) -> None:
    spans = list(_spans(incidents[name]))
    tools = {s["spanId"]: s for s in spans if s["name"].startswith("execute_tool")}
    clients = [s for s in spans if s["kind"] == 3]  # CLIENT
    assert tools and clients
    assert all(not s.get("parentSpanId") for s in tools.values())
    for tool in tools.values():
        attrs = _attrs(tool)
        assert attrs["gen_ai.tool.call.id"]
        assert "gen_ai.conversation.id" not in attrs  # no thread on these workers' spans
        assert "gen_ai.tool.call.arguments" not in attrs
    assert not any(s["name"].startswith("invoke_agent") for s in spans)
    for client in clients:
        attrs = _attrs(client)
        assert not any(k.startswith(("http.request.header.", "http.response.header."))
                       for k in attrs)
        assert int(attrs.get("http.request.resend_count", 1)) >= 1  # set on resends only
        assert client.get("parentSpanId")


def test_without_the_error_path_fix_a_failed_attempt_leaves_only_its_client_span(
        incidents: dict[str, Path]) -> None:
    unfixed = list(_spans(incidents["step_retry"]))
    tool_ids = {s["spanId"] for s in unfixed if s["name"].startswith("execute_tool")}
    orphans = [s for s in unfixed if s["kind"] == 3 and s["parentSpanId"] not in tool_ids]
    assert orphans  # the timed-out attempt: its client span, and no tool span above it
    fixed = list(_spans(incidents["step_retry_fixed"]))
    assert any(s["name"].startswith("execute_tool") and s.get("status", {}).get("code") == 2
               for s in fixed)


def test_the_queue_consumer_span_is_a_root_with_the_receive_count(
        incidents: dict[str, Path]) -> None:
    consumers = [s for s in _spans(incidents["redelivery"])
                 if s["name"].startswith("process_message")]
    assert consumers and all(not s.get("parentSpanId") for s in consumers)
    counts = {int(_attrs(s)["aws.sqs.approximate_receive_count"]) for s in consumers}
    assert 2 in counts


@pytest.mark.parametrize("name", sorted(INCIDENTS))
def test_the_engine_names_the_layer(incidents: dict[str, Path], name: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    folder = incidents[name]
    truth = json.loads((folder / "truth.json").read_text())
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ids = set(truth["request_ids"])
    mine = [d for g in report["groups"] if any(a["request_id"] in ids for a in g["attempts"])
            for d in g["duplicates"]]
    assert mine and mine[0]["layer"] == truth["layer"]
    # the traces are roots: they say nothing of a restart, and the verdict says so
    assert not any("belong to different traces" in line for line in mine[0]["evidence"])
