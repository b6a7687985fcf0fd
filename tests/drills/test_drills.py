"""Drills: the curriculum, reproducible evidence, explanations that cite only what was shown,
feedback on every wrong answer, the answer key.

One drill of every case of every level is generated once (about half a minute: the field lab
with a small busy day), shared by the tests through the session's drill cache.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import pytest

from twice import drills
from twice.drills import Drill
from twice.drills.curriculum import CASE_LAYERS
from twice.layers import LAYERS, Layer

Generated = dict[str, tuple[Drill, Path]]

# ids the explanations name: provider ids, the model's tool call ids, UUIDs (threads, keys,
# messages), hex span and trace ids, workers
ID = re.compile(r"\b(?:req|cus|pi|ch|evt|toolu|call|sub)_[A-Za-z0-9]+|"
                r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|"
                r"\b[0-9a-f]{16,32}\b|\bworker-[a-z]\b")
NUMBER = re.compile(r"\d+(?:[.:]\d+)*")
# words of a story the evidence does not tell (the lab's narratives used them)
UNSUPPORTED = ("envoy", "istio", "urllib3", "retrypolicy", "subscription", "human", "sqs",
               "oom", "crash", "killed", "timed out after", "random key", "approval")


def _token_in(token: str, text: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(token)}(?![\w])", text) is not None


def _statements(drill: Drill, folder: Path) -> tuple[drills.Explanation, list[str]]:
    e = drills.explain(drill, folder)
    said = [x for lines in drills.every_feedback(drill, folder).values() for x in lines]
    return e, [*e.lines(), *said]


# --------------------------------------------------------------------------- the curriculum


def test_each_level_adds_one_skill_that_shows_in_the_evidence() -> None:
    levels = drills.CURRICULUM
    assert sorted(levels) == [1, 2, 3, 4]
    assert not levels[1].busy and all(lv.busy for n, lv in levels.items() if n > 1)
    assert all(not c.missing for n in (1, 2, 4) for c in levels[n].cases)
    assert all(c.missing for c in levels[3].cases)  # level 3: a source the team lacks
    assert any(c.undecidable for c in levels[3].cases)  # ... that sometimes decides it
    # level 1 names every layer once: one clear duplicate per layer
    assert sorted(CASE_LAYERS[c.scenario] for c in levels[1].cases) == sorted(
        x.value for x in Layer if x is not Layer.UNKNOWN)
    assert any(CASE_LAYERS[c.scenario] == "none" for c in levels[2].cases)  # a first control


def test_no_two_cases_of_the_curriculum_are_the_same_drill() -> None:
    seen = Counter((c.scenario, tuple(sorted(c.options.items())), c.missing, lv.busy)
                   for lv in drills.CURRICULUM.values() for c in lv.cases)
    assert max(seen.values()) == 1, [k for k, n in seen.items() if n > 1]


def test_cases_are_drawn_evenly() -> None:
    rng = random.Random(7)
    seen: list[str] = []
    for _ in range(4 * len(drills.CURRICULUM[3].cases)):
        seen.append(drills.new_drill(3, seen=seen, rng=rng).id)
    counts = Counter(drills.parse_id(d).case for d in seen)
    assert set(counts.values()) == {4}  # every case exactly four times
    # and a seed alone (a link) lands on every case about as often
    by_seed = Counter(drills.parse_id(f"L2-{s}").case for s in range(1, 5001))
    assert max(by_seed.values()) < 1.15 * min(by_seed.values())


def test_a_drill_id_round_trips_and_carries_no_answer() -> None:
    drill = drills.drill_for(2, "gateway_retry", 4711)
    assert drills.parse_id(drill.id) == drill
    assert drill.id == f"L2-{drill.seed}" and "gateway" not in drill.id
    assert drills.new_drill(2, drill.seed) == drill
    assert drills.drill_for(3, "sdk_no_spans").lab_seed != drills.drill_for(1, "sdk_retry").lab_seed
    for bad in ("L9-1", "L2-gateway_retry-1", "drill", "L2-", "L2-1;drop"):
        with pytest.raises(ValueError):
            drills.parse_id(bad)


def test_every_case_is_what_the_lab_ran(generated: Generated) -> None:
    for drill, folder in generated.values():
        truth = drills.grading.truth_of(folder)
        assert truth["layer"] == drill.spec.layer, drill
        assert truth["variant"]["pending_seams"] == []  # the files hold what was asked for


def test_timing_points_the_wrong_way_on_level_four(generated: Generated) -> None:
    for drill, folder in generated.values():
        if drill.level != 4 or drill.spec.layer == drills.NONE:
            continue
        q = drills.question(drill, folder)
        home = LAYERS[Layer(drill.spec.layer)].home
        if drill.spec.scenario != "human_pause":  # that one teaches the key's retention
            assert all(g.band not in home for g in q.gaps), (drill, q.gaps)


# --------------------------------------------------------------------------- reproducible


def test_the_same_id_shows_the_same_evidence(tmp_path: Path) -> None:
    drill = drills.drill_for(1, "sdk_retry", 500)
    first = drills.generate(drill, tmp_path / "a")
    again = drills.generate(drills.parse_id(drill.id), tmp_path / "b")
    for name in ("events.json", "request_log.csv", "spans.jsonl", "truth.json"):
        assert (first / name).read_bytes() == (again / name).read_bytes(), name
    assert drills.question(drill, first).text() == drills.question(drill, again).text()
    assert drills.explain(drill, first) == drills.explain(drill, again)
    assert drills.generate(drill, tmp_path / "a") == first  # cached by id


# --------------------------------------------------------------------------- what is shown


@pytest.mark.parametrize("drill_id", [d.id for d in drills.all_drills()])
def test_explanations_cite_only_what_the_drill_showed(generated: Generated,
                                                      drill_id: str) -> None:
    """Every id and number of the explanation and of the feedback on every wrong answer is
    in the evidence the drill displays; a point about a source is made only when that source
    holds rows; no story the evidence does not tell."""
    drill, folder = generated[drill_id]
    q = drills.question(drill, folder)
    shown = q.text()
    e, statements = _statements(drill, folder)
    for text in statements:
        for token in ID.findall(text):
            assert _token_in(token, shown), (token, text)
        for number in NUMBER.findall(ID.sub(" ", text)):
            assert _token_in(number, shown), (number, text)
        for word in UNSUPPORTED:
            assert word not in text.lower() or word in shown.lower(), (word, text)
    for point in (*e.gave_away, *e.misled):
        if point.source in drills.SOURCES:
            frame = q.shown[point.source]
            assert frame is not None and not frame.empty, point
    for source, words in (("spans", ("span", "trace")), ("queue", ("queue", "receive"))):
        if q.shown[source] is None:  # not exported: only said to be missing
            for text in statements:
                if text == e.fix:  # what to change, not a claim about the evidence
                    continue
                for label in drills.FIX_CHOICES.values():
                    text = text.replace(label, "")
                if any(w in text.lower() for w in words):
                    assert "exported" in text or "without" in text.lower(), text


@pytest.mark.parametrize("drill_id", [d.id for d in drills.all_drills()])
def test_the_fix_says_to_derive_the_key_once(generated: Generated, drill_id: str) -> None:
    """Two fixes may both stop the repeat (a redelivery: the visibility timeout, the derived
    key); the paragraph names deriving the key once, not once per fix."""
    drill, folder = generated[drill_id]
    fix = drills.explain(drill, folder).fix.lower()
    assert fix.count("derive") <= 1, fix


@pytest.mark.parametrize("drill_id", [d.id for d in drills.all_drills()])
def test_the_question_does_not_name_the_answer(generated: Generated, drill_id: str) -> None:
    drill, folder = generated[drill_id]
    layer = drill.spec.layer
    q = drills.question(drill, folder)
    shown = (q.text() + drill.id).lower()
    for word in {layer, layer.replace("_", " "), drill.spec.scenario, drill.case,
                 "not a duplicate", "gateway", "redeliver"}:
        assert word not in shown, word
    dups = [d for g in q.analysis.groups for d in g.duplicates]
    assert all(d.layer is Layer.UNKNOWN and not d.evidence and not d.fix for d in dups)
    assert all(not g.findings for g in q.analysis.groups)


def test_readable_text_milliseconds_and_bands_by_time(generated: Generated) -> None:
    drill, folder = generated[drills.drill_for(1, "step_retry").id]
    q = drills.question(drill, folder)
    provider = q.shown["provider"]
    assert provider is not None
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", t)
               for t in provider["time (aligned)"])
    assert {"idempotency key", "request id", "payment"} <= set(provider.columns)
    spans = q.shown["spans"]
    assert spans is not None and {"resend count", "key sent", "detail"} <= set(spans.columns)
    assert [g.band_text for g in q.gaps] == ["10 s to 2 min"]
    text = q.text() + "\n".join(drills.explain(drill, folder).lines())
    for code in ("tens_of_seconds", "failure_reported_for_unknown_outcome", "proxy_no_retry",
                 "key_regenerated", "band)"):
        assert code not in text, code
    assert "(read timeout=30.0)" in q.source_text("spans") or "…" in q.source_text("spans")


def test_a_missing_source_says_so(generated: Generated) -> None:
    drill, folder = generated[drills.drill_for(3, "redelivery_no_queue").id]
    q = drills.question(drill, folder)
    assert q.shown["queue"] is None
    assert "not exported" in q.source_text("queue")
    drill, folder = generated[drills.drill_for(1, "step_retry").id]
    assert "no records for these threads" in drills.question(drill, folder).source_text("queue")


# --------------------------------------------------------------------------- the answer key


def _grade(generated: Generated, level: int, case: str, layer: str, fix: str,
           opened: tuple[str, ...] = drills.SOURCES) -> tuple[drills.Grade, list[str]]:
    drill, folder = generated[drills.drill_for(level, case).id]
    g = drills.grade(drill, folder, drills.Answer(layer, fix, opened))
    return g, drills.feedback(drill, folder, g)


@pytest.mark.parametrize("drill_id", [d.id for d in drills.all_drills()])
def test_the_right_answer_scores_full_marks(generated: Generated, drill_id: str) -> None:
    drill, folder = generated[drill_id]
    key = drills.answer_key(drill, drills.grading.truth_of(folder))
    right = drills.Answer(sorted(key.layers)[0], sorted(key.fixes)[0], key.needs, 3, 20.0,
                          key.mitigation, sorted(key.owners)[0], key.status)
    g = drills.grade(drill, folder, right)
    assert (g.score, g.response_score) == (drills.MAX_SCORE, drills.MAX_RESPONSE)
    assert drills.feedback(drill, folder, g) == []
    wrong = drills.Answer(next(x for x in drills.LAYER_CHOICES if x not in key.layers),
                          next(x for x in drills.FIX_CHOICES if x not in key.fixes), ())
    g = drills.grade(drill, folder, wrong)
    assert g.score == 0 and len(drills.feedback(drill, folder, g)) == 3


def test_a_protected_repeat_accepts_the_key_that_protected_it(generated: Generated) -> None:
    for fix in ("nothing", "client_key"):
        g, _ = _grade(generated, 2, "sdk_retry_replayed", "sdk_retry", fix)
        assert g.fix_ok, fix
    g, said = _grade(generated, 2, "sdk_retry_replayed", "sdk_retry", "proxy_no_retry")
    assert not g.fix_ok and g.key.mitigation == "none_replayed"


def test_a_resume_past_the_key_retention_wants_a_record_of_effects(generated: Generated) -> None:
    g, said = _grade(generated, 4, "resumed_after_retention", "redelivery", "derived_key")
    assert g.layer_ok and not g.fix_ok
    assert any("already the same on both requests" in s for s in said)
    e = drills.explain(*generated[drills.drill_for(4, "resumed_after_retention").id])
    assert "queue" not in e.headline  # a resumed run with no queue in the evidence


def test_cannot_tell_is_the_answer_when_the_missing_source_decides(generated: Generated) -> None:
    g, _ = _grade(generated, 3, "sdk_no_spans", "need_spans", "derived_key")
    assert g.layer_ok and g.fix_ok
    g, said = _grade(generated, 3, "sdk_no_spans", "sdk_retry", "derived_key")
    assert not g.layer_ok and "say you need them rather than guess" in said[0]
    # where the other sources decide, "I need it" is wrong, and the feedback says what decides
    g, said = _grade(generated, 3, "step_no_spans", "need_spans", "derived_key")
    assert not g.layer_ok and "still decide it" in said[0]


def test_the_score_counts_the_sources_the_answer_needs(generated: Generated) -> None:
    g, said = _grade(generated, 1, "redelivery", "redelivery", "visibility_timeout",
                     ("provider", "queue"))
    assert not g.evidence_ok and g.missed_sources == ("checkpoints",)
    assert any("without the agent's checkpoints" in s for s in said)
    g, _ = _grade(generated, 1, "redelivery", "redelivery", "visibility_timeout",
                  ("provider", "checkpoints", "queue"))
    assert g.evidence_ok and g.score == 3


# --------------------------------------------------------------------------- feedback kinds


def _one_line(said: list[str]) -> str:
    return " ".join(said)


def test_feedback_a_proxy_resend_leaves_one_client_span(generated: Generated) -> None:
    g, said = _grade(generated, 1, "sdk_retry", "gateway_retry", "client_key")
    assert "leaves one client span" in _one_line(said) and "resend count 0 and 1" in said[0]


def test_feedback_an_sdk_resend_leaves_two_client_spans(generated: Generated) -> None:
    g, said = _grade(generated, 1, "gateway_retry", "sdk_retry", "proxy_no_retry")
    assert "resend count 1" in said[0] and "holds one" in said[0]


def test_feedback_one_tool_call_id_means_the_model_asked_once(generated: Generated) -> None:
    drill, folder = generated[drills.drill_for(1, "step_retry").id]
    g, said = _grade(generated, 1, "step_retry", "model_reemission", "derived_key")
    call = drills.question(drill, folder).shown["checkpoints"]
    assert call is not None
    ids = {c for c in call["tool call id"] if c != "-"}
    assert "the model asked once" in said[0] and any(i in said[0] for i in ids)


def test_feedback_two_tool_call_ids_mean_the_model_asked_twice(generated: Generated) -> None:
    g, said = _grade(generated, 1, "model_reemission", "step_retry", "unknown_outcome")
    assert "two tool calls" in said[0] and "the model asked twice" in said[0]


def test_feedback_a_step_retry_stays_inside_one_run(generated: Generated) -> None:
    g, said = _grade(generated, 4, "redelivery_fast", "step_retry", "derived_key")
    assert "stays inside one run" in said[0] and "receive count 2" in said[0]


def test_feedback_a_redelivery_shows_in_the_queue(generated: Generated) -> None:
    g, said = _grade(generated, 4, "step_slow", "redelivery", "derived_key")
    assert "no receive for thread" in said[0] and "inside one run" in said[0]


def test_feedback_a_control_was_asked_for(generated: Generated) -> None:
    g, said = _grade(generated, 2, "new_turn", "step_retry", "derived_key")
    assert "A new input came into the thread" in said[0]
    assert "there is nothing to fix" in said[1]


def test_feedback_on_calling_a_duplicate_a_control(generated: Generated) -> None:
    g, said = _grade(generated, 1, "step_retry", "none", "nothing")
    assert "one intended call was executed twice" in said[0]
    assert "Two payments were made" in said[1]


def test_feedback_find_the_customer_among_the_traffic(generated: Generated) -> None:
    g, said = _grade(generated, 2, "same_amount", "sdk_retry", "nothing")
    assert "has one payment request" in said[0] and "other customers'" in said[0]


def test_feedback_on_a_fix_that_cannot_stop_the_model(generated: Generated) -> None:
    g, said = _grade(generated, 4, "model_fast", "model_reemission", "derived_key")
    assert "a new tool call id derives a new key" in said[0]


def test_choices_are_read_by_number_or_name() -> None:
    assert drills.parse_choice("1", drills.LAYER_CHOICES) == "sdk_retry"
    assert drills.parse_choice("Not a duplicate", drills.LAYER_CHOICES) == "none"
    assert drills.parse_choice("derived-key", drills.FIX_CHOICES) == "derived_key"
    assert drills.parse_sources("provider, 3") == ("provider", "spans")
    with pytest.raises(ValueError):
        drills.parse_choice("9", drills.LAYER_CHOICES)
