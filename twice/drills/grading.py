"""Grading a drill answer against `truth.json`, and explaining it from the evidence.

`grade` scores the layer and the fix against the ground truth (what the lab did), not against
twice's verdict; `explain` says what gave it away and what would have misled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twice.drills.curriculum import Drill
from twice.drills.question import Gap, customer_attempts, load, question
from twice.engine import Analysis
from twice.layers import LAYERS, REMEDIES, Band, Layer, usual_suspects
from twice.timeline import Kind
from twice.verdict import fmt_gap

NONE = "none"  # the layer answer "not a duplicate", as truth.json spells it


LAYER_CHOICES: dict[str, str] = {
    **{layer.value: LAYERS[layer].plain for layer in Layer if layer is not Layer.UNKNOWN},
    NONE: "not a duplicate: each charge was asked for",
}
# the fixes a trainee picks from: every remedy but "export the evidence" (a drill has it all)
FIX_CHOICES: dict[str, str] = {code: r.short for code, r in REMEDIES.items()
                               if code != "export_evidence"}
FIX_TEXT: dict[str, str] = {code: REMEDIES[code].text for code in FIX_CHOICES}
# Which fixes stop each layer's second charge (a derived key makes any re-execution a replay,
# except the model's: a new tool call id derives a new key).
ACCEPTED_FIXES: dict[str, frozenset[str]] = {
    **{layer.value: LAYERS[layer].remedies for layer in Layer if layer is not Layer.UNKNOWN},
    NONE: frozenset({"nothing"}),
}
# Scenarios whose re-execution came after the provider's key retention: the derived key was
# already sent (and expired), so only the agent's own record of its effects stops it.
PAST_RETENTION = frozenset({"human_pause"})


def _protected(truth: dict[str, Any]) -> bool:
    return truth["layer"] != NONE and (bool(truth.get("protected"))
                                       or int(truth["effects_created"]) < 2)


def answer_key(truth: dict[str, Any]) -> tuple[str, frozenset[str]]:
    """The right layer, and the fixes that count as right."""
    if _protected(truth):
        return str(truth["layer"]), frozenset({"nothing"})
    if truth.get("scenario") in PAST_RETENTION:
        return str(truth["layer"]), frozenset({"effects_record"})
    return str(truth["layer"]), ACCEPTED_FIXES[str(truth["layer"])]


def parse_choice(text: str, choices: dict[str, str]) -> str:
    """A choice by key or by its 1-based number; ValueError otherwise."""
    text = text.strip().lower().replace(" ", "_").replace("-", "_")
    keys = list(choices)
    if text.isdigit() and 1 <= int(text) <= len(keys):
        return keys[int(text) - 1]
    if text in ("not_a_duplicate", "no", "control"):
        return NONE if NONE in choices else text
    if text not in choices:
        raise ValueError(f"{text!r}: choose one of {', '.join(keys)} (or its number)")
    return text


@dataclass(frozen=True)
class Grade:
    layer_answer: str
    fix_answer: str
    true_layer: str
    accepted_fixes: frozenset[str]
    layer_ok: bool
    fix_ok: bool

    @property
    def score(self) -> int:
        return int(self.layer_ok) + int(self.fix_ok)


def grade(drill: Drill, folder: Path, layer_answer: str, fix_answer: str) -> Grade:
    truth = json.loads((folder / "truth.json").read_text())
    layer, fixes = answer_key(truth)
    return Grade(layer_answer, fix_answer, layer, fixes, layer_answer == layer,
                 fix_answer in fixes)


# --------------------------------------------------------------------------- explanation


@dataclass(frozen=True)
class Explanation:
    true_layer: str
    headline: str
    what_happened: str
    gave_away: tuple[str, ...]
    misled: tuple[str, ...]
    fix: str
    twice_said: str


def _their_duplicates(analysis: Analysis, customer: str) -> list[Any]:
    mine = set(customer_attempts(analysis, customer)["attempt_id"].astype(str))
    return [d for g in analysis.groups for d in g.duplicates if d.second in mine]


def explain(drill: Drill, folder: Path) -> Explanation:
    truth, analysis = load(folder)
    layer, fixes = answer_key(truth)
    protected = _protected(truth)
    meta = _meta(folder)
    q_gaps = question(drill, folder).gaps
    dups = _their_duplicates(analysis, str(truth["customer"]))
    gave: list[str] = [str(e) for d in dups for e in d.evidence
                       if not e.startswith("gap ")]  # the band is discussed under "misled"
    findings = [f"{f.code}: {f.detail}" for g in analysis.groups for f in g.findings
                if any(d in g.duplicates for d in dups)]
    misled: list[str] = []
    if layer == NONE:
        headline = "Not a duplicate: every charge was asked for."
        gave.extend(_control_evidence(analysis, str(truth["customer"])))
        gave.append("each charge has its own tool call id, and each came after a successful "
                    "result and a new request (a new human turn or a new thread): nothing "
                    "failed, so nothing was retried")
        misled.append("same customer, same amount, same tool: it looks like the model asking "
                      "again, but the model asks again after a FAILURE; here the first call "
                      "succeeded")
    else:
        headline = f"{layer}: {LAYERS[Layer(layer)].plain}" + (
            " (protected: one effect)" if protected else "")
    if protected:
        misled.append("two requests reached the provider, but only one effect: the second was "
                      "answered from the idempotency cache (replayed), so no customer was "
                      "charged twice and there is nothing to fix")
    for gap in q_gaps:
        misled.extend(_band_note(layer, gap))
    if layer != NONE and any(g.band is Band.BEYOND_RETENTION for g in q_gaps):
        misled.append("both requests carry the same derived idempotency key, so the fix for "
                      "retries looks in place; but the repeat came after the provider's key "
                      "retention (Stripe: 24 h), when the key had been pruned and the request "
                      "counted as new")
    if "spans.jsonl" in meta.get("drop", []):
        misled.append("no traces were exported: nothing shows the HTTP client's resends or the "
                      "tool executions; the checkpoints (tool call ids) and the queue's receive "
                      "counts have to carry the verdict")
    elif any(f.startswith("span_missing") for f in findings):
        misled.append("the traces show fewer tool executions than the provider saw requests "
                      "(a failed attempt left no tool span): the traces alone hide the repeat")
    if meta.get("skew_s"):
        misled.append(f"the provider's clock ran {meta['skew_s']:+d} s off the agent's: on raw "
                      "clocks its requests sit that far from the tool calls that made them; "
                      "twice aligned them through the request ids the HTTP spans captured")
    verdicts = sorted({d.layer.value for d in dups})
    twice_said = ("twice found no repeated call for this customer" if not dups else
                  "twice said " + ", ".join(verdicts) + " (confidence "
                  + ", ".join(f"{d.confidence:.2f}" for d in dups) + ")")
    if dups and layer != NONE and verdicts != [layer]:
        misled.append(f"{twice_said}, not {layer}: the ground truth is what the lab did")
    if dups and layer == NONE:
        misled.append(f"{twice_said}: a control it should not have flagged")
    fix = " / ".join(FIX_TEXT[f] for f in sorted(fixes))
    return Explanation(layer, headline, str(truth["description"]), tuple(gave + findings),
                       tuple(dict.fromkeys(misled)), fix, twice_said)


def _control_evidence(analysis: Analysis, customer: str) -> list[str]:
    """For a control: each charge's own tool call, how it ended, and its thread."""
    mine = customer_attempts(analysis, customer)
    results = analysis.timeline[analysis.timeline["kind"] == Kind.TOOL_RESULT.value]
    outcome = dict(zip(results["tool_call_id"].astype(str), results["outcome"], strict=True))
    out = []
    for _, a in mine.iterrows():
        call = a["tool_call_id"] if isinstance(a["tool_call_id"], str) else None
        if call is None:
            continue
        out.append(f"{a['request_id']} was made by tool call {call} in thread {a['thread_id']}"
                   f", whose result was '{outcome.get(call, 'not recorded')}'")
    calls = {a for a in mine["tool_call_id"] if isinstance(a, str)}
    threads = {t for t in mine["thread_id"] if isinstance(t, str)}
    if len(threads) > 1:
        out.append(f"the charges come from {len(threads)} different threads: separate runs, "
                   "not one run repeated")
    elif len(calls) > 1:
        out.append(f"{len(calls)} different tool call ids in one thread, the first one "
                   "successful: the model was asked again, it did not retry")
    return out


def _band_note(layer: str, gap: Gap) -> list[str]:
    suspects = [x.value for x in usual_suspects(gap.band)]
    where = f"the {fmt_gap(gap.gap_seconds)} gap lands in the {gap.band.value} band"
    if layer == NONE:
        return [f"{where}, where {' / '.join(suspects)} usually lands: timing alone would call "
                "it a duplicate"]
    if gap.band not in LAYERS[Layer(layer)].bands:
        return [f"{where}, where {' / '.join(suspects)} usually lands, not {layer}: the "
                "fingerprints (tool call ids, keys, receive counts) outweigh the timing"]
    others = [s for s in suspects if s != layer]
    if others:
        return [f"{where}, which {layer} shares with {' / '.join(others)}: the band alone "
                "cannot tell them apart"]
    return []


def _meta(folder: Path) -> dict[str, Any]:
    path = folder / "drill.json"
    return json.loads(path.read_text()) if path.exists() else {}

