"""Langfuse's observations (its public API's pages, as `--traces langfuse+...` saves them) read as
spans: the sample's spans, sent to the local Langfuse-compatible server as the SDK sends them
(tests/connectors/trace_formats.py), read back as the same tool rows; the variants older
servers and its older ingestion API give (UUID ids, metadata still JSON-quoted, one observation
a line), and observations that cannot be read, each a warning naming it."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.connectors import trace_formats
from twice.connectors import registry, spans

pytest.importorskip("opentelemetry.proto")  # the server decodes what is sent to it

SAMPLE = Path(__file__).parents[2] / "sample_data" / "step_retry" / "spans.jsonl"
COLUMNS = ["tool_call_id", "thread_id", "tool_name", "outcome", "args_fingerprint"]


@pytest.fixture(scope="module")
def page() -> dict[str, Any]:
    return trace_formats.langfuse_page(trace_formats.langfuse(trace_formats.exports(SAMPLE)))


def _tools(path: Path) -> Any:
    result = spans.load(path)
    rows = result.rows[result.rows["kind"] == "tool_span"].sort_values("at")
    return result, rows.reset_index(drop=True)


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_a_page_is_sniffed_and_read_as_tool_spans(page: dict[str, Any], tmp_path: Path) -> None:
    """The same tool rows as the OTLP the server was sent (times aside: Langfuse keeps ms)."""
    path = _write(tmp_path / "observations.json", page)
    assert registry.detect(path) == "spans"
    result, tools = _tools(path)
    assert result.warnings == []
    _, sent = _tools(trace_formats.write("langfuse", SAMPLE, tmp_path))
    assert len(tools) == len(sent) > 1
    assert tools[COLUMNS].equals(sent[COLUMNS])


def test_uuid_ids_quoted_metadata_and_lines(page: dict[str, Any], tmp_path: Path) -> None:
    """Ids that are not hex (Langfuse's older ingestion API: UUIDs) become stable hex ids with
    the parent links kept; a value still JSON-quoted is unquoted; one observation a line reads
    the same as the page."""
    _, expected = _tools(_write(tmp_path / "page.json", page))
    names = {o["id"]: str(uuid.uuid4()) for o in page["data"]}
    traces = {o["traceId"]: str(uuid.uuid4()) for o in page["data"]}
    changed = []
    for obs in copy.deepcopy(page["data"]):
        obs["id"] = names[obs["id"]]
        obs["traceId"] = traces[obs["traceId"]]
        if obs["parentObservationId"]:
            obs["parentObservationId"] = names.get(obs["parentObservationId"])
        metadata = obs.get("metadata") or {}
        for key in ("tool_call_id", "thread_id"):
            if isinstance(metadata.get(key), str):
                metadata[key] = json.dumps(metadata[key])
        changed.append(obs)
    path = tmp_path / "observations.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in changed))
    assert registry.detect(path) == "spans"
    result, tools = _tools(path)
    assert result.warnings == []
    assert tools[COLUMNS].equals(expected[COLUMNS])
    assert all(len(t) == 32 for t in tools["trace_id"])


def test_unreadable_observations_are_warnings(page: dict[str, Any], tmp_path: Path) -> None:
    broken = copy.deepcopy(page)
    broken["data"][0]["startTime"] = "yesterday"
    broken["data"][1]["id"] = None
    broken["data"].append("not an observation")
    result = spans.load(_write(tmp_path / "observations.json", broken))
    details = [w.detail for w in result.warnings]
    assert any("no readable startTime" in d for d in details), details
    assert any("no observation id or trace id" in d for d in details), details
    assert any("not an observation object" in d for d in details), details
    assert len(result.rows) > 0  # the rest is read
