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

from twice.attempts import normalize, requests_named_by_spans
from twice.clocks import ClockOffset, align
from twice.matching import CONTENT, NS, agree, known, ns, one_to_one, stab, whole_seconds
from twice.timeline import derived_key, isin
from twice.windows import HTTP_COLS, http_spans, provider_content, tool_windows

__all__ = ["ClockOffset", "link"]


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
    for col in ["http_span_id", "tool_span_id", "link", "worker", "trace_id"]:
        att[col] = pd.Series([None] * len(att), index=att.index, dtype=object)
    att["resend_count"] = pd.Series([pd.NA] * len(att), index=att.index, dtype="Int64")
    att["proxy_attempt"] = pd.Series([pd.NA] * len(att), index=att.index, dtype="Int64")
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
        strong = pd.concat([by_req.assign(link="request_id"),
                            by_key.assign(link="idempotency_key")])

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
    # every text column back to None for missing: the steps above copy values in from frames
    # that say pd.NA, and a comparison with pd.NA has no truth value
    att = normalize(att)
    return att.sort_values(["at", "attempt_id"], ignore_index=True), aligned, offsets


def _span_positions(http: pd.DataFrame, span_ids: pd.Series) -> np.ndarray:
    """Each id's row in `http` (its first, if a span shows twice; -1: none), found by position:
    label lookups on a text index of 100,000 ids cost far more."""
    ids = http["span_id"].astype(object).to_numpy()
    first = np.flatnonzero(~pd.Series(ids).duplicated().to_numpy())
    where = pd.Index(ids[first]).get_indexer(span_ids.astype(object).to_numpy())
    out = np.full(len(where), -1, dtype=np.intp)
    out[where >= 0] = first[where[where >= 0]]
    return out


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
    att.loc[idx, "http_span_id"] = matched["span_id"].to_numpy()
    links = att.loc[idx, "link"]
    att.loc[idx, "link"] = links.where(links.notna(), matched["link"].to_numpy())
    for col in ["resend_count", "proxy_attempt"]:
        att.loc[idx, col] = pd.array(matched[col].to_numpy(), dtype="Int64")
    sure = np.ones(len(matched), dtype=bool) if trusted else \
        matched["content"].astype(bool).to_numpy()
    att.loc[idx[sure], "worker"] = matched["worker"].to_numpy()[sure]
    att.loc[idx, "trace_id"] = matched["trace_id"].astype(object).where(
        matched["trace_id"].notna(), None).to_numpy()
    tool_span = matched["tool_span_id"].where(matched["tool_span_id"].notna(), None)
    att.loc[idx, "tool_span_id"] = tool_span.to_numpy()
    for col in ["tool_call_id", "thread_id"]:
        have = att.loc[idx, col]
        att.loc[idx, col] = have.where(have.notna(), matched[col].to_numpy())
    if "idempotency_key" in http:
        # the key the client span saw on the wire, where the provider's records do not say
        # (stripe logs tail, events before 2017-05-25); a span found by time alone is one only
        # this attempt can have sent (`_link_http_windows`)
        seen = pd.Series(http["idempotency_key"].array.take(
            _span_positions(http, matched["span_id"]), allow_fill=True))
        fill = att.loc[idx, "idempotency_key"].isna().to_numpy() & \
            ~att.loc[idx, "key_recorded"].astype(bool).to_numpy() & seen.notna().to_numpy()
        att.loc[idx[fill], "idempotency_key"] = seen.to_numpy()[fill]


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
    taken = set(att["http_span_id"].dropna())
    windows = windows[~isin(windows["span_id"], taken)]
    pairs = _candidates(att, need, windows.reset_index(drop=True), tol_ns, res_ns,
                        on=(*CONTENT, "path"))
    if pairs.empty:
        return
    windows = windows.reset_index(drop=True)
    # a span that says nothing of what it charged is taken only by an attempt it alone can
    # have sent: among several such spans open at that moment, timing alone cannot choose,
    # and a wrong span would make up a fingerprint (one client request, or two)
    blind = ~windows["content"].to_numpy(dtype=bool)[pairs["_window"].to_numpy()]
    blind_choices = pd.Series(blind).groupby(pairs["_attempt"].to_numpy()).transform("sum")
    pairs = pairs[~blind | (blind_choices.to_numpy() == 1)]
    # closest start first: the provider logs a request just after the client began sending it
    pairs = pairs.assign(_cost=np.abs(pairs["_t"] - pairs["_start"]) - 1e12 * pairs["_known"])
    pairs = one_to_one(pairs.sort_values(["_cost", "_t"], kind="stable"))
    matched = windows.iloc[pairs["_window"].to_numpy()].set_index(
        pd.Index(pairs["_attempt"].to_numpy()))
    _apply_http(att, matched.assign(link="http_span_window"), http, trusted=False)


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
    same_key = (mine["idempotency_key"].notna() & (mine["idempotency_key"].to_numpy()
                                                   == holder["idempotency_key"].to_numpy()))
    no_keys = mine["idempotency_key"].isna() & holder["idempotency_key"].isna()
    same = agree(mine, holder, (*CONTENT, "tool_call_id", "thread_id")) & (
        known(mine) > 0) & (same_key.to_numpy() | no_keys.to_numpy())
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
