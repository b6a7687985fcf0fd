"""Group attempts into logical calls: the executions of one intended call belong together.

Two attempts are one logical call when they share a tool_call_id, an idempotency key, or when
the model asked again for the same tool with the same arguments right after a result that
reported failure (a different tool_call_id, same intent). An attempt no agent-side evidence
speaks for joins the ONE attempt nearest in time with the same subject, amount, currency and
object type inside a window (joining both neighbours would chain two separate calls through
it); the provider's own flows (renewals) never join by resemblance.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from twice.timeline import Kind, isin

FAILED_OUTCOMES = frozenset({"error", "timeout", "unknown"})


def components(n: int, edges: np.ndarray) -> np.ndarray:
    """A label per node 0..n-1: the smallest node of its connected component.

    Vectorised min-label propagation with pointer jumping: each round every edge pulls both ends
    down to the smaller label, then every label jumps to its label's label. Rounds grow with the
    logarithm of a chain's length (chains here are a handful of attempts), not with n.
    """
    labels = np.arange(n)
    if n == 0 or len(edges) == 0:
        return labels
    a, b = edges[:, 0].astype(np.intp), edges[:, 1].astype(np.intp)
    while True:
        low = np.minimum(labels[a], labels[b])
        new = labels.copy()
        np.minimum.at(new, a, low)
        np.minimum.at(new, b, low)
        new = new[new]
        if np.array_equal(new, labels):
            return labels
        labels = new


def _chain_edges(df: pd.DataFrame, by: str) -> np.ndarray:
    """Edges between consecutive rows (positions) sharing `by` (rows in time order)."""
    codes, _ = pd.factorize(df[by])
    has = codes >= 0
    if has.sum() < 2:
        return np.empty((0, 2), dtype=int)
    codes, pos = codes[has], df["_pos"].to_numpy()[has]
    order = np.lexsort((df["at"].astype("int64").to_numpy()[has], codes))  # stable
    codes, pos = codes[order], pos[order]
    same = codes[1:] == codes[:-1]
    return np.column_stack([pos[:-1][same], pos[1:][same]])


def _codes(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """One integer per row, equal where the rows agree on every column (no missing values)."""
    out = np.zeros(len(frame), dtype=np.int64)
    for col in columns:
        codes, uniques = pd.factorize(frame[col])
        out, _ = pd.factorize(out * len(uniques) + codes)
    return out


def reemission_pairs(timeline: pd.DataFrame) -> list[tuple[str, str]]:
    """(earlier, later) tool_call_ids where the model asked again for the same tool with the same
    arguments in the same thread after the earlier call's result reported failure or no result.
    A successful earlier result means a new intent (a new user turn), not a re-emission."""
    intent = ["thread_id", "tool_name", "args_fingerprint"]
    calls = timeline.loc[timeline["kind"].isin([Kind.TOOL_CALL.value, Kind.TOOL_SPAN.value])
                         & timeline["tool_call_id"].notna(),
                         ["tool_call_id", "at_aligned", *intent]]
    if calls.empty:
        return []
    # the rows that say the whole intent (a tool span may name its call without the thread or
    # the arguments: the checkpoint's row of that call says them)
    calls = calls.dropna(subset=intent).sort_values("at_aligned").drop_duplicates("tool_call_id")
    calls = _sorted_by(calls, [*intent, "at_aligned"])
    if len(calls) < 2:
        return []
    same = np.ones(len(calls) - 1, dtype=bool)
    for col in intent:
        values = calls[col].to_numpy(dtype=object)
        same &= values[1:] == values[:-1]
    ids = calls["tool_call_id"].to_numpy(dtype=object)
    earlier, later = ids[:-1][same], ids[1:][same]
    failed = call_failed(timeline, pd.Series(earlier, dtype=object))
    return list(zip(earlier[failed], later[failed], strict=True))


def _sorted_by(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """`frame.sort_values(columns, kind="stable")` for text columns and a time last, none of
    them missing, sorted by Arrow (pandas would factorize every text value first). Arrow
    compares text as UTF-8 bytes, which orders as Python orders code points."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        table = pa.table({c: pa.array(frame[c].to_numpy(dtype=object), type=pa.large_string())
                          for c in columns[:-1]} | {columns[-1]: pa.array(
            frame[columns[-1]].to_numpy(dtype="datetime64[ns]").view(np.int64))})
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeError):
        return frame.sort_values(columns, kind="stable")
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in columns])
    return frame.take(order.to_numpy())


def call_failed(timeline: pd.DataFrame, calls: pd.Series) -> np.ndarray:
    """Per tool call id: did its result tell the model it failed (or is there none)?

    The checkpointed ToolMessage says it. A call the checkpoints hold without a result had
    none recorded before the model went on. A call known only from spans (no checkpoints of
    it) has no result to read: it failed when its tool span or one of its HTTP client spans
    ended in an error or a timeout; a tool that returned normally did not (whatever it said,
    the spans cannot show it)."""
    kind = timeline["kind"]
    results = timeline.loc[kind == Kind.TOOL_RESULT.value, ["tool_call_id", "outcome"]
                           ].drop_duplicates("tool_call_id").set_index("tool_call_id")["outcome"]
    outcome = calls.map(results)
    failed = outcome.isna() | outcome.isin(list(FAILED_OUTCOMES))
    checkpointed = isin(calls, timeline.loc[kind == Kind.TOOL_CALL.value, "tool_call_id"])
    from_spans = outcome.isna() & ~checkpointed
    if from_spans.any():
        spans = timeline.loc[kind.isin([Kind.TOOL_SPAN.value, Kind.HTTP_SPAN.value])
                             & timeline["tool_call_id"].notna(),
                             ["tool_call_id", "outcome", "status"]]
        bad = spans["outcome"].isin(["error", "timeout"]) | \
            pd.to_numeric(spans["status"], errors="coerce").ge(400).fillna(False)
        failed_calls = set(spans.loc[bad.astype(bool), "tool_call_id"])
        failed[from_spans] = isin(calls[from_spans], failed_calls)
    return failed.to_numpy(dtype=bool)


def group_attempts(attempts: pd.DataFrame, timeline: pd.DataFrame,
                   window_s: float = 900.0) -> pd.Series:
    """A group label (int) per attempt row; rows with equal labels are one logical call."""
    n = len(attempts)
    if n == 0:
        return pd.Series([], dtype=int)
    df = attempts.reset_index(drop=True).assign(_pos=np.arange(n))
    edges = [_chain_edges(df, "idempotency_key"), _chain_edges(df, "tool_call_id")]

    # the model asking again: join the attempts of both tool calls
    first_pos = df.dropna(subset=["tool_call_id"]).drop_duplicates("tool_call_id").set_index(
        "tool_call_id")["_pos"]
    pairs = reemission_pairs(timeline)
    if pairs:
        earlier = pd.Series([e for e, _ in pairs], dtype=object).map(first_pos)
        later = pd.Series([la for _, la in pairs], dtype=object).map(first_pos)
        both = earlier.notna() & later.notna()
        edges.append(np.column_stack([earlier[both].to_numpy(dtype=np.intp),
                                      later[both].to_numpy(dtype=np.intp)]))

    edges.append(_unlinked_edges(df, window_s))

    labels = components(n, np.concatenate([e.reshape(-1, 2) for e in edges]).astype(np.intp))
    return pd.Series(labels, index=attempts.index)


def _unlinked_edges(df: pd.DataFrame, window_s: float) -> np.ndarray:
    """Edges from each attempt without a tool call to its nearest look-alike (same subject,
    amount, currency, object type, and no other thread), within `window_s`."""
    key = ["subject", "amount", "currency", "object_type"]
    if not df["tool_call_id"].isna().any():
        return np.empty((0, 2), dtype=np.intp)
    auto = df["initiator"].eq("automatic").fillna(False) if "initiator" in df else \
        pd.Series(False, index=df.index)
    cand = df.loc[~auto, [*key, "at", "tool_call_id", "thread_id", "_pos"]].dropna(
        subset=["subject", "amount"])
    if len(cand) < 2:
        return np.empty((0, 2), dtype=np.intp)
    cand = cand.assign(currency=cand["currency"].fillna(""),
                       object_type=cand["object_type"].fillna(""))
    codes = _codes(cand, key)
    order = np.lexsort((cand["at"].astype("int64").to_numpy(), codes))  # stable
    cand, codes = cand.iloc[order], codes[order]
    same = codes[1:] == codes[:-1]
    # threads as integer codes: a missing thread (None, NaN or pd.NA alike) is -1
    th, _ = pd.factorize(cand["thread_id"])
    same &= (th[1:] < 0) | (th[:-1] < 0) | (th[1:] == th[:-1])
    t = cand["at"].astype("int64").to_numpy().astype("float64")
    gap = np.where(same, t[1:] - t[:-1], np.inf)
    gap[gap > window_s * 1e9] = np.inf
    before = np.concatenate([[np.inf], gap])  # to the previous look-alike
    after = np.concatenate([gap, [np.inf]])  # to the next one
    pos = cand["_pos"].to_numpy()
    unlinked = pd.isna(cand["tool_call_id"].to_numpy())
    pick_before = unlinked & np.isfinite(before) & (before <= after)
    pick_after = unlinked & np.isfinite(after) & (after < before)
    i_before = np.flatnonzero(pick_before)
    i_after = np.flatnonzero(pick_after)
    return np.concatenate([np.column_stack([pos[i_before - 1], pos[i_before]]),
                           np.column_stack([pos[i_after], pos[i_after + 1]])]).astype(np.intp)
