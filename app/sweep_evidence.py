"""Which evidence rows a sweep's chunk and a saved group need, beyond the chunk's own window.

- far rows: attempts linked by a fingerprint (tool_call_id, idempotency key) have no time limit,
  so a fingerprint seen further apart than the overlap brings its far rows, and the evidence
  tied to them, into every chunk holding one of its rows;
- a group's slice: its attempts and the rows tied to them, checked by re-analysing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from twice.engine import Analysis, Group, Options, analyze

# evidence kept around a group's attempts in its saved investigation
SLICE_PAD = pd.Timedelta(minutes=15)
# ids that tie evidence rows to a group's attempts (first the attempts', then one hop further)
LINK_COLUMNS = ("thread_id", "tool_call_id", "idempotency_key", "request_id", "object_id",
                "trace_id", "message_id")
# fingerprints that join attempts however far apart they are
FINGERPRINTS = ("tool_call_id", "idempotency_key")


def _utc(value: Any) -> pd.Timestamp:
    t = pd.Timestamp(value)
    return t.tz_localize("UTC") if t.tz is None else t.tz_convert("UTC")


def _related(window: pd.DataFrame, seeds: pd.DataFrame) -> pd.Series:
    """Rows of `window` tied to the `seeds` rows by an id, directly or through one hop (the
    trace of a span, the message of a queue receive, the thread of a checkpoint)."""
    mask = pd.Series(False, index=window.index)
    for col in LINK_COLUMNS:
        if col in seeds:
            mask |= window[col].isin(seeds[col].dropna().astype(str))
    first_hop = window[mask]
    for col in LINK_COLUMNS:
        mask |= window[col].isin(first_hop[col].dropna())
    return mask


def long_fingerprints(timeline: pd.DataFrame, overlap_s: float) -> dict[str, set[str]]:
    """Fingerprint values whose rows lie further apart than the overlap, per column."""
    out: dict[str, set[str]] = {}
    for col in FINGERPRINTS:
        spans = timeline.dropna(subset=[col]).groupby(col, observed=True)["at"].agg(["min", "max"])
        wide = spans["max"] - spans["min"] > pd.Timedelta(seconds=overlap_s)
        out[col] = {str(v) for v in spans.index[wide]}
    return out


def far_rows(timeline: pd.DataFrame, at_ns: np.ndarray, lo: int, hi: int,
             long: dict[str, set[str]]) -> pd.DataFrame:
    """Rows outside positions [lo, hi) that share a long fingerprint with a row inside, and the
    evidence tied to them within SLICE_PAD."""
    part = timeline.iloc[lo:hi]
    outside = np.ones(len(timeline), dtype=bool)
    outside[lo:hi] = False
    hit = np.zeros(len(timeline), dtype=bool)
    for col, values in long.items():
        here = set(part[col].dropna().astype(str)) & values
        if here:
            hit |= timeline[col].isin(list(here)).to_numpy() & outside
    if not hit.any():
        return timeline.iloc[0:0]
    far = timeline[hit]
    pad = SLICE_PAD.value
    near = np.zeros(len(timeline), dtype=bool)
    for t in far["at"].dt.as_unit("ns").astype("int64").to_numpy():
        a, b = np.searchsorted(at_ns, [t - pad, t + pad], side="left")
        near[a:b] = True
    near &= outside
    around = timeline[near]
    return around[_related(around, far).to_numpy()]


def _reproduces(analysis: Analysis, group: Group) -> bool:
    return any(g.group_id == group.group_id and g.worst_layer == group.worst_layer
               for g in analysis.groups)


def _tied(part: pd.DataFrame, group: Group) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows tied to the group's attempts, every row) within SLICE_PAD of each attempt; a 33 h
    gap keeps two short windows, not 33 h of other customers."""
    near = np.zeros(len(part), dtype=bool)
    at = part["at"]
    for r in group.records:
        t = _utc(r["at_raw"])
        near |= ((at >= t - SLICE_PAD) & (at <= t + SLICE_PAD)).to_numpy()
    window = part[near]
    return window[_related(window, pd.DataFrame(group.records))], window


def group_slices(part: pd.DataFrame, groups: Sequence[Group], options: Options
                 ) -> list[tuple[pd.DataFrame, Analysis]]:
    """Per group, the evidence its saved investigation keeps (its attempts and the rows tied to
    them) and that evidence's analysis, which must give the same group and layer.

    One analysis of all the slices together checks them at once (the engine's cost is mostly
    per call); a group it does not reproduce is checked alone, and when its slice still does
    not give the same verdict, the whole window around its attempts is kept instead."""
    tied = [_tied(part, g) for g in groups]
    union = part.loc[sorted({i for rows, _ in tied for i in rows.index})].reset_index(drop=True)
    together = {g.group_id: g for g in analyze(union, options=options).groups} if groups else {}
    out: list[tuple[pd.DataFrame, Analysis]] = []
    for group, (rows, window) in zip(groups, tied, strict=True):
        rows = rows.reset_index(drop=True)
        same = together.get(group.group_id)
        if same is not None and same.worst_layer == group.worst_layer:
            out.append((rows, Analysis(groups=[same], attempts=same.attempts,
                                       timeline=rows, offsets=[], warnings=[])))
            continue
        alone = analyze(rows, options=options)
        if _reproduces(alone, group):
            out.append((rows, alone))
        else:
            window = window.reset_index(drop=True)
            out.append((window, analyze(window, options=options)))
    return out
