"""The engine: timeline in, logical calls with verdicts and findings out."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from twice.attempts import normalize, provider_attempts
from twice.findings import Finding, findings_for
from twice.grouping import group_attempts
from twice.layers import BY_SEVERITY, Bands, Layer
from twice.link import ClockOffset, deliveries, link, link_agent_side, trace_shape
from twice.timeline import SourceWarning
from twice.verdict import Attempt, Context, Duplicate, judge

# How bad a layer is to have found, for "worst layer" summaries (unprotected first).
LAYER_ORDER = list(BY_SEVERITY)


@dataclass(frozen=True)
class Options:
    bands: Bands = field(default_factory=Bands)
    window_s: float = 900.0  # same subject + amount inside this window = one logical call
    tolerance_s: float = 2.0  # the most clock error allowed when matching times across sources

    def to_dict(self) -> dict[str, float]:
        """What a saved investigation keeps, so reopening it gives the verdict it was saved
        with (`from_dict` reads it back)."""
        b = self.bands
        return {"seconds": b.seconds, "tens_of_seconds": b.tens_of_seconds,
                "retention": b.retention, "window_s": self.window_s,
                "tolerance_s": self.tolerance_s}

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any] | None) -> Options:
        """The options `to_dict` wrote; nothing saved (an investigation saved before options
        were kept) is the defaults, and so is each value that is missing or not a finite number
        of seconds (0 or more)."""
        default = cls()
        values = default.to_dict()
        for name, value in (saved or {}).items():
            if name in values and isinstance(value, int | float) and not isinstance(value, bool) \
                    and math.isfinite(value) and value >= 0:
                values[name] = float(value)
        bands = Bands(seconds=values["seconds"], tens_of_seconds=values["tens_of_seconds"],
                      retention=values["retention"])
        if not bands.seconds < bands.tens_of_seconds < bands.retention:
            bands = default.bands  # edges out of order would misfile every gap
        return cls(bands=bands, window_s=values["window_s"], tolerance_s=values["tolerance_s"])


@dataclass
class Group:
    group_id: str
    tool_name: str | None
    thread_id: str | None
    tool_call_ids: list[str]
    rows: pd.DataFrame = field(repr=False)  # holds this group's attempts at `positions`
    positions: slice
    duplicates: list[Duplicate]
    findings: list[Finding]
    records: list[Attempt]  # the same attempts as plain records (cheap to read one by one)

    @cached_property
    def attempts(self) -> pd.DataFrame:
        """Rows of Analysis.attempts, oldest first (sliced on first use: thousands of groups)."""
        return self.rows.iloc[self.positions]

    def record(self, attempt_id: str) -> Attempt:
        """The plain record of this group's attempt `attempt_id` ({} when it has none)."""
        return next((r for r in self.records if str(r["attempt_id"]) == attempt_id), {})

    @property
    def last_at(self) -> pd.Timestamp:
        return max(r["at"] for r in self.records)

    def money_at_risk(self) -> dict[str, int]:
        """Amounts of the effects created beyond the first, per currency."""
        created = [r for r in self.records if r["effect"] == "created"][1:]
        risk: dict[str, int] = {}
        for r in created:
            if r["amount"] is not None and not pd.isna(r["amount"]):
                cur = str(r["currency"] or "?")
                risk[cur] = risk.get(cur, 0) + int(r["amount"])
        return risk

    @property
    def worst_layer(self) -> Layer | None:
        layers = [d.layer for d in self.duplicates if not d.protected] or \
            [d.layer for d in self.duplicates]
        return min(layers, key=LAYER_ORDER.index) if layers else None


@dataclass
class Analysis:
    groups: list[Group]
    attempts: pd.DataFrame
    timeline: pd.DataFrame  # with at_aligned filled in
    offsets: list[ClockOffset]
    warnings: list[SourceWarning]


def _duplicates(records: list[Attempt], ctx: Context) -> list[Duplicate]:
    """Each attempt judged against the latest earlier one that may have made the effect. One
    the provider refused (a declined card, a 4xx) made nothing, so the repeat after it was the
    right thing to do: it is no duplicate of it."""
    out: list[Duplicate] = []
    last: Attempt | None = None
    for record in records:
        if last is not None:
            out.append(judge(last, record, ctx))
        if record["effect"] != "failed":
            last = record
    return out


def _group_id(attempt_ids: Sequence[str]) -> str:
    return "g_" + hashlib.sha256("|".join(sorted(attempt_ids)).encode()).hexdigest()[:10]


def attempt_records(attempts: pd.DataFrame) -> list[Attempt]:
    """The attempts as plain records (`Group.records`), one dict a row."""
    return [{str(k): v for k, v in r.items()} for r in attempts.to_dict("records")]


def tools_by_call(timeline: pd.DataFrame) -> pd.Series:
    """Each tool call's tool, as the first row naming both says: tool_call_id -> tool_name."""
    return (timeline[["tool_call_id", "tool_name"]].dropna()
            .drop_duplicates("tool_call_id").set_index("tool_call_id")["tool_name"])


def analyze(timeline: pd.DataFrame, warnings: Sequence[SourceWarning] = (),
            options: Options | None = None) -> Analysis:
    opts = options or Options()
    attempts = provider_attempts(timeline)
    if attempts.empty:  # no provider records: the executions the agent's side shows
        attempts, aligned, offsets = link_agent_side(timeline)
    else:
        attempts, aligned, offsets = link(timeline, attempts, opts.tolerance_s)
    labels = group_attempts(attempts, aligned, opts.window_s)
    attempts["group_id"] = None
    ctx = Context.build(aligned, opts.bands)
    tool_names = tools_by_call(aligned)

    groups: list[Group] = []
    # Only logical calls with two or more attempts are judged. One sort and one conversion to
    # records for all of them: per-group pandas calls cost more than the judging itself.
    repeated = labels.map(labels.value_counts()) >= 2
    multi = attempts[repeated].assign(_label=labels[repeated]).sort_values(
        ["_label", "at", "attempt_id"], kind="stable")
    bounds = np.flatnonzero(np.diff(multi["_label"].to_numpy())) + 1
    starts = [0, *bounds.tolist()]
    ends = [*bounds.tolist(), len(multi)]
    ids = [str(i) for i in multi["attempt_id"]]
    gids = np.repeat(np.array([_group_id(ids[s:e]) for s, e in zip(starts, ends, strict=True)],
                              dtype=object), np.subtract(ends, starts))
    multi["group_id"] = gids
    attempts.loc[multi.index, "group_id"] = gids
    multi = multi.drop(columns="_label")
    # what only a verdict reads, for the attempts of repeated calls only: each one's trace and
    # whether it stands for a run, and the queue delivery it ran under
    trace_shape(multi, aligned)
    deliveries(multi, aligned)
    multi = normalize(multi)
    all_records = attempt_records(multi)
    for start, end in zip(starts, ends, strict=True):
        if start == end:
            continue
        records = all_records[start:end]
        gid = str(records[0]["group_id"])
        dups = _duplicates(records, ctx)
        if not dups:  # only refused attempts before one that made the effect: no duplicate
            attempts.loc[attempts["group_id"] == gid, "group_id"] = None
            continue
        calls = list(dict.fromkeys(str(r["tool_call_id"]) for r in records
                                   if isinstance(r["tool_call_id"], str)))
        names = [str(tool_names[c]) for c in calls if c in tool_names.index]
        threads = [r["thread_id"] for r in records if isinstance(r["thread_id"], str)]
        groups.append(Group(
            group_id=gid,
            tool_name=names[0] if names else None,
            thread_id=max(set(threads), key=threads.count) if threads else None,
            tool_call_ids=calls,
            rows=multi,
            positions=slice(start, end),
            duplicates=dups,
            findings=findings_for(records, dups, ctx, opts.tolerance_s),
            records=records,
        ))
    groups.sort(key=lambda g: g.last_at, reverse=True)
    return Analysis(groups=groups, attempts=attempts, timeline=aligned, offsets=offsets,
                    warnings=list(warnings))
