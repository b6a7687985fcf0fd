"""Evidence lines and timeline points lead to their records (`twice.web.records`), on the
bundled incidents and the independent corpus: the records a line names by id, else the two
attempts' provider requests; never an empty link, never another call's trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.independent_corpus import extract
from twice.connectors import registry
from twice.engine import Analysis, Group, analyze
from twice.timeline import Kind
from twice.verdict import Duplicate
from twice.web.figures import call_records
from twice.web.records import cited_records, line_ids, point_records
from twice.web.tabs.timeline import clicked_points

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data"


def _analysed(folder: Path) -> Analysis:
    found, _ = registry.scan_folder(folder)
    return analyze(registry.load_all([(n, p, {}) for n, p in found]).rows)


@pytest.fixture(scope="module")
def step_retry() -> tuple[Analysis, Group, Duplicate]:
    analysis = _analysed(SAMPLES / "step_retry")
    group = analysis.groups[0]
    return analysis, group, group.duplicates[0]


def _line(dup: Duplicate, start: str) -> int:
    return next(i for i, line in enumerate(dup.evidence) if line.startswith(start))


def test_the_words_of_a_line_that_could_be_ids() -> None:
    line = ("thread run_2be80b5e63dc's checkpoints: tool call toolu_01u0rz4q is in step 1 "
            "(17:44:55.829), its result in step 2; one client HTTP span (de3640aec9329f7d).")
    ids = line_ids(line)
    assert {"run_2be80b5e63dc", "toolu_01u0rz4q", "de3640aec9329f7d"} <= ids
    assert not {"step", "1", "2", "tool", "is", "in"} & ids
    assert "17:44:55.829" in ids  # a time is a word like an id; no record has it as one


def test_a_line_naming_a_trace_links_to_that_traces_records_of_the_call(
        step_retry: tuple[Analysis, Group, Duplicate]) -> None:
    analysis, group, dup = step_retry
    i = _line(dup, "both executions belong to one trace")
    rows = cited_records(analysis, group, dup, dup.evidence)[i]
    trace = next(iter(line_ids(dup.evidence[i]) & set(analysis.timeline["trace_id"].dropna())))
    assert len(rows) >= 2 and set(rows["trace_id"]) == {trace}
    # only the call's own records of that trace (a broad id is not looked up in the timeline)
    assert set(rows.index) <= set(call_records(analysis, group).index)
    assert all(isinstance(label, str) and label for label in rows["label"])


def test_a_line_naming_a_tool_call_links_to_its_call_and_result(
        step_retry: tuple[Analysis, Group, Duplicate]) -> None:
    analysis, group, dup = step_retry
    i = _line(dup, "thread ")
    rows = cited_records(analysis, group, dup, dup.evidence)[i]
    assert {Kind.TOOL_CALL.value, Kind.TOOL_RESULT.value} <= set(rows["kind"])
    called = set(rows["tool_call_id"].dropna())
    assert len(called) == 1 and called <= line_ids(dup.evidence[i])
    assert list(rows["at"]) == sorted(rows["at"])  # oldest first


def test_a_line_naming_no_record_links_to_the_two_attempts_requests(
        step_retry: tuple[Analysis, Group, Duplicate]) -> None:
    analysis, group, dup = step_retry
    i = _line(dup, "gap ")
    rows = cited_records(analysis, group, dup, dup.evidence)[i]
    assert set(rows["kind"]) == {Kind.PROVIDER_REQUEST.value}
    by_id = {str(r["attempt_id"]): r for r in group.records}
    assert set(rows["request_id"]) == {by_id[dup.first]["request_id"],
                                       by_id[dup.second]["request_id"]}


def test_a_span_outside_the_call_is_found_by_its_id() -> None:
    """The queue consumer's span a redelivery line names is not one of the call's records,
    and is found all the same."""
    analysis = _analysed(SAMPLES / "redelivery")
    group = analysis.groups[0]
    dup = group.duplicates[0]
    spans = set(analysis.timeline["span_id"].dropna())
    for line, rows in zip(dup.evidence, cited_records(analysis, group, dup, dup.evidence),
                          strict=True):
        named = line_ids(line) & spans
        if named:
            assert named <= set(rows["span_id"].dropna()), line


def test_every_evidence_line_of_the_corpus_leads_to_a_record(tmp_path: Path) -> None:
    folders = sorted(p.parent for p in extract(tmp_path).glob("independent/set-*/*/*/truth.json"))
    assert len(folders) == 92
    checked = 0
    for folder in folders[::4]:  # a spread of the sets and kinds, in a test's time
        analysis = _analysed(folder)
        for group in analysis.groups:
            for dup in group.duplicates:
                for line, rows in zip(dup.evidence, cited_records(
                        analysis, group, dup, dup.evidence), strict=True):
                    assert len(rows), (folder.name, line)
                    checked += 1
    assert checked > 20


def test_a_clicked_point_is_its_timeline_row_and_an_attempts_mark_its_request(
        step_retry: tuple[Analysis, Group, Duplicate]) -> None:
    analysis, group, dup = step_retry
    tl = analysis.timeline
    span = int(tl.index[(tl["kind"] == Kind.TOOL_SPAN.value).to_numpy()][0])
    rows = point_records(analysis, group, [span, [span]])
    assert list(rows.index) == [span]
    rows = point_records(analysis, group, [dup.second])
    assert set(rows["kind"]) == {Kind.PROVIDER_REQUEST.value}
    second = next(r for r in group.records if str(r["attempt_id"]) == dup.second)
    assert set(rows["request_id"]) == {second["request_id"]}
    # what is not a row or an attempt shows nothing
    assert point_records(analysis, group, [10**9, {"x": 1}, True, 1.5, None]).empty


def test_a_click_the_page_sends_is_read_as_data_only() -> None:
    assert clicked_points('[12, "req_1"]') == [12, "req_1"]
    assert clicked_points('[[3], {"a": 1}, true, null, 1.5]') == []
    assert clicked_points("not json") == [] and clicked_points('{"a": 1}') == []
    assert len(clicked_points(str(list(range(100))))) == 8
