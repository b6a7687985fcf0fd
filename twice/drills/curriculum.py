"""The drill curriculum and drill ids.

A drill is named by its id, `L<level>-<seed>` (e.g. `L2-4711`), and everything about it follows
from the id: the seed picks the scenario among the level's entries and the entry's variant (its
options, the evidence dropped, the provider clock's skew), and seeds the run. The scenario is
not in the id: it would be the answer, and the id travels in links.
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

ID_PATTERN = re.compile(r"L(\d)-(\d{1,9})")


@dataclass(frozen=True)
class Drill:
    level: int
    scenario: str
    seed: int

    @property
    def id(self) -> str:
        return format_id(self)


def format_id(drill: Drill) -> str:
    # The scenario is NOT in the id: it would be the answer, and the id travels in links.
    return f"L{drill.level}-{drill.seed}"


def parse_id(text: str) -> Drill:
    """The drill an id names; ValueError for anything that is not a drill of the curriculum."""
    m = ID_PATTERN.fullmatch(text.strip())
    if m is None or int(m[1]) not in CURRICULUM:
        raise ValueError(f"not a drill id: {text!r} (expected L<level 1-{len(CURRICULUM)}>-"
                         "<seed>, e.g. L2-4711)")
    level, seed = int(m[1]), int(m[2])
    return Drill(level, scenario_for(level, seed), seed)


def scenario_for(level: int, seed: int) -> str:
    names = sorted(CURRICULUM[level].entries)
    return names[zlib.crc32(f"scenario:{level}:{seed}".encode()) % len(names)]


@dataclass(frozen=True)
class Variant:
    """One way to run a scenario: its options, and what is done to the evidence after."""

    options: dict[str, Any] = field(default_factory=dict)
    drop: tuple[str, ...] = ()  # evidence files removed (a team that exports no traces)
    skew_s: int = 0  # extra seconds on the provider's clock (on top of the lab's own offset)


@dataclass(frozen=True)
class Entry:
    scenario: str
    noise: int | None  # noise runs per phase (None: the scenario's seeded 3-8)
    variants: tuple[Variant, ...] = (Variant(),)


@dataclass(frozen=True)
class Level:
    title: str
    about: str
    entries: dict[str, Entry]


def _level(title: str, about: str, *entries: Entry) -> Level:
    return Level(title, about, {e.scenario: e for e in entries})


NO_SPANS = ("spans.jsonl",)
CURRICULUM: dict[int, Level] = {
    1: _level(
        "One clear duplicate",
        "One customer charged twice, every source exported, little else going on.",
        Entry("step_retry", 1), Entry("model_reemission", 1), Entry("redelivery", 1),
    ),
    2: _level(
        "Retries below the agent, and a first control",
        "Resends milliseconds apart (which layer resent?), a retry the key absorbed, and two "
        "charges a user asked for.",
        Entry("sdk_retry", 2), Entry("gateway_retry", 2), Entry("sdk_retry_replayed", 2),
        Entry("control_new_turn", 2),
    ),
    3: _level(
        "Overlapping bands and missing spans",
        "More traffic; a redelivery whose short visibility timeout puts it in the tens-of-"
        "seconds band; incidents where the team exported no traces.",
        Entry("redelivery", None, (
            Variant({"visibility_timeout": 45}), Variant({"visibility_timeout": 90}),
            Variant({"visibility_timeout": 60}, drop=NO_SPANS))),
        Entry("step_retry", None, (Variant(), Variant(drop=NO_SPANS))),
        Entry("model_reemission", None, (Variant(), Variant(drop=NO_SPANS))),
        Entry("sdk_retry", None),
    ),
    4: _level(
        "Controls among hard cases, skewed clocks",
        "Controls that look like duplicates, a step retry the derived key already protects, a "
        "resume that came after the key's retention, and a provider whose clock runs a minute "
        "or more off the agent's.",
        Entry("control_new_turn", None, (Variant(skew_s=75), Variant(skew_s=-50))),
        Entry("control_renewal", None),
        Entry("step_retry", None, (Variant({"key": "derived"}, skew_s=64),
                                   Variant({"key": "derived"}))),
        Entry("gateway_retry", None, (Variant(skew_s=-90), Variant(skew_s=120))),
        Entry("redelivery", None, (Variant({"visibility_timeout": 100}, skew_s=-70),
                                   Variant({"visibility_timeout": 45}, drop=NO_SPANS,
                                           skew_s=55))),
        # the derived key was in place, but the run resumed after the key's retention
        Entry("human_pause", None, (Variant(), Variant(drop=NO_SPANS, skew_s=40))),
    ),
}


def variant(drill: Drill) -> Variant:
    variants = CURRICULUM[drill.level].entries[drill.scenario].variants
    return variants[zlib.crc32(f"variant:{drill.id}".encode()) % len(variants)]


def new_drill(level: int, seed: int | None = None) -> Drill:
    """A drill at `level` (the seed picks the scenario and its variant; random when None)."""
    if level not in CURRICULUM:
        raise ValueError(f"no level {level}; levels are {', '.join(map(str, CURRICULUM))}")
    if seed is None:
        seed = random.SystemRandom().randrange(1, 1_000_000)
    return parse_id(f"L{level}-{seed}")


def drill_for(level: int, scenario: str, from_seed: int = 1) -> Drill:
    """The first drill at or after `from_seed` that runs `scenario` at `level` (for tests and
    for picking a scenario on purpose)."""
    if scenario not in CURRICULUM[level].entries:
        raise ValueError(f"no {scenario!r} at level {level}")
    seed = from_seed
    while scenario_for(level, seed) != scenario:
        seed += 1
    return Drill(level, scenario, seed)


def all_drills(from_seed: int = 1) -> list[Drill]:
    """One drill per curriculum entry."""
    return [drill_for(level, name, from_seed) for level, lv in CURRICULUM.items()
            for name in lv.entries]
