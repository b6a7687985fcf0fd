"""Link provider attempts to the agent's side, and align the sources' clocks.

Strong links come from identifiers both sides recorded (a provider request id captured on an HTTP
client span, the idempotency key sent on the wire, a key equal to the thread/tool-call
derivation, ids stamped into the provider's metadata). Those pairs must be simultaneous, so they
also give the clock offset between the provider and the spans. Weak links, after alignment, put a
provider request inside the time window of the HTTP span, tool span or checkpointed tool call that
must have made it (same subject and amount).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from twice.timeline import Kind, derived_key

NS = 1_000_000_000


@dataclass(frozen=True)
class ClockOffset:
    source: str  # "provider" or "checkpoints"
    seconds: float  # the source's clock minus the reference clock (spans)
    pairs: int  # simultaneous pairs it was estimated from
    basis: str  # what the pairs were


def _frame(timeline: pd.DataFrame, kind: Kind, columns: list[str]) -> pd.DataFrame:
    """The rows of one kind, with only the columns a step reads (a timeline has 36)."""
    return timeline.loc[timeline["kind"] == kind.value, columns]


def _second_resolution(times: pd.Series) -> bool:
    ns = times.dropna().astype("int64")
    return bool(len(ns)) and bool((ns % NS == 0).all())


def _match_by(attempts: pd.DataFrame, spans: pd.DataFrame, column: str) -> pd.DataFrame:
    """Pair attempts with HTTP spans sharing `column`, in time order within each value.

    The i-th attempt with a value pairs with the i-th span with it; attempts left over (a proxy
    sent more requests than the client made) pair with the nearest span with the value.
    Returns attempt index -> span row (span_id, at, ...).
    """
    a = attempts[attempts[column].notna()][[column, "at"]].copy()
    s = spans[spans[column].notna()]
    if a.empty or s.empty:
        return pd.DataFrame(columns=["span_id"])
    # the values as integer codes shared by both sides: grouping and joining on ints is several
    # times faster than on the id strings (hundreds of thousands at a month's scale)
    codes, _ = pd.factorize(pd.concat([a[column], s[column]], ignore_index=True))
    a["_code"] = codes[:len(a)]
    s = s.assign(_code=codes[len(a):])
    a["_rank"] = a.sort_values("at").groupby("_code").cumcount()
    a = a.reset_index(names="_attempt")
    s = s.drop(columns=column).sort_values("at").rename(columns={"at": "span_at"})
    s["_rank"] = s.groupby("_code").cumcount()
    ranked = a.merge(s, on=["_code", "_rank"], how="inner")
    left = a[~a["_attempt"].isin(ranked["_attempt"])]
    nearest = left.merge(s.drop(columns=["_rank"]), on="_code", how="inner")
    if not nearest.empty:
        nearest["_d"] = (nearest["at"] - nearest["span_at"]).abs()
        nearest = nearest.sort_values("_d").drop_duplicates("_attempt")
    out = pd.concat([ranked, nearest], ignore_index=True).drop(columns=["_code"])
    return out.set_index("_attempt")


def _within(attempts_t: pd.Series, keys: pd.DataFrame, intervals: pd.DataFrame,
            on: list[str], tol_ns: int) -> pd.DataFrame:
    """For each attempt time, the interval with equal `on` values that contains it.

    `intervals` has start/end (int ns, end may be NaN for open) and the payload columns.
    Returns a frame indexed by attempt index with the interval's payload; ambiguous matches (two
    overlapping intervals contain the time) are dropped rather than guessed.
    """
    if attempts_t.empty or intervals.empty:
        return pd.DataFrame()
    left = keys.assign(t=attempts_t.astype("int64")).reset_index(names="_attempt")
    left = left.dropna(subset=on)
    right = intervals.dropna(subset=on).copy()
    for col in on:  # compare keys as text: Int64 and float amounts must meet
        left[col] = _key_texts(left[col])
        right[col] = _key_texts(right[col])
    if left.empty or right.empty:
        return pd.DataFrame()
    right = right.sort_values("start").copy()
    # the latest end among intervals that started earlier, to detect overlap (ambiguity)
    right["_end"] = right["end"].fillna(np.inf)
    right["_prev_end"] = right.assign(_end=right.groupby(on, sort=False)["_end"].cummax()) \
        .groupby(on, sort=False)["_end"].shift(1)
    left = left.sort_values("t")
    left["_probe"] = (left["t"] + tol_ns).astype("float64")
    m = pd.merge_asof(left, right, left_on="_probe", right_on="start", by=on,
                      direction="backward")
    end = m["end"].fillna(np.inf)
    ok = m["start"].notna() & (m["t"] <= end + tol_ns)
    ambiguous = m["_prev_end"].fillna(-np.inf) >= m["t"] - tol_ns
    return m[ok & ~ambiguous].set_index("_attempt")


def _key_text(value: object) -> str:
    return str(int(value)) if isinstance(value, float) else str(value)


def _key_texts(col: pd.Series) -> pd.Series:
    """`_key_text` of every value (no nulls), column at a time where the dtype allows."""
    if pd.api.types.is_float_dtype(col.dtype):
        col = col.astype("int64")  # truncates as int() does
    elif not (pd.api.types.is_integer_dtype(col.dtype)
              or pd.api.types.is_string_dtype(col.dtype) and col.dtype != object):
        return col.map(_key_text).astype(object)
    return col.astype(str).astype(object)


def _ns(series: pd.Series) -> pd.Series:
    return series.astype("int64").astype("float64")


def link(timeline: pd.DataFrame, attempts: pd.DataFrame, tolerance_s: float = 2.0
         ) -> tuple[pd.DataFrame, pd.DataFrame, list[ClockOffset]]:
    """Return (attempts with agent-side links, timeline with at_aligned, clock offsets)."""
    tol_ns = int(tolerance_s * NS)
    att = attempts.copy()
    for col in ["http_span_id", "tool_span_id", "link", "worker"]:
        att[col] = pd.Series([None] * len(att), index=att.index, dtype=object)
    att["resend_count"] = pd.Series([pd.NA] * len(att), index=att.index, dtype="Int64")
    att["proxy_attempt"] = pd.Series([pd.NA] * len(att), index=att.index, dtype="Int64")
    att["at_raw"] = att["at"]
    att["time_basis"] = "provider"

    http = _frame(timeline, Kind.HTTP_SPAN, [
        "span_id", "at", "end", "parent_span_id", "tool_call_id", "thread_id", "resend_count",
        "proxy_attempt", "worker", "request_id", "idempotency_key", "method", "path"])
    tools = _frame(timeline, Kind.TOOL_SPAN,
                   ["span_id", "subject", "amount", "tool_call_id", "thread_id"])
    http = http.merge(
        tools[["span_id", "subject", "amount", "tool_call_id", "thread_id"]].rename(
            columns=lambda c: f"tool_{c}"),
        left_on="parent_span_id", right_on="tool_span_id", how="left")
    http = http.assign(
        tool_call_id=http["tool_call_id"].fillna(http["tool_tool_call_id"]),
        thread_id=http["thread_id"].fillna(http["tool_thread_id"]),
    )
    http_cols = ["span_id", "at", "end", "parent_span_id", "tool_span_id", "tool_call_id",
                 "thread_id", "resend_count", "proxy_attempt", "worker", "tool_subject",
                 "tool_amount"]

    # 1. strong links on identifiers both sides recorded
    strong = pd.DataFrame(columns=http_cols)
    if not att.empty and not http.empty:
        by_req = _match_by(att, http[[*http_cols, "request_id"]], "request_id")
        rest = att.drop(index=by_req.index, errors="ignore")
        by_key = _match_by(rest, http[[*http_cols, "idempotency_key"]], "idempotency_key")
        strong = pd.concat([by_req.assign(link="request_id"),
                            by_key.assign(link="idempotency_key")])

    # 2. clock offsets from the strong pairs: the provider logged the request while the client
    # span was open, just after it started.
    offsets: list[ClockOffset] = []
    provider_offset = 0.0
    if len(strong):
        span_start = pd.to_datetime(strong["span_at"], utc=True)
        prov = att.loc[strong.index, "at"]
        half = 0.5 * NS if _second_resolution(att["at"]) else 0.0
        diffs = (_ns(prov) + half - _ns(span_start)) / NS
        provider_offset = float(np.median(diffs.to_numpy()))
        offsets.append(ClockOffset("provider", round(provider_offset, 3), len(diffs),
                                   "provider request time vs. the HTTP client span that sent it"))
    att["at"] = att["at_raw"] - pd.to_timedelta(provider_offset, unit="s")

    aligned = timeline.copy(deep=False)  # copy-on-write: only the column set below is copied
    provider_rows = aligned["kind"].isin([Kind.PROVIDER_EVENT.value,
                                          Kind.PROVIDER_REQUEST.value])
    aligned.loc[provider_rows, "at_aligned"] = (
        aligned.loc[provider_rows, "at"] - pd.to_timedelta(provider_offset, unit="s"))
    ck_offset = _checkpoint_offset(timeline)
    if ck_offset is not None:
        offsets.append(ck_offset)
        ck_rows = aligned["source"] == "checkpoints"
        aligned.loc[ck_rows, "at_aligned"] = (
            aligned.loc[ck_rows, "at"] - pd.to_timedelta(ck_offset.seconds, unit="s"))

    _apply_http(att, strong, http)

    # 3. weak links inside time windows, after alignment
    if not http.empty:
        iv = http.assign(start=_ns(http["at"]), end=_ns(http["end"].fillna(http["at"])), _all="")
        iv = iv[iv["method"].fillna("POST").str.upper() == "POST"][
            [*http_cols, "start", "path", "_all"]]
        # by path where both sides know it, else any POST span open at that time
        for on, known in ((["path"], att["path"].notna()), (["_all"], att["path"].isna())):
            need = att["http_span_id"].isna() & known
            if need.any():
                found = _within(att.loc[need, "at"], att.loc[need, ["path"]].assign(_all=""),
                                iv, on, tol_ns)
                _apply_http(att, found.assign(link="http_span_window"), http)

    _link_derived_keys(att, timeline)
    _link_tool_windows(att, aligned, tol_ns)

    # An attempt linked to an HTTP span it alone used takes the span's finer-grained start.
    solo = att["http_span_id"].notna() & ~att["http_span_id"].duplicated(keep=False)
    starts = http.set_index("span_id")["at"] if not http.empty else pd.Series(dtype=object)
    if solo.any():
        att.loc[solo, "at"] = att.loc[solo, "http_span_id"].map(starts).to_numpy()
        att.loc[solo, "time_basis"] = "http_span"
    att["at"] = pd.to_datetime(att["at"], utc=True)
    return att.sort_values(["at", "attempt_id"], ignore_index=True), aligned, offsets


def _apply_http(att: pd.DataFrame, matched: pd.DataFrame, http: pd.DataFrame) -> None:
    if matched.empty:
        return
    idx = matched.index
    att.loc[idx, "http_span_id"] = matched["span_id"].to_numpy()
    att.loc[idx, "link"] = matched["link"].to_numpy()
    for col in ["resend_count", "proxy_attempt"]:
        att.loc[idx, col] = pd.array(matched[col].to_numpy(), dtype="Int64")
    att.loc[idx, "worker"] = matched["worker"].to_numpy()
    tool_span = matched["tool_span_id"].where(matched["tool_span_id"].notna(), None)
    att.loc[idx, "tool_span_id"] = tool_span.to_numpy()
    for col in ["tool_call_id", "thread_id"]:
        have = att.loc[idx, col]
        att.loc[idx, col] = have.where(have.notna(), matched[col].to_numpy())


def _link_derived_keys(att: pd.DataFrame, timeline: pd.DataFrame) -> None:
    """Keys equal to sha256(thread_id:tool_call_id)[:32] name their tool call outright."""
    att["key_derived"] = False
    keys = att["idempotency_key"]
    # only a key of 32 hex digits can be a derived one: without any, no hashing at all
    candidate = keys.map(lambda k: isinstance(k, str) and len(k) == 32).astype(bool)
    if not candidate.any():
        return
    pairs = timeline.loc[timeline["tool_call_id"].notna() & timeline["thread_id"].notna(),
                         ["thread_id", "tool_call_id"]].drop_duplicates()
    if pairs.empty:
        return
    table = {derived_key(t, c): (t, c) for t, c in pairs.itertuples(index=False)}
    hit = keys[candidate].map(table.get).dropna()
    if hit.empty:
        return
    att.loc[hit.index, "key_derived"] = True
    unnamed = [i for i, call in att.loc[hit.index, "tool_call_id"].items() if call is None]
    if not unnamed:
        return
    att.loc[unnamed, "tool_call_id"] = [hit[i][1] for i in unnamed]
    att.loc[unnamed, "thread_id"] = [hit[i][0] for i in unnamed]
    att.loc[unnamed, "link"] = [how if isinstance(how, str) else "derived_key"
                                for how in att.loc[unnamed, "link"]]


def _link_tool_windows(att: pd.DataFrame, aligned: pd.DataFrame, tol_ns: int) -> None:
    """Attempts still without a tool call: the tool span, or the checkpointed tool call (from
    the call to its result), for the same subject and amount that was open at that time."""
    tools = _frame(aligned, Kind.TOOL_SPAN, ["at", "at_aligned", "end", "subject", "amount",
                                             "tool_call_id", "thread_id", "span_id"])
    need = att["tool_call_id"].isna() & att["subject"].notna()
    if need.any() and not tools.empty:
        iv = tools.assign(start=_ns(tools["at_aligned"]),
                          end=_ns(tools["end"].fillna(tools["at"]))
                          + _ns(tools["at_aligned"]) - _ns(tools["at"]))
        iv = iv[["start", "end", "subject", "amount", "tool_call_id", "thread_id", "span_id"]]
        found = _within(att.loc[need, "at"], att.loc[need, ["subject", "amount"]],
                        iv.astype({"amount": "float64"}), ["subject", "amount"], tol_ns)
        if not found.empty and "tool_call_id" in found:
            _fill(att, found, "tool_span_window")
            att.loc[found.index, "tool_span_id"] = att.loc[found.index, "tool_span_id"].where(
                att.loc[found.index, "tool_span_id"].notna(), found["span_id"])

    calls = _frame(aligned, Kind.TOOL_CALL,
                   ["at_aligned", "subject", "amount", "tool_call_id", "thread_id"])
    need = att["tool_call_id"].isna() & att["subject"].notna()
    if need.any() and not calls.empty:
        results = _frame(aligned, Kind.TOOL_RESULT, ["tool_call_id", "at_aligned"]
                         ).drop_duplicates("tool_call_id")
        iv = calls.merge(results[["tool_call_id", "at_aligned"]], on="tool_call_id",
                         how="left", suffixes=("", "_result"))
        result_at = iv["at_aligned_result"]
        iv = iv.assign(start=_ns(iv["at_aligned"]),
                       end=_ns(result_at.fillna(iv["at_aligned"])).where(result_at.notna()))
        iv = iv[["start", "end", "subject", "amount", "tool_call_id", "thread_id"]]
        found = _within(att.loc[need, "at"], att.loc[need, ["subject", "amount"]],
                        iv.astype({"amount": "float64"}), ["subject", "amount"], tol_ns)
        if not found.empty:
            _fill(att, found, "checkpoint_window")


def _fill(att: pd.DataFrame, found: pd.DataFrame, how: str) -> None:
    idx = found.index
    att.loc[idx, "tool_call_id"] = found["tool_call_id"].to_numpy()
    have = att.loc[idx, "thread_id"]
    att.loc[idx, "thread_id"] = have.where(have.notna(), found["thread_id"].to_numpy())
    links = att.loc[idx, "link"]
    att.loc[idx, "link"] = links.where(links.notna(), how)


def _checkpoint_offset(timeline: pd.DataFrame) -> ClockOffset | None:
    """Checkpoints vs spans: the checkpoint holding a tool result is written just after the tool
    span that produced it ended. Only corrected when the disagreement is clear (> 0.5 s)."""
    results = _frame(timeline, Kind.TOOL_RESULT, ["tool_call_id", "at"]
                     ).drop_duplicates("tool_call_id")
    spans = _frame(timeline, Kind.TOOL_SPAN, ["tool_call_id", "end"])
    spans = spans[spans["end"].notna() & spans["tool_call_id"].notna()]
    if results.empty or spans.empty:
        return None
    last = spans.sort_values("end").drop_duplicates("tool_call_id", keep="last")
    pairs = results[["tool_call_id", "at"]].merge(last[["tool_call_id", "end"]],
                                                  on="tool_call_id")
    if pairs.empty:
        return None
    diffs = (_ns(pairs["at"]) - _ns(pairs["end"])) / NS
    offset = float(np.median(diffs.to_numpy()))
    if abs(offset) <= 0.5:
        return None
    return ClockOffset("checkpoints", round(offset, 3), len(pairs),
                       "checkpoint with a tool result vs. the end of that tool's span")
