"""The accuracy harness as a CI gate: twice on 20 field incidents at fixed seeds of their own
range (CI_SEEDS, 5000-5019, one scenario forced per seed so every layer and control is there) and
on the clean scenarios (the samples' seed), against floors.

docs/accuracy.md explains the measures; `twice lab eval` prints the same numbers for any
seed range.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from twice.cli.lab import analyze_folder
from twice.lab import accuracy

# correct layer on the duplicate incidents whose two requests an export names (a protected
# retry whose replay only the provider's idempotency cache saw shows nothing to judge): honest
# (the layer, or exactly two candidates that include it) and strict (the layer itself). One
# miss of the 14 is tolerated on each, not more. Measured when set: 100% honest, 92.9% strict.
FIELD_HONEST_FLOOR = 0.9
FIELD_STRICT_FLOOR = 0.8
MAX_FALSE_DUPLICATES = 0  # reported pairs that are not the incident's own (controls included)
FINDINGS_FLOOR = 0.9  # expected findings reported in the incident's group (measured: 100%)
CLEAN_LAYER_FLOOR = 1.0  # strict, and no control flagged

FIELD_SPECS = accuracy.ci_specs()  # 20 incidents, every layer and control, seeds 5000-5019
CLEAN_SPECS = accuracy.clean_specs()  # every clean scenario (samples and new controls), seed 7


@pytest.fixture(scope="module")
def field_run() -> dict[str, Any]:
    return accuracy.run(FIELD_SPECS, analyze_folder)


@pytest.fixture(scope="module")
def clean_run() -> dict[str, Any]:
    return accuracy.run(CLEAN_SPECS, analyze_folder)


def test_every_field_incident_is_generated_and_scored(field_run: dict[str, Any]) -> None:
    summary = field_run["summary"]
    assert summary["errors"] == []
    assert [r["scenario"] for r in field_run["incidents"]] == list(accuracy.CI_SCENARIOS)
    assert [r["seed"] for r in field_run["incidents"]] == list(accuracy.CI_SEEDS)
    for r in field_run["incidents"]:
        assert r["truth_layer"] in (*accuracy.LAYERS, accuracy.NONE)
        assert r["time"]["generation_s"] > 0 and r["time"]["analysis_s"] > 0
    assert summary["duplicate_incidents"] >= 12 and summary["controls"] >= 5


def test_field_accuracy_floors(field_run: dict[str, Any]) -> None:
    summary = field_run["summary"]
    report = accuracy.render(summary, "field, CI seeds")
    assert summary["layer_honest_visible"] >= FIELD_HONEST_FLOOR, report
    assert summary["layer_strict_visible"] >= FIELD_STRICT_FLOOR, report
    assert summary["controls_clear"] == 1.0, report
    assert summary["false_duplicates"]["total"] <= MAX_FALSE_DUPLICATES, report
    assert summary["findings"]["recall"] >= FINDINGS_FLOOR, report


def test_clean_scenarios_floor(clean_run: dict[str, Any]) -> None:
    summary = clean_run["summary"]
    report = accuracy.render(summary, "clean, the samples' seed")
    assert summary["errors"] == [], report
    assert summary["layer_strict"] >= CLEAN_LAYER_FLOOR, report
    assert summary["controls_clear"] == 1.0, report
    assert summary["false_duplicates"]["total"] == 0, report


# ---------------------------------------------------------------------------- scoring rules


def _attempt(attempt_id: str, subject: str = "cus_A") -> dict[str, Any]:
    return {"attempt_id": attempt_id, "request_id": attempt_id, "subject": subject,
            "at": "2025-03-04T10:00:00Z"}


def _report(*groups: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> dict[str, Any]:
    return {"groups": [{"attempts": a, "duplicates": d, "findings": [{"code": "key_missing"}]}
                       for a, d in groups]}


def _dup(first: str, second: str, layer: str, **extra: Any) -> dict[str, Any]:
    return {"first": first, "second": second, "layer": layer, "protected": False, **extra}


def test_strict_and_honest_are_scored_apart() -> None:
    truth = {"layer": "step_retry", "request_ids": ["req_1", "req_2"],
             "expected_findings": ["key_missing", "span_missing"]}
    hedged = _dup("req_1", "req_2", "sdk_retry",
                  alternatives=[{"layer": "step_retry", "why": "a 2 s timeout"}])
    result = accuracy.score(truth, _report(([_attempt("req_1"), _attempt("req_2")], [hedged])))
    assert (result["reported_layer"], result["strict"], result["honest"]) == \
        ("sdk_retry", False, True)
    assert result["findings_hit"] == ["key_missing"] and result["false_duplicates"] == []
    # three candidate layers are a shrug, not an answer
    shrug = _dup("req_1", "req_2", "sdk_retry", alternatives=[
        {"layer": "step_retry", "why": ""}, {"layer": "gateway_retry", "why": ""}])
    result = accuracy.score(truth, _report(([_attempt("req_1"), _attempt("req_2")], [shrug])))
    assert not result["honest"]
    # nothing reported for the incident's requests: missed
    assert accuracy.score(truth, _report())["reported_layer"] == accuracy.MISSED


def test_the_first_unprotected_duplicate_names_the_layer() -> None:
    truth = {"layer": "redelivery", "request_ids": ["req_1", "req_2", "req_3"]}
    attempts = [_attempt("req_1"), _attempt("req_2"), _attempt("req_3")]
    dups = [_dup("req_1", "req_2", "sdk_retry", protected=True),
            _dup("req_2", "req_3", "redelivery")]
    assert accuracy.score(truth, _report((attempts, dups)))["reported_layer"] == "redelivery"


def test_false_duplicates_on_controls_and_on_noise() -> None:
    control = {"layer": "none", "request_ids": ["req_1", "req_2"]}
    report = _report(
        ([_attempt("req_1"), _attempt("req_2")], [_dup("req_1", "req_2", "model_reemission")]),
        ([_attempt("req_8", "cus_B"), _attempt("req_9", "cus_C")],
         [_dup("req_8", "req_9", "sdk_retry")]),
    )
    result = accuracy.score(control, report)
    assert result["reported_layer"] == "model_reemission" and not result["strict"]
    assert [f["on"] for f in result["false_duplicates"]] == ["controls", "noise"]
    assert result["false_duplicates"][1]["customers"] == ["cus_B", "cus_C"]
    # on a duplicate incident, its own pair is true and a neighbour joined to it is false
    truth = {"layer": "step_retry", "request_ids": ["req_1", "req_2"]}
    joined = _report(([_attempt("req_1"), _attempt("req_2"), _attempt("req_7", "cus_N")],
                      [_dup("req_1", "req_2", "step_retry"), _dup("req_2", "req_7", "sdk_retry")]))
    (false,) = accuracy.score(truth, joined)["false_duplicates"]
    assert false["on"] == "noise" and false["touches_incident"]


def test_a_results_file_keeps_the_other_runs(tmp_path: Path) -> None:
    out = tmp_path / "accuracy.json"
    accuracy.write_results(out, "before", {"summary": {"layer_strict": 0.5}, "incidents": []})
    accuracy.write_results(out, "after", {"summary": {"layer_strict": 0.9}, "incidents": []})
    accuracy.write_results(out, "after", {"summary": {"layer_strict": 0.95}, "incidents": []})
    runs = json.loads(out.read_text())["runs"]
    assert {k: v["summary"]["layer_strict"] for k, v in runs.items()} == \
        {"before": 0.5, "after": 0.95}


def test_seed_ranges_do_not_overlap_and_specs_follow_them() -> None:
    ranges = [accuracy.DEV_SEEDS, accuracy.HELD_OUT_SEEDS, accuracy.CI_SEEDS]
    for a, b in itertools.combinations(ranges, 2):
        assert not set(a) & set(b)
    assert [s.seed for s in accuracy.specs_for("field", 3, None)] == [1000, 1001, 1002]
    clean = accuracy.specs_for("clean", 14, None)
    assert {s.scenario for s in clean} == set(accuracy.clean_scenarios())
    assert [s.seed for s in clean][-2:] == [accuracy.CLEAN_SEED + 1] * 2


def test_the_summary_and_its_table() -> None:
    ok = {"seed": 1, "realism": "field", "scenario": "step_retry", "truth_layer": "step_retry",
          "reported_layer": "sdk_retry", "strict": False, "honest": True, "visible": True,
          "expected_findings": ["key_regenerated"], "findings_hit": [],
          "false_duplicates": [], "time": {"generation_s": 4.0, "generation_run_s": 3.0,
                                           "analysis_s": 0.3, "engine_s": 0.2}, "variant": {}}
    control = ok | {"seed": 2, "scenario": "control_new_turn", "truth_layer": "none",
                    "reported_layer": "missed", "strict": True, "honest": True,
                    "expected_findings": []}
    summary = accuracy.summarize([ok, control, {"seed": 3, "error": "boom"}])
    assert summary["layer_strict"] == 0.0 and summary["layer_honest"] == 1.0
    assert summary["controls_clear"] == 1.0 and summary["findings"]["recall"] == 0.0
    assert summary["confusion"] == {"step_retry": {"sdk_retry": 1}, "none": {"missed": 1}}
    assert summary["errors"] == [{"seed": 3, "error": "boom"}]
    table = accuracy.render(summary)
    assert "step_retry" in table and "honest" in table and "seed 3: boom" in table
