"""The drill curriculum and drill ids.

Four levels, each adding one skill that shows in the evidence:

1. read the provider's raw clock against the agent's (every source, one customer, little else);
2. find the one customer among the day's traffic (a busy day: neighbours charged the same amount
   seconds later, the customer's other threads, guest checkouts), and a first control;
3. work with a missing source (no traces exported, no queue log): some drills cannot be told
   apart without it, and "I can't tell, I need X" is then the right answer;
4. tell the layers apart when the timing points the wrong way (a redelivery in seconds, a step
   retry in minutes, a re-emission in seconds) and controls that look like duplicates.

A level is a list of cases: a field-lab scenario with the variant fields the level fixes. A
drill is named by its id, `L<level>-<seed>` (e.g. `L2-4711`): the seed picks the case and seeds
the lab run, which is repeatable (`twice.lab.repeatable`), so the same id shows the same
evidence. The case is not in the id: it would be the answer, and the id travels in links.
`new_drill` draws the case first, evenly (the cases a trainee has seen least), then a seed.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ID_PATTERN = re.compile(r"L(\d)-(\d{1,9})")
SOURCES = ("provider", "checkpoints", "spans", "queue")
SOURCE_WORDS = {
    "provider": "the provider's payment requests",
    "checkpoints": "the agent's checkpoints (tool calls and results)",
    "spans": "the traces (tool spans and HTTP client spans)",
    "queue": "the queue's receive log",
}


@dataclass(frozen=True)
class Case:
    """One kind of drill at a level (never shown: it is the answer)."""

    name: str  # unique within the level
    scenario: str  # the lab scenario
    options: Mapping[str, Any] = field(default_factory=dict)  # the scenario's own options
    missing: tuple[str, ...] = ()  # SOURCES not exported
    undecidable: bool = False  # without the missing source the layer cannot be told
    needs: tuple[str, ...] = ("provider", "checkpoints")  # the sources the answer needs

    @property
    def layer(self) -> str:
        return CASE_LAYERS[self.scenario]


# the layer each scenario's duplicate is (truth.json names it too; checked by the tests)
CASE_LAYERS = {
    "sdk_retry": "sdk_retry", "sdk_retry_replayed": "sdk_retry", "gateway_retry": "gateway_retry",
    "step_retry": "step_retry", "redelivery": "redelivery", "model_reemission":
        "model_reemission", "human_pause": "redelivery", "control_new_turn": "none",
    "control_same_amount": "none", "control_declined_retry": "none",
}


@dataclass(frozen=True)
class Level:
    title: str
    about: str  # what the level trains, said without naming a case's trick
    cases: tuple[Case, ...]
    busy: bool  # the day's traffic around the incident is shown, not only the customer's

    def case(self, name: str) -> Case:
        return next(c for c in self.cases if c.name == name)


SPANS = ("provider", "checkpoints", "spans")
QUEUE = ("provider", "checkpoints", "queue")
CURRICULUM: dict[int, Level] = {
    1: Level(
        "Read the clocks",
        "One customer charged twice, every source exported, little else going on. Each "
        "source keeps its own clock: read the provider's raw times against the agent's.",
        (
            Case("sdk_retry", "sdk_retry", needs=SPANS),
            Case("gateway_retry", "gateway_retry", needs=SPANS),
            Case("step_retry", "step_retry", {"failed_spans": True}),
            Case("model_reemission", "model_reemission"),
            Case("redelivery", "redelivery", needs=QUEUE),
        ), busy=False),
    2: Level(
        "Find the customer among the day's traffic",
        "A busy day: the provider's requests of every customer in the window. Find the "
        "customer's own requests first, then read their agent records.",
        (
            Case("sdk_retry_replayed", "sdk_retry_replayed", needs=("provider",)),
            Case("same_amount", "control_same_amount", needs=("provider",)),
            Case("new_turn", "control_new_turn"),
            Case("gateway_retry", "gateway_retry", needs=SPANS),
            Case("step_retry", "step_retry", {"timeout": 30.0}),
        ), busy=True),
    3: Level(
        "Work with a missing source",
        "A busy day, and a source the team did not export. Ask for what you need; when the "
        "evidence cannot decide, say which source would.",
        (
            Case("sdk_no_spans", "sdk_retry", missing=("spans",), undecidable=True,
                 needs=SPANS),
            Case("gateway_no_spans", "gateway_retry", missing=("spans",), undecidable=True,
                 needs=SPANS),
            Case("step_no_spans", "step_retry", {"timeout": 30.0}, missing=("spans",)),
            Case("model_no_spans", "model_reemission", missing=("spans",)),
            Case("redelivery_no_queue", "redelivery", missing=("queue",)),
        ), busy=True),
    4: Level(
        "When the timing points the wrong way",
        "A busy day where a gap lands in another layer's band, and charges that look like "
        "duplicates. The fingerprints decide, not the band.",
        (
            Case("redelivery_fast", "redelivery", {"visibility_timeout": 40}, needs=QUEUE),
            Case("step_slow", "step_retry", {"timeout": 125.0, "failed_spans": True}),
            Case("model_fast", "model_reemission", {"timeout": 3.0}),
            Case("declined_then_asked", "control_declined_retry"),
            Case("resumed_after_retention", "human_pause", {"pause_hours": 30.0}),
        ), busy=True),
}


@dataclass(frozen=True)
class Drill:
    level: int
    case: str  # the Case's name within the level
    seed: int

    @property
    def id(self) -> str:
        return format_id(self)

    @property
    def spec(self) -> Case:
        return CURRICULUM[self.level].case(self.case)

    @property
    def lab_seed(self) -> int:
        """The lab run's seed: the id's, so no two drills (of any level) share a run."""
        return zlib.crc32(f"drill:{self.id}".encode())


def format_id(drill: Drill) -> str:
    # The case is NOT in the id: it would be the answer, and the id travels in links.
    return f"L{drill.level}-{drill.seed}"


def parse_id(text: str) -> Drill:
    """The drill an id names; ValueError for anything that is not a drill of the curriculum."""
    m = ID_PATTERN.fullmatch(text.strip())
    if m is None or int(m[1]) not in CURRICULUM:
        raise ValueError(f"not a drill id: {text[:40]!r} (expected L<level 1-{len(CURRICULUM)}>-"
                         "<seed>, e.g. L2-4711)")
    level, seed = int(m[1]), int(m[2])
    return Drill(level, case_for(level, seed), seed)


def case_for(level: int, seed: int) -> str:
    cases = CURRICULUM[level].cases
    return cases[zlib.crc32(f"case:{level}:{seed}".encode()) % len(cases)].name


def drill_of_case(level: int, case: str, rng: random.Random | None = None) -> Drill:
    """A new drill (a random seed) of `case` at `level`."""
    rng = rng or random.SystemRandom()
    while True:
        seed = rng.randrange(1, 1_000_000)
        if case_for(level, seed) == case:
            return Drill(level, case, seed)


def drill_set(levels: Iterable[int], rng: random.Random | None = None) -> list[Drill]:
    """One new drill of every case of each level, shuffled within the level (a lead's set)."""
    rng = rng or random.SystemRandom()
    out = []
    for level in levels:
        cases = [c.name for c in CURRICULUM[level].cases]
        rng.shuffle(cases)
        out += [drill_of_case(level, c, rng) for c in cases]
    return out


def new_drill(level: int, seed: int | None = None, *, seen: Iterable[str] = (),
              rng: random.Random | None = None) -> Drill:
    """A drill at `level`. Given a seed, the drill it names; otherwise a case drawn evenly
    among those `seen` (drill ids the trainee answered) holds least of, then a new seed."""
    if level not in CURRICULUM:
        raise ValueError(f"no level {level}; levels are {', '.join(map(str, CURRICULUM))}")
    if seed is not None:
        return parse_id(f"L{level}-{seed}")
    rng = rng or random.SystemRandom()
    counts = {c.name: 0 for c in CURRICULUM[level].cases}
    for drill_id in seen:
        try:
            drill = parse_id(drill_id)
        except ValueError:
            continue
        if drill.level == level:
            counts[drill.case] += 1
    fewest = min(counts.values())
    return drill_of_case(level, rng.choice([n for n, k in counts.items() if k == fewest]), rng)


def drill_for(level: int, case: str, from_seed: int = 1) -> Drill:
    """The first drill at or after `from_seed` of `case` at `level` (tests, and a lead who
    wants a case on purpose)."""
    if case not in {c.name for c in CURRICULUM[level].cases}:
        raise ValueError(f"no case {case!r} at level {level}")
    seed = from_seed
    while case_for(level, seed) != case:
        seed += 1
    return Drill(level, case, seed)


def all_drills(from_seed: int = 1) -> list[Drill]:
    """One drill per case of every level."""
    return [drill_for(level, c.name, from_seed) for level, lv in CURRICULUM.items()
            for c in lv.cases]


def fixed_variant(drill: Drill) -> dict[str, Any]:
    """The field-lab variant fields this drill's level fixes (the rest is drawn by the lab from
    the run's seed): every source exported in one format, the provider's clock a few seconds
    off, and a quiet or a busy day."""
    spec = drill.spec
    rng = random.Random(f"variant:{drill.id}")
    spans = "spans" not in spec.missing
    busy = CURRICULUM[drill.level].busy
    day: dict[str, Any] = {
        "threads": rng.randint(8, 14) if busy else 0,
        "customers": rng.randint(30, 60),
        "workers": 3,
        "worker_keys": ["none", "none", "derived"],
        "neighbours": rng.randint(1, 2) if busy else 0,
        "same_customer_threads": 1 if busy else 0,
        "refunds": 0,
        "checkouts": rng.randint(2, 5) if busy else 0,
    }
    return {
        "options": dict(spec.options),
        "clock_offset": round(rng.choice((-1, 1)) * rng.uniform(3.0, 9.0), 3),
        "exports": {"events": True, "stripe_logs": False, "request_log": True,
                    "queue_log": "queue" not in spec.missing},
        "request_log_precision": "ms",
        "api_version": "2024-06-20",
        "instrumentation": "lab" if spans else "none",
        "trace_format": "otlp",
        "span_clock_offsets": {f"worker-{c}": 0.0 for c in "abcdef"},
        "busy_day": day,
        "renewals": [],
        "dashboard_edits": [],
    }
