"""Drills: a lab incident with the verdict hidden, for training on-call engineers.

A drill is named by its id, `L<level>-<scenario>-<seed>` (e.g. `L2-step_retry-4711`), and
everything about it follows from the id: the curriculum entry gives the scenario's options (the
seed picks among the entry's variants), the seed the run. `generate` runs the lab scenario in a
child process (the lab moves the process's clock with time-machine and keeps moto's queues per
process, neither of which a web server's other sessions should feel) and caches the folder by id.

`question` is what the trainee sees; `grade` scores an answer against `truth.json` (the ground
truth, not twice's verdict); `explain` says what gave it away and what would have misled.

What the question shows, and why that is fair: the customer's requests to the provider (times,
request ids, keys, tool call ids, workers, effects), the gaps between them with their band, and
the agent-side records of the threads behind them (tool calls, results, checkpoints, spans, queue
receives). It is computed the same way for a duplicate and for a control. twice's grouping,
verdicts, evidence and findings are withheld: their wording names layers, and their mere presence
(a duplicate group, a `key_regenerated` finding) or absence would give a control away.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from connectors import registry
from twice.engine import Analysis, analyze
from twice.layers import (
    BAND_LAYERS,
    DERIVED_KEY_FIX,
    FIXES,
    PLAIN_WORDS,
    TYPICAL_BANDS,
    Band,
    Bands,
    Layer,
)
from twice.timeline import Kind
from twice.verdict import fmt_gap

NONE = "none"  # the layer answer "not a duplicate", as truth.json spells it
ID_PATTERN = re.compile(r"L(\d)-(\d{1,9})")
EFFECT_PATH = "/v1/payment_intents"
PROVIDER_FILES = ("events.json", "request_log.csv", "stripe_logs.jsonl")


# --------------------------------------------------------------------------- ids and curriculum


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
        "Controls that look like duplicates, a step retry the derived key already protects, and "
        "a provider whose clock runs a minute or more off the agent's.",
        Entry("control_new_turn", None, (Variant(skew_s=75), Variant(skew_s=-50))),
        Entry("control_renewal", None),
        Entry("step_retry", None, (Variant({"key": "derived"}, skew_s=64),
                                   Variant({"key": "derived"}))),
        Entry("gateway_retry", None, (Variant(skew_s=-90), Variant(skew_s=120))),
        Entry("redelivery", None, (Variant({"visibility_timeout": 100}, skew_s=-70),
                                   Variant({"visibility_timeout": 45}, drop=NO_SPANS,
                                           skew_s=55))),
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


# --------------------------------------------------------------------------- generation


def default_cache() -> Path:
    """$TWICE_DRILL_CACHE, else $XDG_CACHE_HOME/twice/drills (~/.cache/twice/drills)."""
    env = os.environ.get("TWICE_DRILL_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "twice" / "drills"


def _folder(drill: Drill, cache: Path, noise: int | None) -> Path:
    return cache / (drill.id if noise is None else f"{drill.id}.noise{noise}")


def generate(drill: Drill, cache: str | Path | None = None, *, noise: int | None = None) -> Path:
    """The drill's incident folder, generated once per id (and noise override) under `cache`."""
    return generate_all([drill], cache, noise=noise)[0]


def generate_all(drills: Sequence[Drill], cache: str | Path | None = None, *,
                 noise: int | None = None) -> list[Path]:
    """Generate every missing folder in ONE child process; returns the folders in order."""
    root = Path(cache) if cache is not None else default_cache()
    root.mkdir(parents=True, exist_ok=True)
    folders = [_folder(d, root, noise) for d in drills]
    missing = [d.id for d, f in zip(drills, folders, strict=True)
               if not (f / "truth.json").exists()]
    if missing:
        cmd = [sys.executable, "-m", "lab.drills", str(root),
               "-" if noise is None else str(noise), *dict.fromkeys(missing)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              cwd=Path(__file__).resolve().parents[1])
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise RuntimeError(f"generating {', '.join(missing)} failed:\n{tail}")
    return folders


def _generate_here(drill: Drill, root: Path, noise: int | None) -> Path:
    """Run the scenario in THIS process into a scratch folder, then move it into place."""
    from lab.scenarios import run_scenario

    final = _folder(drill, root, noise)
    entry = CURRICULUM[drill.level].entries[drill.scenario]
    v = variant(drill)
    scratch = Path(tempfile.mkdtemp(prefix=f".{drill.id}.", dir=root))
    if drill.scenario in ("redelivery",):
        _reset_moto()  # moto keeps queues per process: the next run may want another timeout
    run_scenario(drill.scenario, scratch, seed=drill.seed,
                 noise=entry.noise if noise is None else noise, **v.options)
    for name in v.drop:
        (scratch / name).unlink(missing_ok=True)
    if v.skew_s:
        skew_provider(scratch, v.skew_s)
    (scratch / "drill.json").write_text(json.dumps(
        {"id": drill.id, "drop": list(v.drop), "skew_s": v.skew_s, "options": v.options}) + "\n")
    try:
        scratch.rename(final)
    except OSError:  # another process made it first: theirs is the same incident
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def _reset_moto() -> None:
    from moto.backends import get_backend

    get_backend("sqs").reset()


def skew_provider(folder: Path, seconds: int) -> None:
    """Move every provider timestamp by `seconds`: a provider clock further off the agent's."""
    events_path = folder / "events.json"
    doc = json.loads(events_path.read_text())
    for event in doc["data"] if isinstance(doc, dict) else doc:
        event["created"] += seconds
        obj = event.get("data", {}).get("object", {})
        if isinstance(obj.get("created"), int):
            obj["created"] += seconds
    events_path.write_text(json.dumps(doc, indent=2) + "\n")
    logs = folder / "stripe_logs.jsonl"
    lines = [json.loads(x) for x in logs.read_text().splitlines() if x.strip()]
    for line in lines:
        line["created_at"] += seconds
    logs.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    log_csv = folder / "request_log.csv"
    with log_csv.open(newline="") as fh:
        reader = csv.DictReader(fh)
        names, rows = list(reader.fieldnames or []), list(reader)
    for row in rows:
        at = pd.Timestamp(row["created"]) + pd.Timedelta(seconds=seconds)
        row["created"] = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    log_csv.write_text(buf.getvalue())


# --------------------------------------------------------------------------- the question


@dataclass(frozen=True)
class Gap:
    first: str  # request ids
    second: str
    gap_seconds: float
    band: Band


@dataclass
class Question:
    drill: Drill
    level_title: str
    customer: str
    prompt: str
    attempts: pd.DataFrame  # the customer's provider requests, no verdicts
    gaps: list[Gap]
    agent_side: pd.DataFrame  # tool calls, results, checkpoints, spans, receives of its threads
    analysis: Analysis  # for the charts: every duplicate's layer set to unknown, no evidence
    window: tuple[pd.Timestamp, pd.Timestamp]

    def text(self) -> str:
        """Everything the trainee is shown, as text (the CLI prints it; tests search it)."""
        gaps = "\n".join(f"  {g.first} -> {g.second}: {fmt_gap(g.gap_seconds)} "
                         f"({g.band.value.replace('_', ' ')} band)" for g in self.gaps)
        return "\n".join([self.prompt, "", self.attempts.to_string(index=False), "",
                          "Gaps:", gaps or "  (one request)", "",
                          self.agent_side.to_string(index=False)])


def load(folder: Path) -> tuple[dict[str, Any], Analysis]:
    """The drill's truth and twice's analysis (cached: a generated folder never changes)."""
    return _load(str(Path(folder).resolve()))


@functools.lru_cache(maxsize=16)
def _load(folder_text: str) -> tuple[dict[str, Any], Analysis]:
    folder = Path(folder_text)
    truth = json.loads((folder / "truth.json").read_text())
    found, _ = registry.scan_folder(folder)
    loaded = registry.load_all([(n, p, {}) for n, p in found])
    return truth, analyze(loaded.rows, loaded.warnings)


ATTEMPT_VIEW = ["at", "request_id", "idempotency_key", "status", "effect", "amount", "currency",
                "tool_call_id", "thread_id", "worker", "resend_count"]
AGENT_VIEW = ["at", "kind", "worker", "tool_call_id", "outcome", "detail", "delivery_count",
              "step", "span_id", "resend_count"]


def _customer_attempts(analysis: Analysis, customer: str) -> pd.DataFrame:
    a = analysis.attempts
    mine = a[(a["subject"] == customer) & (a["path"].fillna(EFFECT_PATH) == EFFECT_PATH)]
    return mine.sort_values(["at", "attempt_id"]).reset_index(drop=True)


def _blind(analysis: Analysis) -> Analysis:
    """The analysis with every verdict made unknown and its evidence, findings and fix removed
    (the charts colour by layer)."""
    groups = [replace(g, findings=[], duplicates=[
        replace(d, layer=Layer.UNKNOWN, confidence=0.0, evidence=(), fix="")
        for d in g.duplicates]) for g in analysis.groups]
    return replace(analysis, groups=groups)


def question(drill: Drill, folder: Path) -> Question:
    truth, analysis = load(folder)
    customer = str(truth["customer"])
    mine = _customer_attempts(analysis, customer)
    bands = Bands()
    gaps = []
    for (_, a), (_, b) in zip(mine.iterrows(), mine.iloc[1:].iterrows(), strict=False):
        gap = max((b["at"] - a["at"]).total_seconds(), 0.0)
        gaps.append(Gap(str(a["request_id"]), str(b["request_id"]), round(gap, 3),
                        bands.classify(gap)))
    tl = analysis.timeline
    threads = set(mine["thread_id"].dropna().astype(str))
    threads |= set(tl.loc[tl["subject"] == customer, "thread_id"].dropna().astype(str))
    agent = tl[tl["thread_id"].isin(threads) & ~tl["kind"].isin(
        [Kind.PROVIDER_EVENT.value, Kind.PROVIDER_REQUEST.value])]
    agent = agent.sort_values("at_aligned").assign(at=lambda f: f["at_aligned"])
    agent = agent.reindex(columns=AGENT_VIEW).reset_index(drop=True)
    agent["detail"] = agent["detail"].astype("string").str.slice(0, 70)
    when = mine["at"].min() if len(mine) else tl["at_aligned"].min()
    times = pd.concat([mine["at"], agent["at"]]).dropna()
    lo, hi = (times.min(), times.max()) if len(times) else (when, when)
    prompt = (f"Drill {drill.id} (level {drill.level}: {CURRICULUM[drill.level].title}). "
              f"Customer {customer} may have been charged twice around "
              f"{when:%Y-%m-%d %H:%M} UTC; the provider logged {len(mine)} payment requests "
              "for them. Read the requests and the agent's records: was one "
              "intended call executed twice, and if so which layer repeated it? What is the fix?")
    return Question(drill, CURRICULUM[drill.level].title, customer, prompt,
                    mine.reindex(columns=ATTEMPT_VIEW), gaps, agent, _blind(analysis),
                    (lo - pd.Timedelta(seconds=30), hi + pd.Timedelta(seconds=30)))


# --------------------------------------------------------------------------- answers and grades

LAYER_CHOICES: dict[str, str] = {
    **{layer.value: PLAIN_WORDS[layer] for layer in Layer if layer is not Layer.UNKNOWN},
    NONE: "not a duplicate: each charge was asked for",
}
FIX_CHOICES: dict[str, str] = {
    "derived_key": "derive the idempotency key from thread_id:tool_call_id",
    "client_key": "send a key the HTTP client reuses on its own retries",
    "proxy_no_retry": "stop the proxy retrying non-idempotent POSTs",
    "unknown_outcome": "report a timed-out create as unknown, add a status lookup",
    "visibility_timeout": "raise the queue's visibility timeout above the run time",
    "nothing": "nothing to fix: no second charge was made by a re-execution",
}
FIX_TEXT: dict[str, str] = {
    "derived_key": DERIVED_KEY_FIX[0].upper() + DERIVED_KEY_FIX[1:] + ".",
    "client_key": FIXES[Layer.SDK_RETRY],
    "proxy_no_retry": FIXES[Layer.GATEWAY_RETRY],
    "unknown_outcome": FIXES[Layer.MODEL_REEMISSION],
    "visibility_timeout": FIXES[Layer.REDELIVERY],
    "nothing": "Nothing to change: the provider created one effect per intended call.",
}
# Which fixes stop each layer's second charge (a derived key makes any re-execution a replay,
# except the model's: a new tool call id derives a new key).
ACCEPTED_FIXES: dict[str, frozenset[str]] = {
    Layer.SDK_RETRY.value: frozenset({"client_key", "derived_key"}),
    Layer.GATEWAY_RETRY.value: frozenset({"proxy_no_retry", "derived_key"}),
    Layer.STEP_RETRY.value: frozenset({"derived_key"}),
    Layer.REDELIVERY.value: frozenset({"derived_key", "visibility_timeout"}),
    Layer.MODEL_REEMISSION.value: frozenset({"unknown_outcome"}),
    NONE: frozenset({"nothing"}),
}


def _protected(truth: dict[str, Any]) -> bool:
    return truth["layer"] != NONE and (bool(truth.get("protected"))
                                       or int(truth["effects_created"]) < 2)


def answer_key(truth: dict[str, Any]) -> tuple[str, frozenset[str]]:
    """The right layer, and the fixes that count as right."""
    if _protected(truth):
        return str(truth["layer"]), frozenset({"nothing"})
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
    mine = set(_customer_attempts(analysis, customer)["attempt_id"].astype(str))
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
        headline = f"{layer}: {PLAIN_WORDS[Layer(layer)]}" + (
            " (protected: one effect)" if protected else "")
    if protected:
        misled.append("two requests reached the provider, but only one effect: the second was "
                      "answered from the idempotency cache (replayed), so no customer was "
                      "charged twice and there is nothing to fix")
    for gap in q_gaps:
        misled.extend(_band_note(layer, gap))
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
    mine = _customer_attempts(analysis, customer)
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
    suspects = [x.value for x in BAND_LAYERS[gap.band]]
    where = f"the {fmt_gap(gap.gap_seconds)} gap lands in the {gap.band.value} band"
    if layer == NONE:
        return [f"{where}, where {' / '.join(suspects)} usually lands: timing alone would call "
                "it a duplicate"]
    if gap.band not in TYPICAL_BANDS[Layer(layer)]:
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


def main(argv: Iterable[str] | None = None) -> int:
    """`python -m lab.drills CACHE NOISE|- ID...`: generate drills in this process."""
    args = list(sys.argv[1:] if argv is None else argv)
    root, noise_text, ids = Path(args[0]), args[1], args[2:]
    noise = None if noise_text == "-" else int(noise_text)
    for text in ids:
        print(_generate_here(parse_id(text), root, noise))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
