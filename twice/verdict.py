"""Name the layer behind each extra attempt, from its fingerprints first and its gap second."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from twice.grouping import FAILED_OUTCOMES
from twice.layers import FIXES, TYPICAL_BANDS, Band, Bands, Layer
from twice.timeline import Kind

Attempt = Mapping[str, Any]  # one attempt as a plain record (a row of Analysis.attempts)


@dataclass(frozen=True)
class Finding:
    code: str
    detail: str
    fix: str


@dataclass(frozen=True)
class Duplicate:
    first: str
    second: str
    gap_seconds: float
    band: Band
    layer: Layer
    confidence: float
    protected: bool
    evidence: tuple[str, ...]
    fix: str


@dataclass
class Context:
    """Agent-side evidence the verdicts read, indexed once per analysis."""

    results: pd.DataFrame  # tool results by tool_call_id (outcome, detail, at_aligned)
    receives: pd.DataFrame  # queue receives (thread_id, delivery_count, at_aligned, worker)
    checkpoints: pd.DataFrame  # checkpoints (thread_id, at_aligned, worker)
    tool_spans: pd.DataFrame  # tool spans by tool_call_id (span_id, worker, at_aligned, end)
    spans_loaded: bool
    bands: Bands = field(default_factory=Bands)
    # row positions per thread_id, built on first use: a verdict looks at one thread's rows
    _thread_rows: dict[str, dict[Any, Any]] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def build(cls, timeline: pd.DataFrame, bands: Bands) -> Context:
        kind = timeline["kind"]
        results = timeline.loc[kind == Kind.TOOL_RESULT.value,
                               ["tool_call_id", "outcome", "detail", "at_aligned"]]
        return cls(
            results=results.drop_duplicates("tool_call_id").set_index("tool_call_id"),
            receives=timeline.loc[kind == Kind.QUEUE_RECEIVE.value,
                                  ["thread_id", "message_id", "delivery_count", "at_aligned",
                                   "worker"]],
            checkpoints=timeline.loc[kind == Kind.CHECKPOINT.value,
                                     ["thread_id", "at_aligned", "worker", "step"]],
            tool_spans=timeline.loc[(kind == Kind.TOOL_SPAN.value)
                                    & timeline["tool_call_id"].notna(),
                                    ["span_id", "tool_call_id", "worker", "at_aligned", "end"]]
            .set_index("tool_call_id").sort_index(),
            spans_loaded=bool((timeline["source"] == "spans").any()),
            bands=bands,
        )

    def spans_of(self, tool_call_id: str) -> pd.DataFrame:
        if tool_call_id not in self.tool_spans.index:
            return self.tool_spans.iloc[:0]
        return self.tool_spans.loc[[tool_call_id]]

    def of_thread(self, table: str, thread: str) -> pd.DataFrame:
        """The rows of `receives` or `checkpoints` for one thread, in their order."""
        frame: pd.DataFrame = getattr(self, table)
        if table not in self._thread_rows:
            self._thread_rows[table] = frame.groupby("thread_id", sort=False).indices
        rows = self._thread_rows[table].get(thread)
        return frame.iloc[rows] if rows is not None else frame.iloc[:0]

    def result(self, tool_call_id: object) -> pd.Series | None:
        if not isinstance(tool_call_id, str) or tool_call_id not in self.results.index:
            return None
        return self.results.loc[tool_call_id]  # type: ignore[return-value]


def _s(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _i(value: object) -> int | None:
    return None if value is None or pd.isna(value) else int(value)  # type: ignore[call-overload]


def fmt_gap(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _redelivery(ctx: Context, thread: str | None, a: Attempt, b: Attempt) -> str | None:
    """Evidence that a queue handed this thread's run out again between the two attempts."""
    if thread is None or ctx.receives.empty:
        return None
    r = ctx.of_thread("receives", thread)
    r = r[r["delivery_count"].fillna(0) > 1]
    r = r[r["at_aligned"] <= b["at"] + pd.Timedelta(seconds=5)]
    if r.empty:
        return None
    top = r.sort_values("delivery_count").iloc[-1]
    where = f" to {top['worker']}" if _s(top["worker"]) else ""
    return (f"the queue delivered thread {thread}'s run {int(top['delivery_count'])} times "
            f"(delivery count {int(top['delivery_count'])}{where} at "
            f"{top['at_aligned']:%H:%M:%S}): conclusive for redelivery")


def _workers(ctx: Context, thread: str | None, a: Attempt, b: Attempt
             ) -> tuple[str, str] | None:
    """Workers that ran the two attempts, from spans or from the checkpoints around them."""
    wa, wb = _s(a.get("worker")), _s(b.get("worker"))
    if (wa is None or wb is None) and thread is not None and not ctx.checkpoints.empty:
        ck = ctx.of_thread("checkpoints", thread)
        ck = ck[ck["worker"].notna()]
        before = ck[ck["at_aligned"] <= a["at"]]
        after = ck[ck["at_aligned"] >= b["at"]]
        if wa is None and len(before):
            wa = str(before.sort_values("at_aligned").iloc[-1]["worker"])
        if wb is None and len(after):
            wb = str(after.sort_values("at_aligned").iloc[0]["worker"])
    if wa and wb and wa != wb:
        return wa, wb
    return None


def decide(a: Attempt, b: Attempt, gap: float, ctx: Context
           ) -> tuple[Layer, float, list[str]]:
    """The layer that produced attempt `b` after attempt `a`, a base confidence, and why."""
    ev: list[str] = []
    tca, tcb = _s(a["tool_call_id"]), _s(b["tool_call_id"])
    ka, kb = _s(a["idempotency_key"]), _s(b["idempotency_key"])
    thread = _s(b["thread_id"]) or _s(a["thread_id"])

    if tca and tcb and tca != tcb:
        ev.append(f"different tool_call_ids {tca} then {tcb}"
                  + (f" in thread {thread}" if thread else "")
                  + ": the model asked for the call twice; no retry fired below it")
        conf = 0.85
        r = ctx.result(tca)
        if r is not None and r["outcome"] in FAILED_OUTCOMES:
            detail = _s(r["detail"]) or ""
            ev.append(f"the tool result for {tca} told the model '{r['outcome']}'"
                      + (f": \"{detail[:120]}\"" if detail else ""))
            conf = 0.95
        elif r is None:
            ev.append(f"no tool result for {tca} was recorded before the model asked again")
        return Layer.MODEL_REEMISSION, conf, ev

    same_call = bool(tca and tca == tcb)
    if same_call:
        ev.append(f"both attempts carry tool_call_id {tca}: the model asked once")
    http_a, http_b = _s(a["http_span_id"]), _s(b["http_span_id"])
    proxy = max(_i(a["proxy_attempt"]) or 0, _i(b["proxy_attempt"]) or 0)
    if proxy >= 2:
        ev.append(f"a proxy stamped x-envoy-attempt-count = {proxy}: it resent the request")
        return Layer.GATEWAY_RETRY, 0.95, ev
    if http_a and http_a == http_b:
        ev.append(f"one client HTTP span ({http_a}) but two provider requests: something "
                  "between the client and the provider resent it")
        if ka and ka == kb:
            ev.append("identical idempotency key on both requests (the same bytes, resent)")
        return Layer.GATEWAY_RETRY, 0.9, ev
    resend = _i(b["resend_count"]) or 0
    tool_a, tool_b = _s(a["tool_span_id"]), _s(b["tool_span_id"])
    if resend >= 1 or (http_a and http_b and tool_a and tool_a == tool_b):
        if resend >= 1:
            ev.append(f"the second HTTP client span has http.request.resend_count = {resend}")
        if tool_a and tool_a == tool_b:
            ev.append(f"two HTTP attempts under one tool span ({tool_a}): the tool ran once")
        if ka and ka == kb:
            ev.append("identical idempotency key on both attempts")
        elif ka is None and kb is None:
            ev.append("no idempotency key on the wire, so the provider could not deduplicate")
        return Layer.SDK_RETRY, 0.95 if resend >= 1 else 0.85, ev

    redelivered = _redelivery(ctx, thread, a, b)
    workers = _workers(ctx, thread, a, b)
    keys_differ = bool(ka and kb and ka != kb)
    tools_differ = bool(tool_a and tool_b and tool_a != tool_b)
    if keys_differ:
        ev.append("a different idempotency key on each attempt: the key was made inside the "
                  "tool, so the whole tool ran again")
    if tools_differ:
        ev.append(f"two tool spans ({tool_a}, {tool_b}): the tool itself executed twice")
    above_sdk = bool(same_call or keys_differ or tools_differ or redelivered or workers)
    if ka and ka == kb and not a.get("key_derived") and not tools_differ:
        above_sdk = False  # the same random key twice: the same request was resent below the tool
        ev.append("identical idempotency key on both attempts: the same request was resent")

    if above_sdk:
        if redelivered:
            ev.append(redelivered)
            return Layer.REDELIVERY, 0.95, ev
        if workers:
            ev.append(f"the attempts ran on different workers ({workers[0]}, then {workers[1]}): "
                      "the run was picked up again")
            return Layer.REDELIVERY, 0.8, ev
        band = ctx.bands.classify(gap)
        if band in (Band.MINUTES, Band.BEYOND_RETENTION):
            ev.append(f"{fmt_gap(gap)} with nothing recorded in between: the work stopped and "
                      "started again (no queue or worker evidence to confirm)")
            return Layer.REDELIVERY, 0.6, ev
        ev.append("no queue redelivery or change of worker recorded, and the repeat came within "
                  "one run's time: the framework retried the step")
        return Layer.STEP_RETRY, 0.8 if (same_call and (keys_differ or tools_differ)) else 0.65, ev

    if ka and ka == kb:
        ev.append("no client span to tell an SDK retry from a proxy resend")
        return Layer.SDK_RETRY, 0.55, ev
    # Nothing but timing: the band's usual suspect, with low confidence.
    band = ctx.bands.classify(gap)
    guess = {Band.SECONDS: Layer.SDK_RETRY, Band.TENS_OF_SECONDS: Layer.STEP_RETRY,
             Band.MINUTES: Layer.REDELIVERY, Band.BEYOND_RETENTION: Layer.REDELIVERY}[band]
    ev.append("no identifier links these requests to the agent (no tool_call_id, span or shared "
              f"key): judged from the gap alone, the usual cause in the {band} band")
    return guess, 0.35, ev


def judge(a: Attempt, b: Attempt, ctx: Context) -> Duplicate:
    gap = max((b["at"] - a["at"]).total_seconds(), 0.0)
    band = ctx.bands.classify(gap)
    layer, conf, ev = decide(a, b, gap, ctx)
    if not any(_s(x[c]) for x in (a, b) for c in ("tool_call_id", "http_span_id")):
        conf = min(conf, 0.45)
        ev.append("nothing on the agent's side (tool call, span) was linked to these requests: "
                  "two separate intents cannot be ruled out")
    typical = TYPICAL_BANDS[layer]
    if band in typical:
        ev.append(f"gap {fmt_gap(gap)} lands in the {band} band, where {layer} usually lands")
    else:
        conf -= 0.2
        ev.append(f"gap {fmt_gap(gap)} lands in the {band} band, unusual for {layer} (usually "
                  f"{' / '.join(sorted(typical))}); the fingerprints above outweigh the timing")
    if a["effect"] == "created" and b["effect"] == "created" and band == Band.BEYOND_RETENTION \
            and _s(a["idempotency_key"]) and a["idempotency_key"] == b["idempotency_key"]:
        ev.append("the same key was sent after the provider's key retention: it had expired")
    protected = b["effect"] in ("replayed", "failed")
    if protected:
        ev.append(f"the provider shows the second attempt as {b['effect']}: no second effect")
    return Duplicate(
        first=str(a["attempt_id"]), second=str(b["attempt_id"]), gap_seconds=round(gap, 3),
        band=band, layer=layer, confidence=round(min(max(conf, 0.05), 0.99), 2),
        protected=bool(protected), evidence=tuple(ev), fix=FIXES[layer],
    )
