"""The corpus's scoring rule (`twice.lab.corpus.score_case`) on reports made by hand: a strict
hit, an honest pair, a miss, a crash, a false duplicate, a control and the account's traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twice.lab.corpus import Case, score_case, summarize


def _attempt(request_id: str, obj: str | None = None) -> dict[str, Any]:
    return {"attempt_id": request_id, "request_id": request_id, "object_id": obj,
            "subject": "cus_1"}


def _group(first: str, second: str, layer: str, alternatives: list[str] | None = None,
           obj: str | None = None) -> dict[str, Any]:
    return {"attempts": [_attempt(first), _attempt(second, obj)],
            "duplicates": [{"first": first, "second": second, "layer": layer,
                            "alternatives": [{"layer": a, "why": "."} for a in
                                             alternatives or []]}],
            "findings": [{"code": "key_missing"}]}


TRUTH = {"case": "c", "duplicates": [
    {"requests": ["req_a1", "req_a2"], "layer": "sdk_retry", "findings": ["key_missing"]},
    {"requests": ["req_b1", "req_b2"], "layer": "step_retry", "findings": []},
    {"requests": ["req_c1", "req_c2"], "layer": "redelivery", "findings": []}],
    "not_duplicates": [{"requests": ["req_d1", "req_d2"]}],
    "noise": [{"kind": "renewal", "objects": ["in_9"]}]}
CASE = Case(Path("/x/field/c"), "field", TRUTH)


def test_strict_honest_missed_and_false() -> None:
    report = {"groups": [
        _group("req_a1", "req_a2", "sdk_retry"),
        _group("req_b1", "req_b2", "redelivery", ["step_retry"]),
        _group("req_c1", "req_x", "redelivery"),  # not the truth's pair: false, and c missed
    ]}
    r = score_case(CASE, 0, report)
    got = [(d["reported"], d["strict"], d["honest"]) for d in r["duplicates"]]
    assert got == [("sdk_retry", True, True), ("redelivery", False, True),
                   ("missed", False, False)]
    assert [(f["first"], f["second"]) for f in r["false_duplicates"]] == [("req_c1", "req_x")]
    assert r["duplicates"][0]["findings_hit"] == ["key_missing"]
    assert r["controls"] == [{"requests": ["req_d1", "req_d2"], "clear": True}]
    assert r["noise_hits"] == []


def test_two_alternatives_are_not_honest_and_a_control_or_noise_touched_counts() -> None:
    report = {"groups": [
        _group("req_a1", "req_a2", "gateway_retry", ["sdk_retry", "step_retry"]),
        _group("req_d1", "req_z", "sdk_retry"),
        _group("req_y", "req_w", "redelivery", obj="in_9"),
    ]}
    r = score_case(CASE, 0, report)
    assert not r["duplicates"][0]["honest"]
    assert r["controls"][0]["clear"] is False
    assert r["noise_hits"] == ["renewal"]
    assert len(r["false_duplicates"]) == 2


def test_a_crash_counts_every_duplicate_and_control_wrong() -> None:
    r = score_case(CASE, 70, None)
    assert r["crashed"] and all(d["reported"] == "crashed" for d in r["duplicates"])
    assert r["controls"][0]["clear"] is False
    summary = summarize([r])
    assert summary["all"]["crashes"] == 1 and summary["all"]["strict"] == 0.0
