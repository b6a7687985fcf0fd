"""Link provider attempts to the agent's side, and align the sources' clocks.

Strong links come from identifiers both sides recorded (a provider request id captured on an HTTP
client span, the idempotency key sent on the wire, a key equal to the thread/tool-call
derivation, ids stamped into the provider's metadata). Production spans rarely capture any of
them, so the clocks are aligned from the evidence as a whole (`twice.clocks`), and then each
attempt is placed inside the window of the HTTP span, tool span or checkpointed tool call that
made it. A window takes an attempt only when what both sides know of the effect agrees (the
customer, amount and currency the tool was asked for): an attempt is never linked across
customers. HTTP spans are linked one to one, except that identical requests inside one client
span (a proxy's resend) all belong to it; tool executions and tool calls may hold several
attempts (the client's own retries).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from twice.attempts import agent_attempts, normalize, requests_named_by_spans
from twice.clocks import ClockOffset, align
from twice.matching import (
    CONTENT,
    NS,
    agree,
    known,
    ns,
    one_to_one,
    ordered_match,
    same_values,
    stab,
    whole_seconds,
)
from twice.timeline import Kind, derived_key, isin, positions, sort_by_time_and_id
from twice.windows import HTTP_COLS, http_spans, provider_content, tool_windows

__all__ = ["ClockOffset", "deliveries", "link", "link_agent_side", "trace_shape"]


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
    left = a[~isin(a["_attempt"], ranked["_attempt"])]
    nearest = left.merge(s.drop(columns=["_rank"]), on="_code", how="inner")
    if not nearest.empty:
        nearest["_d"] = (nearest["at"] - nearest["span_at"]).abs()
        nearest = nearest.sort_values("_d").drop_duplicates("_attempt")
    out = pd.concat([ranked, nearest], ignore_index=True).drop(columns=["_code"])
    return out.set_index("_attempt")


def link(timeline: pd.DataFrame, attempts: pd.DataFrame, tolerance_s: float = 2.0
         ) -> tuple[pd.DataFrame, pd.DataFrame, list[ClockOffset]]:
    """Return (attempts with agent-side links, timeline with at_aligned, clock offsets)."""
    att = attempts.copy()
    for col in ["http_span_id", "http_parent", "tool_span_id", "link", "worker", "trace_id"]:
        att[col] = pd.Series([None] * len(att), index=att.index, dtype=object)
    att["resend_count"] = _no_counts(att.index)
    att["proxy_attempt"] = _no_counts(att.index)
    att["at_raw"] = att["at"]
    att["time_basis"] = "provider"
    metadata = att["thread_id"].notna() | att["tool_call_id"].notna()
    att.loc[metadata, "link"] = "metadata"

    http = http_spans(timeline)

    # 1. strong links on identifiers both sides recorded
    strong = pd.DataFrame(columns=HTTP_COLS)
    if not att.empty and not http.empty:
        by_req = _match_by(att, http[[*HTTP_COLS, "request_id"]], "request_id")
        rest = att.drop(index=by_req.index, errors="ignore")
        by_key = _match_by(rest, http[[*HTTP_COLS, "idempotency_key"]], "idempotency_key")
        parts = [by_req.assign(link="request_id"), by_key.assign(link="idempotency_key")]
        strong = pd.concat([p for p in parts if len(p)] or parts)  # dtypes from rows only

    # 2. the clocks: every source's offset from the evidence as a whole
    aligned, offsets, provider_offset = align(timeline, att, strong)
    att["at"] = att["at_raw"] - pd.to_timedelta(provider_offset, unit="s")
    tol_ns = int(_tolerance(offsets, tolerance_s) * NS)
    res_ns = NS if whole_seconds(att["at_raw"]) else 0

    http = http_spans(aligned)  # on the reference clock now
    att, strong = requests_named_by_spans(att, http, strong, provider_offset)
    _apply_http(att, strong, http, trusted=True)
    _link_derived_keys(att, timeline)

    # 3. windows, after alignment
    _link_http_windows(att, http, tol_ns, res_ns)
    _link_tool_windows(att, aligned, tol_ns, res_ns)
    _bundle_resends(att, http, tol_ns, res_ns)

    # An attempt linked to an HTTP span it alone used takes the span's finer-grained start.
    solo = att["http_span_id"].notna() & ~att["http_span_id"].duplicated(keep=False)
    if solo.any():
        pos = _span_positions(http, att.loc[solo, "http_span_id"])
        att.loc[solo, "at"] = pd.Series(http["at"].array.take(pos, allow_fill=True),
                                        index=att.index[solo])
        att.loc[solo, "time_basis"] = "http_span"
    att["at"] = pd.to_datetime(att["at"], utc=True)
    _fill_threads(att, aligned)
    # every text column back to None for missing: the steps above copy values in from frames
    # that say pd.NA, and a comparison with pd.NA has no truth value
    att = normalize(att)
    return sort_by_time_and_id(att), aligned, offsets


def _no_counts(index: pd.Index) -> pd.Series:
    """An Int64 column of nothing but nulls (made without a Python list of pd.NA)."""
    n = len(index)
    return pd.Series(pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)),
                     index=index)


def link_agent_side(timeline: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame,
                                                     list[ClockOffset]]:
    """Without provider records: (the executions the agent's side shows, `agent_attempts`,
    with their links; the timeline with at_aligned; the span hosts' and checkpoints' clock
    offsets). The attempts come linked from the spans and checkpoints they were counted
    from; there is no provider clock to align."""
    none = pd.DataFrame({"at_raw": pd.Series([], dtype="datetime64[ns, UTC]"),
                         "initiator": pd.Series([], dtype=object)})
    aligned, offsets, _ = align(timeline, none, pd.DataFrame(columns=HTTP_COLS))
    # normalized (`normalize`) and sorted by time and id; the two steps below write text
    # values and a flag, never a time, an attempt id or a missing value: it stays so
    att = agent_attempts(aligned)
    _link_derived_keys(att, timeline)
    _fill_threads(att, aligned)
    return att, aligned, offsets


def _span_positions(http: pd.DataFrame, span_ids: pd.Series) -> np.ndarray:
    """Each id's row in `http` (its first, if a span shows twice; -1: none), found by position:
    label lookups on a text index of 100,000 ids cost far more."""
    return positions(http["span_id"], span_ids)


def _span_rows(http: pd.DataFrame, span_ids: pd.Series) -> pd.DataFrame:
    """The rows of `http` with these span ids, in their order; each must be one of its spans."""
    pos = _span_positions(http, span_ids)
    if (pos < 0).any():
        raise KeyError("a linked span id is not among the HTTP spans")
    return http.iloc[pos]


def _tolerance(offsets: list[ClockOffset], most: float) -> float:
    """How far outside a window an attempt may fall: the uncertainty of the provider's offset
    (half the range its evidence allows), at least half a second, at most `most`."""
    provider = [o for o in offsets if o.source == "provider"]
    spread = 0.0
    if provider and provider[0].low is not None and provider[0].high is not None:
        spread = (provider[0].high - provider[0].low) / 2
    return min(max(0.5, spread), most)


def _apply_http(att: pd.DataFrame, matched: pd.DataFrame, http: pd.DataFrame, *,
                trusted: bool) -> None:
    """Record HTTP span links. The span's worker is taken only from a link that does not rest
    on timing alone (an id, or a span whose tool said what it charged): a worker is evidence of
    redelivery, and a guessed link must not make one up."""
    if matched.empty:
        return
    idx = matched.index
    pos = att.index.get_indexer(idx)
    _put(att, pos, "http_span_id", matched["span_id"].to_numpy())
    _put(att, pos, "http_parent", matched["parent_span_id"].astype(object).where(
        matched["parent_span_id"].notna(), None).to_numpy())
    _put(att, pos, "link", matched["link"].to_numpy(), only_missing=True)
    for col in ["resend_count", "proxy_attempt"]:
        att.loc[idx, col] = pd.array(matched[col].to_numpy(), dtype="Int64")
    sure = np.ones(len(matched), dtype=bool) if trusted else \
        matched["content"].astype(bool).to_numpy()
    _put(att, pos[sure], "worker", matched["worker"].to_numpy()[sure])
    _put(att, pos, "trace_id", matched["trace_id"].astype(object).where(
        matched["trace_id"].notna(), None).to_numpy())
    tool_span = matched["tool_span_id"].where(matched["tool_span_id"].notna(), None)
    _put(att, pos, "tool_span_id", tool_span.to_numpy())
    for col in ["tool_call_id", "thread_id"]:
        _put(att, pos, col, matched[col].to_numpy(), only_missing=True)
    if "idempotency_key" in http:
        # the key the client span saw on the wire, where the provider's records do not say
        # (stripe logs tail, events before 2017-05-25); a span found by time alone is one only
        # this attempt can have sent (`_link_http_windows`)
        seen = pd.Series(http["idempotency_key"].array.take(
            _span_positions(http, matched["span_id"]), allow_fill=True))
        fill = att["idempotency_key"].isna().to_numpy()[pos] & \
            ~att["key_recorded"].astype(bool).to_numpy()[pos] & seen.notna().to_numpy()
        _put(att, pos[fill], "idempotency_key", seen.to_numpy()[fill])


def _put(att: pd.DataFrame, pos: np.ndarray, col: str, values: np.ndarray, *,
         only_missing: bool = False) -> None:
    """`att.loc[rows, col] = values` by position, for a column of Python objects (all the link
    columns are): one array write instead of pandas' label indexing per call. With
    `only_missing`, a value is written only where the column has none."""
    if att[col].dtype != object:
        rows = att.index[pos]
        if only_missing:
            have = att.loc[rows, col]
            values = have.where(have.notna(), values).to_numpy()
        att.loc[rows, col] = values
        return
    column = att[col].to_numpy(dtype=object, copy=True)
    new = np.asarray(values, dtype=object)
    if only_missing:
        have = column[pos]
        missing = pd.isna(have)
        have[missing] = new[missing]
        new = have
    column[pos] = new
    att[col] = column


def _candidates(att: pd.DataFrame, need: pd.Series, windows: pd.DataFrame, tol_ns: int,
                res_ns: int = 0, *, on: tuple[str, ...] = CONTENT) -> pd.DataFrame:
    """(attempt index, window position) pairs: the attempt's time inside the window (within the
    tolerance; a provider time in whole seconds stands for its whole second), every field both
    know agreeing, never another thread or tool call than the attempt already has. Columns:
    `_attempt`, `_window`, `_t`, `_start`, `_known`."""
    # the provider's own flows are tied to a call by ids only, never by timing
    a = provider_content(att[need & att["initiator"].ne("automatic").fillna(True)])
    if a.empty or windows.empty:
        return pd.DataFrame(columns=["_attempt", "_window", "_t", "_start", "_known",
                                     "_inside"])
    t = ns(a["at"])
    starts = windows["start"].to_numpy(dtype="float64")
    ends = windows["end"].to_numpy(dtype="float64")
    # only times still on the provider's clock stand for a whole second
    res = np.where(a["time_basis"].to_numpy() == "provider", res_ns, 0) if "time_basis" in a \
        else np.zeros(len(a))
    qi, wj = stab(t, starts - res_ns, ends, tol_ns)
    keep = t[qi] + res[qi] >= starts[wj] - tol_ns
    qi, wj = qi[keep], wj[keep]
    if not len(qi):
        return pd.DataFrame(columns=["_attempt", "_window", "_t", "_start", "_known",
                                     "_inside"])
    left = a.iloc[qi].reset_index(names="_attempt")
    right = windows.iloc[wj].reset_index(drop=True)
    ok = agree(left, right, on)
    for col in ("thread_id", "tool_call_id"):
        if col in right:
            ok &= agree(left, right, (col,))
    # inside the window itself, not only within the tolerance around it
    inside = (t[qi] + res[qi] >= starts[wj]) & (t[qi] <= ends[wj])
    pairs = pd.DataFrame({"_attempt": left["_attempt"].to_numpy(), "_window": wj,
                          "_t": t[qi], "_start": starts[wj],
                          "_known": known(right, on), "_inside": inside,
                          "_mute": known(left, on) == 0})
    return pairs[ok]


def _link_http_windows(att: pd.DataFrame, http: pd.DataFrame, tol_ns: int,
                       res_ns: int) -> None:
    """Attempts without an HTTP span: the POST span that was open when the provider logged the
    request, one to one (each span takes its closest attempt, each attempt its closest span;
    an attempt whose span is someone else's is left for `_bundle_resends`)."""
    need = att["http_span_id"].isna()
    if not need.any() or http.empty:
        return
    post = http[http["method"].fillna("POST").str.upper() == "POST"]
    windows = post[[c for c in HTTP_COLS if c != "end"] + ["path"]].assign(
        start=ns(post["at"]), end=ns(post["end"].fillna(post["at"]))).reset_index(drop=True)
    windows = windows[~isin(windows["span_id"], att["http_span_id"].dropna())]
    pairs = _candidates(att, need, windows.reset_index(drop=True), tol_ns, res_ns,
                        on=(*CONTENT, "path"))
    if pairs.empty:
        return
    windows = windows.reset_index(drop=True)
    # the tool call a span belongs to (its own id, or its tool span's): the spans of one call
    # are one client's attempts, in the order it made them
    owner = windows["tool_call_id"].where(windows["tool_call_id"].notna(),
                                          windows["tool_span_id"])
    owner_codes, _ = pd.factorize(owner)
    pairs = pairs.assign(_owner=owner_codes[pairs["_window"].to_numpy()])
    # a span that says nothing of what it charged is taken only by an attempt it alone can
    # have sent, or among the spans of one tool call only: among several such spans of
    # different calls open at that moment, timing alone cannot choose, and a wrong span would
    # make up a fingerprint (one client request, or two)
    blind = ~windows["content"].to_numpy(dtype=bool)[pairs["_window"].to_numpy()]
    blind_pairs = pairs[blind]
    choices = blind_pairs.groupby("_attempt").agg(n=("_window", "size"),
                                                  owners=("_owner", "nunique"),
                                                  owner=("_owner", "min"))
    sure = choices.index[(choices["n"] == 1) | ((choices["owners"] == 1)
                                                & (choices["owner"] >= 0))]
    pairs = pairs[~blind | isin(pairs["_attempt"], sure).to_numpy()]
    # closest start first: the provider logs a request just after the client began sending it
    pairs = pairs.assign(_cost=np.abs(pairs["_t"] - pairs["_start"]) - 1e12 * pairs["_known"])
    chosen = _in_call_order(pairs)
    rest = pairs[~isin(pairs["_attempt"], chosen["_attempt"])
                 & ~isin(pairs["_window"], chosen["_window"])]
    pairs = pd.concat([chosen, one_to_one(rest.sort_values(["_cost", "_t"], kind="stable"))])
    matched = windows.iloc[pairs["_window"].to_numpy()].set_index(
        pd.Index(pairs["_attempt"].to_numpy()))
    _apply_http(att, matched.assign(link="http_span_window"), http, trusted=False)


def _ranks(pairs: pd.DataFrame, side: str, at: str) -> np.ndarray:
    """Each pair's `side` (attempt or window) ranked by its time among the pairs' (ties: by
    position; two requests in one whole second are still two)."""
    order = pairs.drop_duplicates(side).sort_values([at, side], kind="stable")[side]
    rank = pd.Series(np.arange(len(order)), index=order.to_numpy())
    return rank.loc[pairs[side].to_numpy()].to_numpy(dtype=np.intp)


def _in_call_order(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs of attempts whose every candidate span belongs to one tool call, matched to
    that call's spans one to one in time order (`ordered_match`): a provider time in whole
    seconds can fall in two sibling spans, the order of the requests cannot."""
    owned = pairs[pairs["_owner"] >= 0]
    owners = owned.groupby("_attempt")["_owner"].agg(["min", "max"])
    single = owners.index[owners["min"] == owners["max"]]
    owned = owned[isin(owned["_attempt"], single) & ~isin(
        owned["_attempt"], pairs.loc[pairs["_owner"] < 0, "_attempt"])]
    out = []
    for _, group in owned.groupby("_owner", sort=False):
        if group["_attempt"].nunique() < 2 and group["_window"].nunique() < 2:
            out.append(group)
            continue
        a_rank = _ranks(group, "_attempt", "_t")
        w_rank = _ranks(group, "_window", "_start")
        if a_rank.max() * w_rank.max() > 10_000:  # hostile: thousands of spans of one call
            out.append(one_to_one(group.sort_values(["_cost", "_t"], kind="stable")))
            continue
        out.append(group.iloc[ordered_match(a_rank, w_rank, group["_cost"].to_numpy())])
    if not out:
        return pairs.iloc[:0]
    return pd.concat(out)


def _bundle_resends(att: pd.DataFrame, http: pd.DataFrame, tol_ns: int, res_ns: int) -> None:
    """An attempt left without a client span, inside a span another attempt holds, and identical
    to it (the same key, or no key and the same effect and tool call): one client request that
    reached the provider twice, the fingerprint of a resend below the client."""
    need = att["http_span_id"].isna()
    if not need.any() or http.empty or att["http_span_id"].isna().all():
        return
    held = att[att["http_span_id"].notna()].drop_duplicates("http_span_id")
    spans = _span_rows(http, held["http_span_id"])
    windows = pd.DataFrame({
        "start": ns(spans["at"]), "end": ns(spans["end"].fillna(spans["at"])),
        "_holder": held.index.to_numpy(), "span_id": held["http_span_id"].to_numpy(),
    })
    pairs = _candidates(att, need, windows, tol_ns, res_ns, on=())
    if pairs.empty:
        return
    content = provider_content(att)
    mine = content.loc[pairs["_attempt"]].reset_index(drop=True)
    holder = content.loc[windows["_holder"].to_numpy()[pairs["_window"].to_numpy()]].reset_index(
        drop=True)
    same_key = same_values(mine["idempotency_key"], holder["idempotency_key"])
    no_keys = (mine["idempotency_key"].isna() & holder["idempotency_key"].isna()).to_numpy()
    same = agree(mine, holder, (*CONTENT, "tool_call_id", "thread_id")) & (
        known(mine) > 0) & (same_key | no_keys)
    pairs = pairs[same].sort_values("_t").drop_duplicates("_attempt")
    if pairs.empty:
        return
    span_ids = windows["span_id"].to_numpy()[pairs["_window"].to_numpy()]
    matched = _span_rows(http, pd.Series(span_ids, dtype=object)).reset_index(drop=True)
    matched.index = pd.Index(pairs["_attempt"].to_numpy())
    _apply_http(att, matched.assign(link="resend_in_span"), http, trusted=False)


def _link_derived_keys(att: pd.DataFrame, timeline: pd.DataFrame) -> None:
    """Keys equal to sha256(thread_id:tool_call_id)[:32] name their tool call outright."""
    att["key_derived"] = False
    keys = att["idempotency_key"]
    # only a key of 32 hex digits can be a derived one: without any, no hashing at all
    candidate = pd.Series(_length_32(keys.to_numpy(dtype=object)), index=keys.index)
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


def _length_32(keys: np.ndarray) -> np.ndarray:
    """Which keys are text 32 characters long (counted by Arrow when every key is text or
    None, by Python otherwise)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        lengths = pc.utf8_length(pa.array(keys, type=pa.large_string()))
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeError):
        return np.fromiter((isinstance(k, str) and len(k) == 32 for k in keys), dtype=bool,
                           count=len(keys))
    return np.asarray(pc.equal(lengths, 32).fill_null(False).to_numpy(zero_copy_only=False),
                      dtype=bool)


def _link_tool_windows(att: pd.DataFrame, aligned: pd.DataFrame, tol_ns: int,
                       res_ns: int) -> None:
    """Attempts still without a tool execution or tool call: the tool span, then the
    checkpointed tool call, that was open at that time and asked for the same effect; among
    several, the one that began last (a later call of the same customer opens after an earlier
    one that is still waiting on a slow answer)."""
    spans, calls = tool_windows(aligned)
    need = att["tool_span_id"].isna()
    if need.any() and not spans.empty:
        pairs = _pick(_candidates(att, need, spans, tol_ns, res_ns))
        if not pairs.empty:
            found = spans.iloc[pairs["_window"].to_numpy()].set_index(
                pd.Index(pairs["_attempt"].to_numpy()))
            idx = found.index
            att.loc[idx, "tool_span_id"] = found["span_id"].to_numpy()
            for col in ("worker", "trace_id"):
                have = att.loc[idx, col]
                att.loc[idx, col] = have.where(have.notna(), found[col].to_numpy())
            _fill(att, found, "tool_span_window")
    need = att["tool_call_id"].isna()
    if need.any() and not calls.empty:
        pairs = _pick(_candidates(att, need, calls, tol_ns, res_ns))
        if not pairs.empty:
            found = calls.iloc[pairs["_window"].to_numpy()].set_index(
                pd.Index(pairs["_attempt"].to_numpy()))
            _fill(att, found, "checkpoint_window")


def _pick(pairs: pd.DataFrame) -> pd.DataFrame:
    """One window per attempt: those that know something of the effect before those that know
    nothing (a window that knows nothing is taken only when it is the attempt's only one), then
    those the attempt falls inside of rather than only within the tolerance of, then the one
    that began last."""
    if pairs.empty:
        return pairs
    blind = pairs["_known"] == 0
    alone = ~pairs["_attempt"].duplicated(keep=False)
    pairs = pairs[~blind | alone]
    # an attempt that says nothing of its effect (a request only `stripe logs tail` names) is
    # placed by time alone: only where one window holds it, not among several
    if "_mute" in pairs:
        inside = pairs[pairs["_inside"]]
        only = inside.groupby("_attempt")["_window"].transform("size") == 1
        mute = pairs["_mute"].astype(bool)
        settled = set(inside.loc[only.to_numpy(), "_attempt"])
        pairs = pairs[~mute | (pairs["_inside"] & isin(pairs["_attempt"], settled))]
    return pairs.sort_values(["_known", "_inside", "_start"], ascending=False,
                             kind="stable").drop_duplicates("_attempt")


def _fill(att: pd.DataFrame, found: pd.DataFrame, how: str) -> None:
    idx = found.index
    for col in ("tool_call_id", "thread_id"):
        have = att.loc[idx, col]
        att.loc[idx, col] = have.where(have.notna(), found[col].to_numpy())
    links = att.loc[idx, "link"]
    att.loc[idx, "link"] = links.where(links.notna(), how)


def _fill_threads(att: pd.DataFrame, timeline: pd.DataFrame) -> None:
    """The thread of each attempt that knows its tool call but not its thread: the checkpoints
    (or spans) that hold that tool call id say it. Spans often carry no thread id, and the
    tool call id is then the only join to the checkpoints."""
    need = att["thread_id"].isna() & att["tool_call_id"].notna()
    if not need.any():
        return
    known = timeline.loc[timeline["tool_call_id"].notna() & timeline["thread_id"].notna(),
                         ["tool_call_id", "thread_id"]].drop_duplicates()
    # a tool call id named in two threads says nothing of either
    known = known[~known["tool_call_id"].duplicated(keep=False)]
    if known.empty:
        return
    thread_of = pd.Series(known["thread_id"].astype(object).to_numpy(),
                          index=known["tool_call_id"].astype(object).to_numpy())
    found = att.loc[need, "tool_call_id"].map(thread_of)
    found = found[found.notna()]
    att.loc[found.index, "thread_id"] = found.astype(object).to_numpy()


def trace_shape(att: pd.DataFrame, timeline: pd.DataFrame) -> None:
    """Each attempt's trace (`trace_id`, from its tool span, else its HTTP span) and whether that
    trace stands for one run of the agent (`run_trace`): only when the tool span hangs under
    another span (an agent, graph, chain or queue-consumer span). A tool span opened with no
    parent context (a LangChain callback handler with nothing around the graph run) is the
    root of a trace of its own: every execution is a new trace, so a different trace says
    nothing of a restart. An attempt known only by its HTTP span, whose tool span was not
    exported, takes the shape the evidence's other tool spans have."""
    att["run_trace"] = False
    if att.empty:
        return
    kind = timeline["kind"]
    is_tool, is_http = kind == Kind.TOOL_SPAN.value, kind == Kind.HTTP_SPAN.value
    if not (is_tool.any() or is_http.any()):
        return
    # the shape the evidence's tool spans usually have (for a client span whose tool span was
    # not exported), then only the spans these attempts name, and their parents
    usual = bool(timeline.loc[is_tool, "parent_span_id"].notna().mean() > 0.5) \
        if is_tool.any() else bool(timeline.loc[is_http, "parent_span_id"].notna().mean() > 0.5)
    named = pd.concat([att[c] for c in ("tool_span_id", "http_span_id", "http_parent")
                       if c in att]).dropna()
    rows = timeline.loc[(is_tool | is_http) & isin(timeline["span_id"], named),
                        ["span_id", "trace_id", "parent_span_id", "kind"]]
    tools = rows[rows["kind"] == Kind.TOOL_SPAN.value].drop_duplicates("span_id").set_index(
        "span_id")
    http = rows[rows["kind"] == Kind.HTTP_SPAN.value].drop_duplicates("span_id").set_index(
        "span_id")
    tool_nested = tools["parent_span_id"].notna()
    tool_id = att["tool_span_id"].where(isin(att["tool_span_id"], tools.index), None)
    http_id = att["http_span_id"].where(tool_id.isna() & isin(att["http_span_id"], http.index),
                                        None)
    by_tool, by_http = tool_id.notna(), http_id.notna()
    trace = pd.Series(None, index=att.index, dtype=object)
    trace[by_tool] = tool_id[by_tool].map(tools["trace_id"]).astype(object)
    nested = pd.Series(by_tool.to_numpy(dtype=bool) & tool_id.map(tool_nested).eq(True).to_numpy(
        dtype=bool, na_value=False), index=att.index)
    trace[by_http] = http_id[by_http].map(http["trace_id"]).astype(object)
    parent = http_id[by_http].map(http["parent_span_id"]).astype(object)
    # a client span of its own is a trace per request; one under a tool span takes that tool
    # span's shape; one whose tool span was not exported, the shape the others have
    under_tool = isin(parent, tools.index)
    nested[by_http] = np.where(parent.isna(), False, np.where(
        under_tool, parent.where(under_tool, None).map(tool_nested).eq(True),
        usual))
    att["trace_id"] = trace.where(trace.notna(), None)
    att["run_trace"] = nested.astype(bool)


def deliveries(att: pd.DataFrame, timeline: pd.DataFrame) -> None:
    """The queue delivery each attempt ran under (`delivery_count`, `delivery_span`), when the
    queue consumer's own span (`process_message <queue>`, with its receive count) holds the
    attempt's tool or HTTP span on the same worker: a consumer span lasts as long as the work
    it started for that message. Taken only when exactly one such span holds it (a worker
    running several messages at once leaves it open)."""
    att["delivery_count"] = _no_counts(att.index)
    att["delivery_span"] = None
    kind = timeline["kind"]
    receives = timeline.loc[(kind == Kind.QUEUE_RECEIVE.value) & timeline["end"].notna()
                            & timeline["span_id"].notna() & timeline["worker"].notna(),
                            ["span_id", "at_aligned", "at", "end", "worker", "delivery_count"]]
    if receives.empty or att.empty:
        return
    spans = timeline.loc[kind.isin([Kind.TOOL_SPAN.value, Kind.HTTP_SPAN.value]),
                         ["span_id", "at_aligned", "worker"]].drop_duplicates("span_id")
    start_of = pd.Series(spans["at_aligned"].to_numpy(), index=spans["span_id"].to_numpy())
    worker_of = pd.Series(spans["worker"].astype(object).to_numpy(),
                          index=spans["span_id"].to_numpy())
    span = att["tool_span_id"].where(att["tool_span_id"].notna(), att["http_span_id"])
    has = span.notna() & isin(span, spans["span_id"])
    if not has.any():
        return
    t = ns(pd.to_datetime(span[has].map(start_of), utc=True))
    worker = span[has].map(worker_of)
    r_start = ns(receives["at_aligned"])
    r_end = ns(receives["end"] + (receives["at_aligned"] - receives["at"]))
    q, r = stab(t, r_start, r_end, 0.0)
    same = same_values(worker.iloc[q], receives["worker"].iloc[r])
    q, r = q[same], r[same]
    if not len(q):
        return
    alone = pd.Series(q).map(pd.Series(q).value_counts()).to_numpy() == 1
    q, r = q[alone], r[alone]
    rows = att.index[has][q]
    att.loc[rows, "delivery_count"] = pd.array(
        receives["delivery_count"].to_numpy()[r], dtype="Int64")
    att.loc[rows, "delivery_span"] = receives["span_id"].astype(object).to_numpy()[r]
