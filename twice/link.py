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

from twice.attempts import infer_replays, moves_money, normalize
from twice.clocks import NS, ClockOffset, align, span_end, stab
from twice.timeline import Kind, derived_key, isin

__all__ = ["NS", "ClockOffset", "agree", "link"]

_CONTENT = ("subject", "amount", "currency")


def _frame(timeline: pd.DataFrame, kind: Kind, columns: list[str]) -> pd.DataFrame:
    """The rows of one kind, with only the columns a step reads (a timeline has 38)."""
    return timeline.loc[timeline["kind"] == kind.value, columns]


def _ns(series: pd.Series) -> np.ndarray:
    return series.astype("int64").to_numpy().astype("float64")


def _texts(col: pd.Series) -> np.ndarray:
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


def agree(left: pd.DataFrame, right: pd.DataFrame, columns: tuple[str, ...] = _CONTENT
          ) -> np.ndarray:
    """Row by row: every column both sides know holds the same value (pairs aligned by position).
    Also how many columns were known on both sides, to rank the matches."""
    ok = np.ones(len(left), dtype=bool)
    for col in columns:
        if col not in left or col not in right:
            continue
        x, y = _texts(left[col]), _texts(right[col])
        both = (x != None) & (y != None)  # noqa: E711 - element-wise over object arrays
        ok &= ~both | (x == y)
    return ok


NO_CUSTOMER = ""  # a subject the provider knows to be empty, for `agree`


def provider_content(att: pd.DataFrame) -> pd.DataFrame:
    """Attempts with what the provider knows of their effect: a payment object in Stripe's
    events always carries its `customer`, so a null there is a payment without a customer (a
    guest checkout), which agrees with no tool call that named one; elsewhere null stays
    unknown."""
    if "customer_known" not in att:
        return att
    empty = att["customer_known"].fillna(False).astype(bool) & att["subject"].isna()
    if not empty.any():
        return att
    return att.assign(subject=att["subject"].where(~empty, NO_CUSTOMER))


def _known(frame: pd.DataFrame, columns: tuple[str, ...] = _CONTENT) -> np.ndarray:
    """How many of `columns` each row knows."""
    return sum((frame[c].notna().to_numpy() for c in columns if c in frame),
               np.zeros(len(frame), dtype=int))


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


_HTTP_COLS = ["span_id", "at", "end", "parent_span_id", "tool_span_id", "tool_call_id",
              "thread_id", "resend_count", "proxy_attempt", "worker", "subject", "amount",
              "currency", "content", "trace_id"]


def _http_spans(timeline: pd.DataFrame) -> pd.DataFrame:
    """HTTP client spans, with the tool call and the effect fields of the tool span above them
    (when the instrumentation nests them)."""
    http = _frame(timeline, Kind.HTTP_SPAN, [
        "span_id", "at", "at_aligned", "end", "parent_span_id", "tool_call_id", "thread_id",
        "resend_count", "proxy_attempt", "worker", "request_id", "idempotency_key", "method",
        "path", "trace_id", "status", "outcome"])
    # on the reference clock (a host's clock may run off the others')
    http = http.assign(end=span_end(http).where(http["end"].notna()), at=http["at_aligned"])
    http = http.drop(columns="at_aligned")
    tools = _frame(timeline, Kind.TOOL_SPAN,
                   ["span_id", "subject", "amount", "currency", "tool_call_id", "thread_id"])
    http = http.merge(tools.rename(columns=lambda c: f"tool_{c}"),
                      left_on="parent_span_id", right_on="tool_span_id", how="left")
    http = http.assign(
        tool_call_id=http["tool_call_id"].fillna(http["tool_tool_call_id"]),
        thread_id=http["thread_id"].fillna(http["tool_thread_id"]),
        subject=http["tool_subject"], amount=http["tool_amount"],
        currency=http["tool_currency"],
    )
    http["content"] = _known(http) > 0
    # a span's trace says which run it belongs to only when it is nested in that run (HTTP
    # client spans made outside the agent's context are each a trace of their own)
    http["trace_id"] = http["trace_id"].where(http["parent_span_id"].notna())
    return http


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

    http = _http_spans(timeline)

    # 1. strong links on identifiers both sides recorded
    strong = pd.DataFrame(columns=_HTTP_COLS)
    if not att.empty and not http.empty:
        by_req = _match_by(att, http[[*_HTTP_COLS, "request_id"]], "request_id")
        rest = att.drop(index=by_req.index, errors="ignore")
        by_key = _match_by(rest, http[[*_HTTP_COLS, "idempotency_key"]], "idempotency_key")
        strong = pd.concat([by_req.assign(link="request_id"),
                            by_key.assign(link="idempotency_key")])

    # 2. the clocks: every source's offset from the evidence as a whole
    aligned, offsets, provider_offset = align(timeline, att, strong)
    att["at"] = att["at_raw"] - pd.to_timedelta(provider_offset, unit="s")
    tol_ns = int(_tolerance(offsets, tolerance_s) * NS)
    res_ns = NS if _whole_seconds(att["at_raw"]) else 0

    http = _http_spans(aligned)  # on the reference clock now
    att, strong = _requests_only_spans_name(att, http, strong, provider_offset)
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


def _requests_only_spans_name(att: pd.DataFrame, http: pd.DataFrame, strong: pd.DataFrame,
                              provider_offset: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Provider requests known only from the client span that captured their request id (an
    idempotent replay emits no event, and events are often the only export): attempts too,
    on the span's time, answered as the span says (replayed, refused or unknown)."""
    if att.empty or "request_id" not in http:
        return att, strong
    named = http[http["request_id"].notna() & ~isin(http["request_id"], att["request_id"])
                 & (http["method"].fillna("POST").str.upper() == "POST")
                 & http["path"].map(moves_money).astype(bool)].drop_duplicates("request_id")
    if named.empty:
        return att, strong
    status = pd.to_numeric(named["status"], errors="coerce")
    refused = status.ge(400).fillna(False).astype(bool).to_numpy()
    replayed = (named["outcome"] == "replayed").fillna(False).astype(bool).to_numpy()
    effect = np.where(replayed, "replayed", np.where(refused, "failed", "unknown"))
    at = pd.to_datetime(named["at"], utc=True)
    extra = pd.DataFrame({
        "attempt_id": named["request_id"].to_numpy(), "request_id": named["request_id"].to_numpy(),
        "at": at.to_numpy(), "at_raw": (at + pd.to_timedelta(provider_offset, unit="s")).to_numpy(),
        "idempotency_key": named["idempotency_key"].to_numpy(), "method": "POST",
        "path": named["path"].to_numpy(), "status": status.to_numpy(), "effect": effect,
        "source": "spans", "key_recorded": False, "initiator": "api",
        "subject": named["subject"].to_numpy(), "amount": named["amount"].to_numpy(),
        "currency": named["currency"].to_numpy(), "time_basis": "http_span",
    })
    extra = normalize(extra.reindex(columns=att.columns))
    extra["at"] = pd.to_datetime(extra["at"], utc=True)
    extra.index = pd.RangeIndex(len(att), len(att) + len(extra))
    out = pd.concat([att, extra])
    matched = named.assign(link="request_id").set_index(extra.index)
    infer_replays(out)
    return out, pd.concat([strong, matched[[c for c in matched.columns if c in _HTTP_COLS]
                                           + ["link"]]])


def _tolerance(offsets: list[ClockOffset], most: float) -> float:
    """How far outside a window an attempt may fall: the uncertainty of the provider's offset
    (half the range its evidence allows), at least half a second, at most `most`."""
    provider = [o for o in offsets if o.source == "provider"]
    spread = 0.0
    if provider and provider[0].low is not None and provider[0].high is not None:
        spread = (provider[0].high - provider[0].low) / 2
    return min(max(0.5, spread), most)


def _whole_seconds(times: pd.Series) -> bool:
    ns = times.dropna().astype("int64")
    return bool(len(ns)) and bool((ns % NS == 0).all())


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
                res_ns: int = 0, *, on: tuple[str, ...] = _CONTENT) -> pd.DataFrame:
    """(attempt index, window position) pairs: the attempt's time inside the window (within the
    tolerance; a provider time in whole seconds stands for its whole second), every field both
    know agreeing, never another thread or tool call than the attempt already has. Columns:
    `_attempt`, `_window`, `_t`, `_start`, `_known`."""
    # the provider's own flows are tied to a call by ids only, never by timing
    a = provider_content(att[need & att["initiator"].ne("automatic").fillna(True)])
    if a.empty or windows.empty:
        return pd.DataFrame(columns=["_attempt", "_window", "_t", "_start", "_known",
                                     "_inside"])
    t = _ns(a["at"])
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
                          "_known": _known(right, on), "_inside": inside,
                          "_mute": _known(left, on) == 0})
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
    windows = post[[c for c in _HTTP_COLS if c != "end"] + ["path"]].assign(
        start=_ns(post["at"]), end=_ns(post["end"].fillna(post["at"]))).reset_index(drop=True)
    taken = set(att["http_span_id"].dropna())
    windows = windows[~isin(windows["span_id"], taken)]
    pairs = _candidates(att, need, windows.reset_index(drop=True), tol_ns, res_ns,
                        on=(*_CONTENT, "path"))
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
    pairs = _one_to_one(pairs.sort_values(["_cost", "_t"], kind="stable"))
    matched = windows.iloc[pairs["_window"].to_numpy()].set_index(
        pd.Index(pairs["_attempt"].to_numpy()))
    _apply_http(att, matched.assign(link="http_span_window"), http, trusted=False)


def _one_to_one(pairs: pd.DataFrame) -> pd.DataFrame:
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
        "start": _ns(spans["at"]), "end": _ns(spans["end"].fillna(spans["at"])),
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
    same = agree(mine, holder, (*_CONTENT, "tool_call_id", "thread_id")) & (
        _known(mine) > 0) & (same_key.to_numpy() | no_keys.to_numpy())
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


def tool_windows(aligned: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(tool span windows, checkpointed tool call windows) on the reference clock, with the
    effect fields the tool was asked for. A tool call's window runs from the checkpoint that
    holds it to the one that holds its result (open while no result was recorded)."""
    tools = _frame(aligned, Kind.TOOL_SPAN, ["at", "at_aligned", "end", *_CONTENT,
                                             "tool_call_id", "thread_id", "span_id", "worker",
                                             "trace_id"])
    shift = _ns(tools["at_aligned"]) - _ns(tools["at"])
    spans = tools.assign(start=_ns(tools["at_aligned"]),
                         end=_ns(tools["end"].fillna(tools["at"])) + shift)
    calls = _frame(aligned, Kind.TOOL_CALL,
                   ["at_aligned", *_CONTENT, "tool_call_id", "thread_id"])
    results = _frame(aligned, Kind.TOOL_RESULT, ["tool_call_id", "at_aligned"]
                     ).drop_duplicates("tool_call_id")
    calls = calls.drop_duplicates("tool_call_id").merge(
        results, on="tool_call_id", how="left", suffixes=("", "_result"))
    result_at = calls["at_aligned_result"]
    calls = calls.assign(start=_ns(calls["at_aligned"]),
                         end=np.where(result_at.notna(), _ns(result_at.fillna(
                             calls["at_aligned"])), np.inf))
    return spans.reset_index(drop=True), calls.reset_index(drop=True)


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
