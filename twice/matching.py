"""Matching primitives the links and the clocks share: which intervals hold a time, the offset
most intervals agree on, a one-to-one match from ranked pairs, and whether two records agree on
what they both know. Pure numpy and pandas on positions; nothing here reads a timeline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NS = 1_000_000_000
CONTENT = ("subject", "amount", "currency")  # what both sides may know of an effect


def ns(series: pd.Series) -> np.ndarray:
    """Times as float nanoseconds since the epoch."""
    return series.astype("int64").to_numpy().astype("float64")


def whole_seconds(times: pd.Series) -> bool:
    """Every time is a whole second (a provider's `created`): it stands for that whole second."""
    values = times.dropna().astype("int64")
    return bool(len(values)) and bool((values % NS == 0).all())


def stab(times: np.ndarray, starts: np.ndarray, ends: np.ndarray, tol: float
         ) -> tuple[np.ndarray, np.ndarray]:
    """All (query, interval) position pairs where times[q] lies in [start - tol, end + tol].

    Intervals are grouped by length (powers of ten): within a group every containing interval
    starts within `length + tol` before the time, so a sorted search finds them; the work grows
    with the matches, not with queries x intervals. `ends` may be +inf (open intervals).
    """
    if not len(times) or not len(starts):
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
    length = np.maximum(ends - starts, 0.0)
    # the sorted search brackets generously (a sum rounds differently from a difference by a
    # few units in the last place); the exact test of the docstring then keeps the pairs
    slack = np.where(np.isfinite(times), 8 * np.finfo(float).eps * (np.abs(times) + tol + 1.0), 0.0)
    finite = np.isfinite(length)
    bucket = np.full(len(starts), 99, dtype=int)
    bucket[finite] = np.ceil(np.log10(np.maximum(length[finite], 1.0))).astype(int)
    out_q: list[np.ndarray] = []
    out_w: list[np.ndarray] = []
    for b in np.unique(bucket):
        members = np.flatnonzero(bucket == b)
        order = members[np.argsort(starts[members], kind="stable")]
        s = starts[order]
        longest = np.inf if b == 99 else float(length[members].max())
        lo = np.zeros(len(times), dtype=np.intp) if not np.isfinite(longest) else \
            np.searchsorted(s, times - longest - tol - slack, side="left")
        hi = np.searchsorted(s, times + tol + slack, side="right")
        counts = np.maximum(hi - lo, 0)
        total = int(counts.sum())
        if not total:
            continue
        q = np.repeat(np.arange(len(times)), counts)
        offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        w = order[np.repeat(lo, counts) + offsets]
        keep = (starts[w] - tol <= times[q]) & (times[q] <= ends[w] + tol)
        out_q.append(q[keep])
        out_w.append(w[keep])
    if not out_q:
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
    return np.concatenate(out_q), np.concatenate(out_w)


def best_offset(owner: np.ndarray, low: np.ndarray, high: np.ndarray
                ) -> tuple[float, float, int, bool] | None:
    """The offset range [lo, hi] that the most owners' intervals cover, and how many; among
    equally supported ranges the one nearest zero (clocks are usually close). Also whether the
    choice was a tie between separate ranges. None without intervals."""
    if not len(owner):
        return None
    frame = pd.DataFrame({"o": owner, "lo": low, "hi": high}).sort_values(["o", "lo"])
    # merge each owner's overlapping intervals: an owner counts once wherever it is covered
    o, lo, hi = frame["o"].to_numpy(), frame["lo"].to_numpy(), frame["hi"].to_numpy()
    run_hi = pd.Series(hi).groupby(o).cummax().to_numpy()
    new = np.ones(len(o), dtype=bool)
    new[1:] = (o[1:] != o[:-1]) | (lo[1:] > run_hi[:-1])
    seg = np.cumsum(new) - 1
    m_lo = pd.Series(lo).groupby(seg).min().to_numpy()
    m_hi = pd.Series(run_hi).groupby(seg).max().to_numpy()
    points = np.concatenate([m_lo, m_hi])
    delta = np.concatenate([np.ones(len(m_lo)), -np.ones(len(m_hi))])
    order = np.lexsort((-delta, points))  # at one point, openings before closings
    points, delta = points[order], delta[order]
    cover = np.cumsum(delta)
    top = cover.max()
    starts = np.flatnonzero(cover == top)
    ranges = [(points[i], points[i + 1] if i + 1 < len(points) else points[i]) for i in starts]
    ranges = [r for r in ranges if r[1] >= r[0]]
    distinct: list[tuple[float, float]] = []
    for r in ranges:
        if distinct and r[0] <= distinct[-1][1]:
            distinct[-1] = (distinct[-1][0], max(distinct[-1][1], r[1]))
        else:
            distinct.append(r)
    chosen = min(distinct, key=lambda r: 0.0 if r[0] <= 0 <= r[1] else min(abs(r[0]),
                                                                            abs(r[1])))
    return float(chosen[0]), float(chosen[1]), int(top), len(distinct) > 1


def same_values(left: pd.Series, right: pd.Series) -> np.ndarray:
    """Position by position: both hold a value and it is the same (a missing value, None, NaN
    or pd.NA alike, equals nothing). Compared as integer codes: `==` on an object array that
    holds pd.NA has no truth value."""
    codes, _ = pd.factorize(pd.concat([left.reset_index(drop=True),
                                       right.reset_index(drop=True)], ignore_index=True))
    a, b = codes[:len(left)], codes[len(left):]
    return (a >= 0) & (a == b)


def texts(col: pd.Series) -> np.ndarray:
    """Values as comparable text (Int64 and float amounts must meet); None stays None."""
    out = col.astype(object).to_numpy()
    result = np.empty(len(out), dtype=object)
    for i, v in enumerate(out):
        if v is None or v is pd.NA or (isinstance(v, float) and v != v):
            result[i] = None
        elif isinstance(v, float):
            result[i] = str(int(v))
        else:
            result[i] = str(v).lower() if isinstance(v, str) else str(v)
    return result


def agree(left: pd.DataFrame, right: pd.DataFrame, columns: tuple[str, ...] = CONTENT
          ) -> np.ndarray:
    """Row by row: every column both sides know holds the same value (pairs aligned by position).
    Also how many columns were known on both sides, to rank the matches."""
    ok = np.ones(len(left), dtype=bool)
    for col in columns:
        if col not in left or col not in right:
            continue
        x, y = texts(left[col]), texts(right[col])
        both = (x != None) & (y != None)  # noqa: E711 - element-wise over object arrays
        ok &= ~both | (x == y)
    return ok


def known(frame: pd.DataFrame, columns: tuple[str, ...] = CONTENT) -> np.ndarray:
    """How many of `columns` each row knows."""
    return sum((frame[c].notna().to_numpy() for c in columns if c in frame),
               np.zeros(len(frame), dtype=int))


def one_to_one(pairs: pd.DataFrame) -> pd.DataFrame:
    """Greedy matching: pairs in order of preference, each kept when neither side is taken."""
    used_a: set[int] = set()
    used_w: set[int] = set()
    keep = []
    for i, (a, w) in enumerate(zip(pairs["_attempt"].to_numpy(), pairs["_window"].to_numpy(),
                                   strict=True)):
        if a in used_a or w in used_w:
            continue
        used_a.add(a)
        used_w.add(w)
        keep.append(i)
    return pairs.iloc[keep]



def ordered_match(attempt: np.ndarray, window: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """The positions of the candidate pairs (attempt rank, window rank, cost) that match
    attempts to windows one to one and in order (a later attempt never takes an earlier
    window): the most pairs, then the least total cost. Two clocks that both run forward put
    the i-th request a client sent in its i-th span, however coarse one of them is.

    Dynamic programming over the ranks (attempts x windows), for the few candidates of one
    tool call; ranks are 0-based and dense."""
    if not len(attempt):
        return np.empty(0, dtype=np.intp)
    n_a, n_w = int(attempt.max()) + 1, int(window.max()) + 1
    pair_at: dict[tuple[int, int], tuple[float, int]] = {}
    for k, (i, j, c) in enumerate(zip(attempt.tolist(), window.tolist(), cost.tolist(),
                                      strict=True)):
        if (i, j) not in pair_at or c < pair_at[(i, j)][0]:
            pair_at[(i, j)] = (float(c), k)
    # best[i][j]: (pairs, -cost) using attempts < i and windows < j
    best = [[(0, 0.0)] * (n_w + 1) for _ in range(n_a + 1)]
    for i in range(1, n_a + 1):
        row, above = best[i], best[i - 1]
        for j in range(1, n_w + 1):
            choice = max(above[j], row[j - 1])
            pair = pair_at.get((i - 1, j - 1))
            if pair is not None:
                diagonal = above[j - 1]
                choice = max(choice, (diagonal[0] + 1, diagonal[1] - pair[0]))
            row[j] = choice
    chosen = []
    i, j = n_a, n_w
    while i > 0 and j > 0:
        pair = pair_at.get((i - 1, j - 1))
        if pair is not None and best[i][j] == (best[i - 1][j - 1][0] + 1,
                                               best[i - 1][j - 1][1] - pair[0]):
            chosen.append(pair[1])
            i, j = i - 1, j - 1
        elif best[i][j] == best[i - 1][j]:
            i -= 1
        else:
            j -= 1
    return np.array(sorted(chosen), dtype=np.intp)
