"""Drills: every curriculum entry generates, hides its answer, and grades against the truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twice import drills
from twice.drills import Drill
from twice.layers import Layer

ENTRIES = [(level, name) for level, lv in drills.CURRICULUM.items() for name in lv.entries]


@pytest.fixture(scope="session")
def drill_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "drill-cache"


@pytest.fixture(scope="module")
def generated(drill_cache: Path) -> dict[tuple[int, str], tuple[Drill, Path]]:
    """One drill per curriculum entry, generated with no noise (one child process)."""
    every = drills.all_drills()
    folders = drills.generate_all(every, drill_cache, noise=0)
    return {(d.level, d.scenario): (d, f) for d, f in zip(every, folders, strict=True)}


def _truth(folder: Path) -> dict[str, object]:
    return json.loads((folder / "truth.json").read_text())


def test_the_curriculum_climbs_from_one_clear_duplicate_to_controls_and_skew() -> None:
    assert sorted(drills.CURRICULUM) == [1, 2, 3, 4]
    assert set(drills.CURRICULUM[1].entries) == {"step_retry", "model_reemission", "redelivery"}
    assert {"sdk_retry", "gateway_retry", "sdk_retry_replayed", "control_new_turn"} == set(
        drills.CURRICULUM[2].entries)
    level3 = drills.CURRICULUM[3].entries["redelivery"].variants
    assert all(v.options["visibility_timeout"] < 120 for v in level3)  # lands below minutes
    level4 = drills.CURRICULUM[4].entries.values()
    assert any(v.skew_s for e in level4 for v in e.variants)
    assert {"control_new_turn", "control_renewal"} <= set(drills.CURRICULUM[4].entries)


@pytest.mark.parametrize(("level", "scenario"), ENTRIES)
def test_the_true_answer_scores_full_marks_and_a_wrong_one_does_not(
        generated: dict[tuple[int, str], tuple[Drill, Path]], level: int, scenario: str) -> None:
    drill, folder = generated[(level, scenario)]
    truth = _truth(folder)
    layer, fixes = drills.answer_key(truth)
    assert layer == truth["layer"]
    right = drills.grade(drill, folder, layer, sorted(fixes)[0])
    assert (right.layer_ok, right.fix_ok, right.score) == (True, True, 2)
    wrong_layer = next(x for x in drills.LAYER_CHOICES if x != layer)
    wrong_fix = next(x for x in drills.FIX_CHOICES if x not in fixes)
    assert drills.grade(drill, folder, wrong_layer, sorted(fixes)[0]).score == 1
    assert drills.grade(drill, folder, layer, wrong_fix).score == 1
    assert drills.grade(drill, folder, wrong_layer, wrong_fix).score == 0


@pytest.mark.parametrize(("level", "scenario"), ENTRIES)
def test_the_question_does_not_name_the_answer(
        generated: dict[tuple[int, str], tuple[Drill, Path]], level: int, scenario: str) -> None:
    drill, folder = generated[(level, scenario)]
    layer = str(_truth(folder)["layer"])
    q = drills.question(drill, folder)
    shown = (q.text() + drill.id).lower()
    # the level's title is the same for every drill of the level, so it may name categories
    plain = drills.LAYER_CHOICES[layer].lower()
    for word in {layer, layer.replace("_", " "), scenario, plain, "not a duplicate"}:
        assert word not in shown, word
    assert q.customer == _truth(folder)["customer"]
    assert len(q.attempts) >= 2 and len(q.gaps) == len(q.attempts) - 1
    # the charts' analysis carries no verdict, evidence, finding or fix
    dups = [d for g in q.analysis.groups for d in g.duplicates]
    assert all(d.layer is Layer.UNKNOWN and not d.evidence and not d.fix for d in dups)
    assert all(not g.findings for g in q.analysis.groups)


def test_a_drill_id_round_trips_and_carries_no_answer() -> None:
    drill = drills.drill_for(2, "gateway_retry", 4711)
    assert drills.parse_id(drill.id) == drill
    assert drill.id == f"L2-{drill.seed}" and "gateway" not in drill.id
    assert drills.new_drill(2, drill.seed) == drill
    seeds = {drills.new_drill(3).seed for _ in range(5)}
    assert len(seeds) > 1  # a random seed when none is given
    for bad in ("L9-1", "L2-gateway_retry-1", "drill", "L2-", "L2-1;drop"):
        with pytest.raises(ValueError):
            drills.parse_id(bad)


def test_the_same_id_generates_the_same_incident(tmp_path: Path) -> None:
    drill = drills.drill_for(2, "sdk_retry", 99)
    first = drills.generate(drills.parse_id(drill.id), tmp_path / "a", noise=0)
    again = drills.generate(drills.parse_id(drill.id), tmp_path / "b", noise=0)
    assert _truth(first) == _truth(again)
    # the lab's virtual clock ticks with real time: the ids and the bands repeat, not the ms
    q1, q2 = drills.question(drill, first), drills.question(drill, again)
    assert list(q1.attempts["request_id"]) == list(q2.attempts["request_id"])
    assert [g.band for g in q1.gaps] == [g.band for g in q2.gaps]
    assert drills.generate(drill, tmp_path / "a", noise=0) == first  # cached by id


def test_explanations_say_what_gave_it_away_and_what_would_have_misled(
        generated: dict[tuple[int, str], tuple[Drill, Path]]) -> None:
    drill, folder = generated[(1, "step_retry")]
    e = drills.explain(drill, folder)
    assert e.true_layer == "step_retry" and e.what_happened == _truth(folder)["description"]
    assert any("tool_call_id" in x for x in e.gave_away)
    assert any("tens_of_seconds" in x and "model_reemission" in x for x in e.misled)

    drill, folder = generated[(3, "redelivery")]
    e = drills.explain(drill, folder)
    assert any("delivered" in x for x in e.gave_away)  # the queue's receive count
    assert any("not redelivery" in x for x in e.misled)  # its gap is in another layer's band

    drill, folder = generated[(2, "control_new_turn")]
    e = drills.explain(drill, folder)
    assert e.true_layer == "none" and "nothing" in drills.answer_key(_truth(folder))[1]
    assert any("after a FAILURE" in x for x in e.misled)
    assert sum("whose result was 'ok'" in x for x in e.gave_away) == 2  # two asked-for calls

    drill, folder = generated[(2, "sdk_retry_replayed")]
    e = drills.explain(drill, folder)
    assert any("one effect" in x and "replayed" in x for x in e.misled)
    assert drills.grade(drill, folder, "sdk_retry", "client_key").score == 1  # nothing to fix


def test_a_resume_past_the_key_retention_wants_a_record_of_effects_not_a_key(
        generated: dict[tuple[int, str], tuple[Drill, Path]]) -> None:
    drill, folder = generated[(4, "human_pause")]
    truth = _truth(folder)
    assert drills.answer_key(truth) == ("redelivery", frozenset({"effects_record"}))
    # the derived key was already sent: answering "derive the key" is the tempting wrong fix
    assert drills.grade(drill, folder, "redelivery", "derived_key").score == 1
    assert drills.grade(drill, folder, "redelivery", "effects_record").score == 2
    q = drills.question(drill, folder)
    assert [g.band.value for g in q.gaps] == ["beyond_retention"]
    keys = set(q.attempts["idempotency_key"])
    assert len(keys) == 1 and all(isinstance(k, str) and k for k in keys)
    e = drills.explain(drill, folder)
    assert any("key retention" in x and "same derived" in x for x in e.misled)
    assert any(x.startswith("key_expired") for x in e.gave_away)
    assert "durable record" in e.fix


def test_a_skewed_provider_clock_is_explained_and_still_aligned(
        generated: dict[tuple[int, str], tuple[Drill, Path]]) -> None:
    drill, folder = generated[(4, "gateway_retry")]
    skew = drills.variant(drill).skew_s
    assert skew
    _, analysis = drills.load(folder)
    provider = [o for o in analysis.offsets if o.source == "provider"]
    assert provider and abs(provider[0].seconds - skew) < 5  # the lab's own offset is 1-4 s
    assert any("clock ran" in x for x in drills.explain(drill, folder).misled)


def test_choices_are_read_by_number_or_name() -> None:
    assert drills.parse_choice("1", drills.LAYER_CHOICES) == "sdk_retry"
    assert drills.parse_choice("Not a duplicate", drills.LAYER_CHOICES) == "none"
    assert drills.parse_choice("derived-key", drills.FIX_CHOICES) == "derived_key"
    with pytest.raises(ValueError):
        drills.parse_choice("7", drills.LAYER_CHOICES)
