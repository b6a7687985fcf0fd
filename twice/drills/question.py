"""The question a trainee sees: the customer's provider requests, their gaps, the agent's records.

What it shows, and why that is fair: the customer's requests to the provider (times, request
ids, keys, tool call ids, workers, effects), the gaps between them with their band, and the
agent-side records of the threads behind them (tool calls, results, checkpoints, spans, queue
receives). It is computed the same way for a duplicate and for a control. twice's grouping,
verdicts, evidence and findings are withheld: their wording names layers, and their mere presence
(a duplicate group, a `key_regenerated` finding) or absence would give a control away.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from twice.connectors import registry
from twice.drills.curriculum import CURRICULUM, Drill
from twice.engine import Analysis, analyze
from twice.layers import Band, Bands, Layer
from twice.timeline import Kind
from twice.verdict import fmt_gap

EFFECT_PATH = "/v1/payment_intents"


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


def customer_attempts(analysis: Analysis, customer: str) -> pd.DataFrame:
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
    mine = customer_attempts(analysis, customer)
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

