"""Which evidence rows a sweep's chunk and a saved group need, beyond the chunk's own window.

- far rows: attempts linked by a fingerprint (tool_call_id, idempotency key) have no time limit,
  so a fingerprint seen further apart than the overlap brings its far rows, and the evidence
  tied to them, into every chunk holding one of its rows;
- a group's slice: its attempts and the rows tied to them, checked by re-analysing it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from twice.engine import Analysis, Group, Options, analyze
from twice.formats import utc

# evidence kept around a group's attempts in its saved investigation
SLICE_PAD = pd.Timedelta(minutes=15)
# ids that tie evidence rows to a group's attempts (first the attempts', then one hop further)
LINK_COLUMNS = ("thread_id", "tool_call_id", "idempotency_key", "request_id", "object_id",
                "trace_id", "message_id")
# fingerprints that join attempts however far apart they are
FINGERPRINTS = ("tool_call_id", "idempotency_key")


def _id_arrays(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The LINK_COLUMNS of `frame` as object arrays (None for a missing id)."""
    return {col: frame[col].astype(object).where(frame[col].notna(), None).to_numpy()
            for col in LINK_COLUMNS}


def _tied_mask(ids: dict[str, np.ndarray], seeds: dict[str, set[str]]) -> np.ndarray:
    """Which rows (of the `ids` arrays) are tied to the seed ids, directly or through one hop
    (the trace of a span, the message of a queue receive, the thread of a checkpoint)."""
    n = len(ids[LINK_COLUMNS[0]])
    mask = np.zeros(n, dtype=bool)
    for col, values in seeds.items():
        if values:
            mask |= np.fromiter((v in values for v in ids[col]), dtype=bool, count=n)
    hop = {col: {v for v in ids[col][mask] if v is not None} for col in LINK_COLUMNS}
    for col, values in hop.items():
        if values:
            mask |= np.fromiter((v in values for v in ids[col]), dtype=bool, count=n)
    return mask


def _seed_ids(records: Sequence[Mapping[Any, Any]]) -> dict[str, set[str]]:
    return {col: {str(r[col]) for r in records if col in r and not pd.isna(r[col])}
            for col in LINK_COLUMNS}


def _related(window: pd.DataFrame, seeds: pd.DataFrame) -> np.ndarray:
    """Rows of `window` tied to the `seeds` rows by an id (see _tied_mask)."""
    return _tied_mask(_id_arrays(window), _seed_ids(seeds.to_dict("records")))


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
    return around[_related(around, far)]


def _reproduces(analysis: Analysis, group: Group) -> bool:
    return any(g.group_id == group.group_id and g.worst_layer == group.worst_layer
               for g in analysis.groups)


def _tied(at_ns: np.ndarray, ids: dict[str, np.ndarray], group: Group
          ) -> tuple[np.ndarray, np.ndarray]:
    """Positions of (the rows tied to the group's attempts, every row) within SLICE_PAD of each
    attempt, in a timeline sorted by time whose times in ns are `at_ns` and whose id columns
    are `ids` (_id_arrays); a 33 h gap keeps two short windows, not 33 h of other customers."""
    near = np.zeros(len(at_ns), dtype=bool)
    pad = SLICE_PAD.value
    for r in group.records:
        t = utc(r["at_raw"]).value
        near[np.searchsorted(at_ns, t - pad, side="left"):
             np.searchsorted(at_ns, t + pad, side="right")] = True
    window = np.flatnonzero(near)
    tied = _tied_mask({col: values[window] for col, values in ids.items()},
                      _seed_ids(group.records))
    return window[tied], window


def group_slices(part: pd.DataFrame, groups: Sequence[Group], options: Options
                 ) -> list[tuple[pd.DataFrame, Analysis]]:
    """Per group, the evidence its saved investigation keeps (its attempts and the rows tied to
    them) and that evidence's analysis, which must give the same group and layer.

    One analysis of all the slices together checks them at once (the engine's cost is mostly
    per call); a group it does not reproduce is checked alone, and when its slice still does
    not give the same verdict, the whole window around its attempts is kept instead."""
    if not groups:
        return []
    if not part["at"].is_monotonic_increasing:
        part = part.sort_values("at", kind="stable")
    at_ns = part["at"].dt.as_unit("ns").astype("int64").to_numpy()
    ids = _id_arrays(part)
    tied = [_tied(at_ns, ids, g) for g in groups]
    union = part.iloc[np.unique(np.concatenate([rows for rows, _ in tied]))]
    together = {g.group_id: g for g in analyze(union.reset_index(drop=True),
                                               options=options).groups}
    out: list[tuple[pd.DataFrame, Analysis]] = []
    for group, (at_rows, at_window) in zip(groups, tied, strict=True):
        rows = part.iloc[at_rows].reset_index(drop=True)
        same = together.get(group.group_id)
        if same is not None and same.worst_layer == group.worst_layer:
            out.append((rows, Analysis(groups=[same], attempts=same.attempts,
                                       timeline=rows, offsets=[], warnings=[])))
            continue
        alone = analyze(rows, options=options)
        if _reproduces(alone, group):
            out.append((rows, alone))
        else:
            window = part.iloc[at_window].reset_index(drop=True)
            out.append((window, analyze(window, options=options)))
    return out
