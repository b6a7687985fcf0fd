"""The answer key of a drill, and grading an answer against it.

An answer is the layer (or "not a duplicate", or "I can't tell: I need X"), the fix, the
sources the trainee opened, how sure they were, and the response: what to do for the customer,
who owns the change, what to tell people. The key comes from the lab's ground truth
(`truth.json`: what the lab did) and the drill's case (what its evidence can decide), never
from twice's verdict.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twice.drills.curriculum import SOURCE_WORDS, SOURCES, Drill
from twice.layers import LAYERS, Layer

NONE = "none"  # the layer answer "not a duplicate", as truth.json spells it
NEED = "need_"  # "I can't tell: I need <source>"
NEEDABLE = ("spans", "queue")  # the sources a team may not have exported

LAYER_CHOICES: dict[str, str] = {
    **{layer.value: LAYERS[layer].plain for layer in Layer if layer is not Layer.UNKNOWN},
    NONE: "not a duplicate: each charge was asked for",
    **{NEED + s: f"I can't tell: I need {SOURCE_WORDS[s]}" for s in NEEDABLE},
}
FIX_CHOICES: dict[str, str] = {
    "derived_key": "derive the idempotency key from the thread id and the tool call id",
    "client_key": "send a key the HTTP client reuses on its own retries",
    "proxy_no_retry": "stop the proxy resending POSTs to the provider",
    "unknown_outcome": "report a timed-out create as unknown, add a status lookup",
    "visibility_timeout": "raise the queue's visibility timeout above the run time",
    "effects_record": "keep a durable record of the agent's own effects, check it first",
    "nothing": "nothing to fix: no second payment came from a re-execution",
}
FIX_TEXT: dict[str, str] = {
    "derived_key": "Derive the idempotency key from the thread id and the tool call id (a hash "
                   "of the two) instead of making one inside the tool: every re-run of the same "
                   "call then sends the same key, and the provider replays it.",
    "client_key": "Send an idempotency key that the HTTP client reuses on its own retries, so "
                  "a resend is replayed by the provider instead of executed again.",
    "proxy_no_retry": "Stop the proxy between the agent and the provider from resending POSTs "
                      "it cannot know are safe, or make a resend harmless with a key derived "
                      "from the thread id and the tool call id.",
    "unknown_outcome": "Report a timed-out create to the model as an unknown outcome, not a "
                       "failure, and give the agent a status lookup: no idempotency key stops "
                       "the model from asking again with a new tool call.",
    "visibility_timeout": "Keep the queue's visibility timeout above the run time (or extend it "
                          "while working), and derive the key from the thread id and the tool "
                          "call id, so a run delivered again replays its charge.",
    "effects_record": "Keep a durable record of the agent's own effects, keyed by the derived "
                      "key, and check it before a create that resumes later than the provider "
                      "keeps keys.",
    "nothing": "Nothing to change: the provider made one payment per intended call.",
}
MITIGATION_CHOICES: dict[str, str] = {
    "refund_second": "refund the second payment",
    "refund_both": "refund both payments",
    "none_replayed": "nothing to refund: the provider made one payment",
    "none_asked": "nothing to refund: every payment of the customer was asked for",
    "ask_provider": "ask the provider to reverse its duplicate",
}
OWNER_CHOICES: dict[str, str] = {
    "agent_team": "the agent's team (the tool's and the framework's code)",
    "proxy_owners": "the team that runs the proxy between the agent and the provider",
    "queue_owners": "the team that runs the queue and the workers",
    "provider": "the payment provider",
    "nobody": "nobody: nothing needs to change",
}
STATUS_CHOICES: dict[str, str] = {
    "charged_twice": "The customer was charged twice for one payment; the second is being "
                     "refunded; a repeated call on our side caused it and a fix is under way.",
    "provider_fault": "The payment provider charged the customer twice; we asked them to "
                      "reverse it.",
    "deduplicated": "No double charge: the repeated request was deduplicated, one payment was "
                    "made.",
    "asked_for": "No incident: every payment of the customer was asked for.",
}
CONFIDENCE = {1: "guessing", 2: "unsure", 3: "fairly sure", 4: "certain"}
# Scenarios whose re-execution came after the provider's key retention: the derived key was
# already sent (and expired), so only the agent's own record of its effects stops it.
PAST_RETENTION = frozenset({"human_pause"})
_OWNERS = {"sdk_retry": {"agent_team"}, "gateway_retry": {"proxy_owners"},
           "step_retry": {"agent_team"}, "model_reemission": {"agent_team"},
           "redelivery": {"queue_owners", "agent_team"}}


@dataclass(frozen=True)
class Key:
    """What counts as right for one drill."""

    true_layer: str
    layers: frozenset[str]  # accepted layer answers
    fixes: frozenset[str]
    needs: tuple[str, ...]  # the sources the answer needs
    protected: bool
    mitigation: str
    owners: frozenset[str]
    status: str


def _protected(truth: dict[str, Any]) -> bool:
    return truth["layer"] != NONE and (bool(truth.get("protected"))
                                       or int(truth["effects_created"]) < 2)


def answer_key(drill: Drill, truth: dict[str, Any]) -> Key:
    layer = str(truth["layer"])
    case = drill.spec
    protected = _protected(truth)
    layers = frozenset({NEED + s for s in case.missing}) if case.undecidable else \
        frozenset({layer})
    if layer == NONE:
        return Key(layer, layers, frozenset({"nothing"}), case.needs, False, "none_asked",
                   frozenset({"nobody"}), "asked_for")
    if protected:  # the key already made the repeat harmless: keeping it is right too
        keep = LAYERS[Layer(layer)].remedies & {"client_key", "derived_key"}
        return Key(layer, layers, frozenset({"nothing", *keep}), case.needs, True,
                   "none_replayed", frozenset({"nobody", "agent_team"}), "deduplicated")
    fixes = frozenset({"effects_record"}) if truth.get("scenario") in PAST_RETENTION else \
        frozenset(LAYERS[Layer(layer)].remedies)
    owners = frozenset(_OWNERS[layer])
    if case.undecidable:  # either of the layers the evidence cannot tell apart
        fixes &= frozenset({"derived_key"})
        owners = frozenset({"agent_team", "proxy_owners"})
    if truth.get("scenario") in PAST_RETENTION:
        owners = frozenset({"agent_team"})
    return Key(layer, layers, fixes, case.needs, False, "refund_second", owners,
               "charged_twice")


def parse_choice(text: str, choices: dict[str, str]) -> str:
    """A choice by key or by its 1-based number; ValueError otherwise."""
    text = text.strip().lower().replace(" ", "_").replace("-", "_")
    keys = list(choices)
    if text.isdigit() and 1 <= int(text) <= len(keys):
        return keys[int(text) - 1]
    if text in ("not_a_duplicate", "no", "control"):
        return NONE if NONE in choices else text
    if text not in choices:
        raise ValueError(f"{text[:40]!r}: choose one of {', '.join(keys)} (or its number)")
    return text


def parse_sources(text: str) -> tuple[str, ...]:
    """`provider,spans` (or numbers, `all`, empty) -> the sources in that order."""
    if text.strip().lower() == "all":
        return SOURCES
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        out.append(parse_choice(part, {s: s for s in SOURCES}))
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Answer:
    layer: str
    fix: str
    opened: tuple[str, ...] = SOURCES  # the sources asked for, in order
    confidence: int | None = None  # CONFIDENCE
    decide_s: float | None = None  # from the page to the answer
    mitigation: str | None = None
    owner: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class Grade:
    answer: Answer
    key: Key
    layer_ok: bool
    fix_ok: bool
    evidence_ok: bool  # opened every source the answer needs, and at most one more
    response: dict[str, bool] = field(default_factory=dict)  # mitigation/owner/status answered

    @property
    def score(self) -> int:
        return int(self.layer_ok) + int(self.fix_ok) + int(self.evidence_ok)

    @property
    def response_score(self) -> int:
        return sum(self.response.values())

    @property
    def extra_sources(self) -> tuple[str, ...]:
        return tuple(s for s in self.answer.opened if s not in self.key.needs)

    @property
    def missed_sources(self) -> tuple[str, ...]:
        return tuple(s for s in self.key.needs if s not in self.answer.opened)


MAX_SCORE = 3
MAX_RESPONSE = 3


def truth_of(folder: Path) -> dict[str, Any]:
    truth: dict[str, Any] = json.loads((folder / "truth.json").read_text())
    return truth


def grade(drill: Drill, folder: Path, answer: Answer) -> Grade:
    key = answer_key(drill, truth_of(folder))
    opened = set(answer.opened)
    evidence_ok = set(key.needs) <= opened and len(opened - set(key.needs)) <= 1
    response = {}
    for name, given, right in (("mitigation", answer.mitigation, {key.mitigation}),
                               ("owner", answer.owner, key.owners),
                               ("status", answer.status, {key.status})):
        if given is not None:
            response[name] = given in right
    return Grade(answer, key, answer.layer in key.layers, answer.fix in key.fixes, evidence_ok,
                 response)


def choices_text(keys: Iterable[str], choices: dict[str, str]) -> str:
    return "; ".join(choices[k] for k in sorted(keys))
