"""Name the layer behind each extra attempt, from its fingerprints first and its gap second.

The verdict is an ordered list of small named rules (`RULES`). Each looks at the facts about
two consecutive attempts of one logical call (`Pair`) and either recognises a layer, with its
confidence, the evidence that picked it and the other layers the evidence cannot rule out, or
passes. The first rule that answers decides; the last one always answers from timing alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from twice.grouping import FAILED_OUTCOMES
from twice.layers import LAYERS, Band, Bands, Layer, usual_suspects
from twice.timeline import Kind

Attempt = Mapping[str, Any]  # one attempt as a plain record (a row of Analysis.attempts)

# A step retry's gap is at most a client timeout plus LangGraph's longest backoff (128 s):
# below this, a minutes-long gap can still be the framework's retry after a slow timeout.
STEP_RETRY_REACH_S = 600.0
# A step retry waits for a client timeout and the framework's backoff (LangGraph: 0.5 s at
# least) first; two requests closer than this were resent below the tool.
BELOW_TOOL_S = 2.0


@dataclass(frozen=True)
class Alternative:
    """A layer the evidence cannot rule out, and why."""

    layer: Layer
    why: str

    def describe(self) -> str:
        """The alternative in words, as every view shows it (plain words from LAYERS)."""
        return f"could also be: {self.layer.value}, {LAYERS[self.layer].plain} — {self.why}"


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
    alternatives: tuple[Alternative, ...] = ()


@dataclass
class Context:
    """Agent-side evidence the verdicts read, indexed once per analysis."""

    results: pd.DataFrame  # tool results by tool_call_id (outcome, detail, at_aligned)
    receives: pd.DataFrame  # queue receives (thread_id, delivery_count, at_aligned, worker)
    checkpoints: pd.DataFrame  # checkpoints (thread_id, at_aligned, worker, step, name)
    tool_spans: pd.DataFrame  # tool spans by tool_call_id (span_id, worker, at_aligned, end)
    spans_loaded: bool
    bands: Bands = field(default_factory=Bands)
    http_loaded: bool = False  # HTTP client spans were loaded
    # checkpointed tool calls by tool_call_id (thread_id, at_aligned, step)
    calls: pd.DataFrame = field(default_factory=pd.DataFrame)
    timeline: pd.DataFrame | None = field(default=None, repr=False)
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
                                     ["thread_id", "at_aligned", "worker", "step", "name"]]
            .sort_values("at_aligned", kind="stable"),
            calls=timeline.loc[kind == Kind.TOOL_CALL.value,
                               ["tool_call_id", "thread_id", "at_aligned", "step"]]
            .drop_duplicates("tool_call_id").set_index("tool_call_id"),
            tool_spans=timeline.loc[(kind == Kind.TOOL_SPAN.value)
                                    & timeline["tool_call_id"].notna(),
                                    ["span_id", "tool_call_id", "worker", "at_aligned", "end"]]
            .set_index("tool_call_id").sort_index(),
            spans_loaded=bool((timeline["source"] == "spans").any()),
            bands=bands,
            http_loaded=bool((kind == Kind.HTTP_SPAN.value).any()),
            timeline=timeline,
        )

    @cached_property
    def span_workers(self) -> bool:
        """Whether the spans' worker names stand for processes (a change of name is then a
        change of process), not for one execution each (read only when a verdict needs it)."""
        if self.timeline is None:
            return True
        kind = self.timeline["kind"]
        return _names_are_per_process(
            self.timeline[kind.isin([Kind.TOOL_SPAN.value, Kind.HTTP_SPAN.value])],
            ["tool_call_id", "trace_id"])

    @cached_property
    def checkpoint_writers_named(self) -> bool:
        """Whether any checkpoint says who wrote it (read once, not for every pair)."""
        return bool(self.checkpoints["worker"].notna().any())

    @cached_property
    def checkpoint_workers(self) -> bool:
        """As `span_workers`, for the checkpoints' writers (one execution: a thread)."""
        if self.timeline is None:
            return True
        return _names_are_per_process(
            self.timeline[self.timeline["kind"] == Kind.CHECKPOINT.value], ["thread_id"])

    def spans_of(self, tool_call_id: str) -> pd.DataFrame:
        if tool_call_id not in self.tool_spans.index:
            return self.tool_spans.iloc[:0]
        return self.tool_spans.loc[[tool_call_id]]

    def of_thread(self, table: str, thread: str) -> pd.DataFrame:
        """The rows of `receives` or `checkpoints` for one thread, in their order."""
        frame: pd.DataFrame = getattr(self, table)
        rows = self._rows_of(table, thread)
        return frame.iloc[rows] if rows is not None else frame.iloc[:0]

    def _rows_of(self, table: str, thread: str) -> np.ndarray | None:
        if table not in self._thread_rows:
            frame: pd.DataFrame = getattr(self, table)
            self._thread_rows[table] = frame.groupby("thread_id", sort=False).indices
        return self._thread_rows[table].get(thread)

    @cached_property
    def _checkpoint_ns(self) -> tuple[np.ndarray, np.ndarray]:
        """The checkpoints' `at_aligned` as int ns, and which are times (not NaT)."""
        at = self.checkpoints["at_aligned"]
        return at.to_numpy(dtype="datetime64[ns]").view(np.int64), at.notna().to_numpy()

    def checkpoint_times(self, thread: str) -> tuple[np.ndarray, np.ndarray]:
        """`at_aligned` (int ns) of one thread's checkpoints, in `of_thread`'s order, and which
        are times: compared as numbers, a thread's rows are read without a pandas filter."""
        ns, ok = self._checkpoint_ns
        rows = self._rows_of("checkpoints", thread)
        if rows is None:
            return ns[:0], ok[:0]
        return ns[rows], ok[rows]

    def result(self, tool_call_id: object) -> pd.Series | None:
        if not isinstance(tool_call_id, str) or tool_call_id not in self.results.index:
            return None
        return self.results.loc[tool_call_id]  # type: ignore[return-value]

    def call(self, tool_call_id: object) -> pd.Series | None:
        """The checkpointed tool call (its thread, the time and step of the checkpoint)."""
        if not isinstance(tool_call_id, str) or self.calls.empty or \
                tool_call_id not in self.calls.index:
            return None
        return self.calls.loc[tool_call_id]  # type: ignore[return-value]


PER_EXECUTION_EVIDENCE = 3  # executions needed before names seen once each say anything


def _names_are_per_process(rows: pd.DataFrame, executions: list[str]) -> bool:
    """Whether the worker names in `rows` can stand for processes: False only when the
    evidence shows several executions (a tool call, else a trace; for checkpoints a thread)
    and no name ran more than one of them (a name made per run, as a tracer provider set up
    for each call gives): a change of such a name says nothing of a restart."""
    named = rows[rows["worker"].notna()]
    if named.empty:
        return True
    execution = named[executions[0]]
    for column in executions[1:]:
        execution = execution.fillna(named[column])
    named = named.assign(_execution=execution).dropna(subset=["_execution"])
    if named["_execution"].nunique() < PER_EXECUTION_EVIDENCE:
        return True
    return bool(named.groupby("worker")["_execution"].nunique().max() > 1)


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
    if seconds < 7 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"  # a renewal a month later: 30.0 d, not 719.2 h


@dataclass(frozen=True)
class Call:
    """What a rule recognised: a layer, a base confidence, why, and what it cannot rule out."""

    layer: Layer
    confidence: float
    evidence: tuple[str, ...]
    alternatives: tuple[Alternative, ...] = ()


class Story(StrEnum):
    """What a thread's checkpoints say happened between two executions of one tool call."""

    ONE_INVOCATION = "one_invocation"  # the call and its result, nothing between, soon after
    STOPPED = "stopped"  # the call and its result with nothing between, minutes apart
    RESUMED = "resumed"  # another writer, or the thread went on and came back to the call


@dataclass(frozen=True)
class ThreadAccount:
    """The thread's own account of a tool call that executed twice."""

    story: Story
    lines: tuple[str, ...]


def _at(value: Any) -> str:
    return f"{value:%H:%M:%S}.{value.microsecond // 1000:03d}"


def _step(row: pd.Series) -> str:
    step = _i(row["step"])
    return f"step {step}" if step is not None else "a checkpoint"


@dataclass
class Pair:
    """The facts about attempt `b` following attempt `a` of one logical call."""

    a: Attempt
    b: Attempt
    gap: float
    ctx: Context

    @property
    def band(self) -> Band:
        return self.ctx.bands.classify(self.gap)

    @property
    def call_a(self) -> str | None:
        return _s(self.a["tool_call_id"])

    @property
    def call_b(self) -> str | None:
        return _s(self.b["tool_call_id"])

    @property
    def same_call(self) -> bool:
        return bool(self.call_a and self.call_a == self.call_b)

    @property
    def thread(self) -> str | None:
        return _s(self.b["thread_id"]) or _s(self.a["thread_id"])

    @property
    def keys(self) -> tuple[str | None, str | None]:
        return _s(self.a["idempotency_key"]), _s(self.b["idempotency_key"])

    @property
    def same_random_key(self) -> bool:
        """The same key on both, not derived from the call: the same request bytes, resent."""
        ka, kb = self.keys
        return bool(ka and ka == kb and not self.a.get("key_derived"))

    @property
    def keys_differ(self) -> bool:
        ka, kb = self.keys
        return bool(ka and kb and ka != kb)

    def _id(self, which: str, column: str) -> str | None:
        return _s((self.a if which == "a" else self.b).get(column))

    @property
    def same_http_span(self) -> str | None:
        http_a = self._id("a", "http_span_id")
        return http_a if http_a and http_a == self._id("b", "http_span_id") else None

    @property
    def same_tool_span(self) -> str | None:
        tool_a = self._id("a", "tool_span_id")
        return tool_a if tool_a and tool_a == self._id("b", "tool_span_id") else None

    @property
    def tools_differ(self) -> bool:
        tool_a, tool_b = self._id("a", "tool_span_id"), self._id("b", "tool_span_id")
        return bool(tool_a and tool_b and tool_a != tool_b)

    @property
    def senders_differ(self) -> bool:
        """The two client spans hang under different parent spans: the code above the HTTP
        client ran twice (a client's own resends share their parent), though one of the tool
        spans may not have been exported."""
        parent_a, parent_b = self._id("a", "http_parent"), self._id("b", "http_parent")
        return bool(parent_a and parent_b and parent_a != parent_b and not self.tools_differ)

    @property
    def executions_differ(self) -> bool:
        """Two executions of the tool, by their tool spans or by their client spans' parents."""
        return self.tools_differ or self.senders_differ

    @property
    def traces(self) -> tuple[str | None, str | None]:
        """The two executions' traces, where a trace stands for one run (the tool spans hang
        under a run-level span); None where it does not."""
        return (self._id("a", "trace_id") if self.a.get("run_trace") else None,
                self._id("b", "trace_id") if self.b.get("run_trace") else None)

    @property
    def trace_roots(self) -> str | None:
        """Why the traces were not read, when they differ but stand for no run."""
        ta, tb = self._id("a", "trace_id"), self._id("b", "trace_id")
        if not (ta and tb and ta != tb) or (self.a.get("run_trace") and self.b.get("run_trace")):
            return None
        return (f"the executions are in different traces ({ta}, {tb}), but their tool spans "
                "are the roots of their traces (no agent, graph or queue span above them): "
                "every execution is a trace of its own, so the traces cannot tell a retry "
                "from a restart")

    @property
    def proxy(self) -> int:
        return max(_i(self.a["proxy_attempt"]) or 0, _i(self.b["proxy_attempt"]) or 0)

    @property
    def resend(self) -> int:
        return _i(self.b["resend_count"]) or 0

    @property
    def one_delivery(self) -> str | None:
        """Both executions ran inside one queue consumer span: one delivery of the run."""
        span = self._id("a", "delivery_span")
        if span is None or span != self._id("b", "delivery_span"):
            return None
        return (f"both executions ran inside one delivery of the run (the queue consumer's "
                f"span {span}): the queue did not hand it out again between them")

    @cached_property
    def redelivered(self) -> str | None:
        """Evidence that a queue handed this thread's run out again before the second attempt:
        the queue's own receives of the thread's run, else the consumer span that holds the
        second execution."""
        return self._thread_redelivered() or self._consumer_redelivered()

    def _consumer_redelivered(self) -> str | None:
        count_b = _i(self.b.get("delivery_count"))
        span_b = self._id("b", "delivery_span")
        if count_b is None or count_b < 2 or span_b == self._id("a", "delivery_span"):
            return None
        worker = _s(self.b.get("worker"))
        return (f"the second execution ran inside the queue consumer's span {span_b}"
                + (f" on {worker}" if worker else "") + f", delivery count {count_b}: the "
                "queue handed the run out again, conclusive for redelivery")

    def _thread_redelivered(self) -> str | None:
        ctx, thread = self.ctx, self.thread
        if thread is None or ctx.receives.empty:
            return None
        r = ctx.of_thread("receives", thread)
        r = r[r["delivery_count"].fillna(0) > 1]
        r = r[r["at_aligned"] <= self.b["at"] + pd.Timedelta(seconds=5)]
        if r.empty:
            return None
        top = r.sort_values("delivery_count").iloc[-1]
        where = f" to {top['worker']}" if _s(top["worker"]) else ""
        return (f"the queue delivered thread {thread}'s run {int(top['delivery_count'])} times "
                f"(delivery count {int(top['delivery_count'])}{where} at "
                f"{top['at_aligned']:%H:%M:%S}): conclusive for redelivery")

    @cached_property
    def workers(self) -> tuple[str, str] | None:
        """Workers that ran the two attempts, from spans or from the checkpoints around them,
        where their names stand for processes (`Context.span_workers`, `checkpoint_workers`)."""
        ctx, thread = self.ctx, self.thread
        wa, wb = _s(self.a.get("worker")), _s(self.b.get("worker"))
        if wa and wb and wa != wb and not ctx.span_workers:
            wa = wb = None
        if (wa is None or wb is None) and thread is not None \
                and ctx.checkpoint_writers_named and ctx.checkpoint_workers:
            ck = ctx.of_thread("checkpoints", thread)
            ck = ck[ck["worker"].notna()]
            before = ck[ck["at_aligned"] <= self.a["at"]]
            after = ck[ck["at_aligned"] >= self.b["at"]]
            if wa is None and len(before):
                wa = str(before.sort_values("at_aligned").iloc[-1]["worker"])
            if wb is None and len(after):
                wb = str(after.sort_values("at_aligned").iloc[0]["worker"])
        if wa and wb and wa != wb:
            return wa, wb
        return None

    @cached_property
    def account(self) -> ThreadAccount | None:
        """The thread's checkpoints around one tool call that executed twice: the checkpoint
        that holds the call, the one that holds its result, and what lies between them
        (domain: the gap between consecutive checkpoint steps, and who wrote them)."""
        ctx, thread = self.ctx, self.thread
        if not self.same_call or thread is None or ctx.checkpoints.empty:
            return None
        call = ctx.call(self.call_a)
        # (a checkpointed call whose thread is missing says nothing of this thread)
        if call is None or _s(call["thread_id"]) != thread:
            return None
        # the thread's checkpoints as times in ns (a NaT is no time: it holds and follows
        # nothing, as pandas compares it)
        t, ok = ctx.checkpoint_times(thread)
        if pd.isna(call["at_aligned"]):
            return None
        held = np.flatnonzero(ok & (t <= call["at_aligned"].value))
        if not len(held):
            return None
        ck = ctx.of_thread("checkpoints", thread)
        first = ck.iloc[held[-1]]
        result = ctx.result(self.call_a)
        later = ok & (t > t[held[-1]])
        if result is not None:
            done = np.flatnonzero(later & (t >= result["at_aligned"].value)) \
                if not pd.isna(result["at_aligned"]) else held[:0]
        else:
            done = np.flatnonzero(later)
        last = ck.iloc[done[0]] if len(done) else None
        lines = [f"thread {thread}'s checkpoints: tool call {self.call_a} is in {_step(first)} "
                 f"({_at(first['at_aligned'])})"]
        if last is None:
            lines.append("no later checkpoint was written")
            return ThreadAccount(Story.STOPPED, tuple(lines)) if self.band in (
                Band.MINUTES, Band.BEYOND_RETENTION) else None
        what = "its result" if result is not None else "the next one"
        gap = (last["at_aligned"] - first["at_aligned"]).total_seconds()
        lines[0] += f", {what} in {_step(last)} ({_at(last['at_aligned'])}), {fmt_gap(gap)} later"
        between = ck.iloc[np.flatnonzero(later & (t < t[done[0]]))]
        wa, wb = _s(first["worker"]), _s(last["worker"])
        if wa and wb and wa != wb and ctx.checkpoint_workers:
            lines.append(f"{_step(first)} was written by {wa} and {_step(last)} by {wb}: a "
                         "second writer picked the run up")
            return ThreadAccount(Story.RESUMED, tuple(lines))
        if len(between):
            b = between.iloc[0]
            source = f" (source {b['name']})" if _s(b["name"]) else ""
            lines.append(f"the thread wrote {len(between)} checkpoint(s) in between, the first "
                         f"{_step(b)}{source} at {_at(b['at_aligned'])}: the run went on and "
                         "came back to the call, as a resumed or replayed run does")
            return ThreadAccount(Story.RESUMED, tuple(lines))
        if result is not None and self.b["at"] > result["at_aligned"] + pd.Timedelta(seconds=1):
            lines.append("the call's result was checkpointed before the second execution: "
                         "the call ran again after it had finished, as a replayed run does")
            return ThreadAccount(Story.RESUMED, tuple(lines))
        if self.ctx.bands.classify(gap) in (Band.MINUTES, Band.BEYOND_RETENTION):
            lines.append(f"nothing was written for {fmt_gap(gap)}: the work stopped and "
                         "started again")
            return ThreadAccount(Story.STOPPED, tuple(lines))
        lines.append("nothing was written in between, and the result came within one "
                     "invocation's time: both executions ran inside one invocation of the graph")
        return ThreadAccount(Story.ONE_INVOCATION, tuple(lines))

    @property
    def above_tool(self) -> bool:
        """Evidence that the whole tool ran again (not a resend below it): a new key, a new
        tool execution, or the run picked up again. The same call id alone is no such
        evidence (a resend below the tool keeps it too); the same random key on both says the
        opposite: the same request bytes were sent twice."""
        if self.same_random_key and not self.executions_differ:
            return False
        return bool(self.keys_differ or self.executions_differ or self.redelivered
                    or self.workers)

    @property
    def one_call(self) -> bool:
        """The two attempts belong to one call of the model's, by id or by evidence that the
        whole tool ran again."""
        if self.same_random_key and not self.executions_differ:
            return False
        return self.same_call or self.above_tool

    def call_line(self) -> list[str]:
        if self.same_call:
            return [f"both attempts carry tool_call_id {self.call_a}: the model asked once"]
        return []

    def key_lines(self) -> list[str]:
        ka, kb = self.keys
        if ka and ka == kb:
            return ["identical idempotency key on both attempts"]
        if ka is None and kb is None and self.a.get("key_recorded") and \
                self.b.get("key_recorded"):
            return ["no idempotency key on the wire, so the provider could not deduplicate"]
        return []


Rule = Callable[[Pair], Call | None]


def model_asked_again(p: Pair) -> Call | None:
    """Different tool call ids: the model asked twice; no retry fired below it."""
    tca, tcb = p.call_a, p.call_b
    if not (tca and tcb and tca != tcb):
        return None
    ev = [f"different tool_call_ids {tca} then {tcb}"
          + (f" in thread {p.thread}" if p.thread else "")
          + ": the model asked for the call twice; no retry fired below it"]
    conf = 0.85
    r = p.ctx.result(tca)
    if r is not None and r["outcome"] in FAILED_OUTCOMES:
        detail = _s(r["detail"]) or ""
        ev.append(f"the tool result for {tca} told the model '{r['outcome']}'"
                  + (f": \"{detail[:120]}\"" if detail else ""))
        conf = 0.95
    elif r is None and p.ctx.call(tca) is not None:
        ev.append(f"no tool result for {tca} was recorded before the model asked again")
    elif r is None:
        ev.append(f"no checkpoint shows what the tool told the model for {tca}; its spans "
                  "ended in an error or a timeout")
    return Call(Layer.MODEL_REEMISSION, conf, tuple(ev))


def proxy_stamped(p: Pair) -> Call | None:
    """A proxy's own attempt counter (x-envoy-attempt-count) says it resent the request."""
    if p.proxy < 2:
        return None
    return Call(Layer.GATEWAY_RETRY, 0.95, (*p.call_line(), f"a proxy stamped "
                f"x-envoy-attempt-count = {p.proxy}: it resent the request"))


def one_client_request(p: Pair) -> Call | None:
    """One client HTTP span, two provider requests: something below the client resent it.

    A client span that does not report resends (the old HTTP semantic conventions, or an
    instrumentation around `requests` while urllib3 retries inside it) cannot tell a proxy's
    resend from the HTTP library's own."""
    span = p.same_http_span
    if span is None:
        return None
    ev = [*p.call_line(), f"one client HTTP span ({span}) but two provider requests: "
          "something between the client and the provider resent it", *p.key_lines()]
    if _i(p.a["resend_count"]) is not None:
        return Call(Layer.GATEWAY_RETRY, 0.9, tuple(ev))
    ev.append("the span does not report resends (no http.request.resend_count), so a retry "
              "inside the HTTP library under the instrumented call looks the same")
    return Call(Layer.GATEWAY_RETRY, 0.7, tuple(ev), (Alternative(
        Layer.SDK_RETRY, "an HTTP library retrying below the instrumented call (urllib3's Retry "
        "under requests) also shows one span for two requests"),))


def client_resent(p: Pair) -> Call | None:
    """The client's own second attempt: a resend count, or two HTTP attempts in one tool run."""
    two_http = bool(p.same_tool_span and p._id("a", "http_span_id")
                    and p._id("b", "http_span_id"))
    if p.resend < 1 and not two_http:
        return None
    ev = p.call_line()
    if p.resend >= 1:
        ev.append(f"the second HTTP client span has http.request.resend_count = {p.resend}")
    if two_http:
        ev.append(f"two HTTP attempts within one tool execution ({p.same_tool_span}): "
                  "the tool ran once")
    return Call(Layer.SDK_RETRY, 0.95 if p.resend >= 1 else 0.85, (*ev, *p.key_lines()))


def one_tool_execution(p: Pair) -> Call | None:
    """Two provider requests within one tool execution, with no client spans to separate the
    HTTP client's retry from a proxy's: below the tool, one of the two."""
    if p.same_tool_span is None or p.keys_differ:
        return None
    ev = [*p.call_line(), f"both requests fall within one tool execution "
          f"({p.same_tool_span}): the tool ran once and something below it sent twice",
          *p.key_lines(), "no client HTTP span tells the HTTP client's retry from a proxy's"]
    return Call(Layer.SDK_RETRY, 0.6, tuple(ev), (Alternative(
        Layer.GATEWAY_RETRY, "a proxy resending the same request also fits: without client "
        "HTTP spans both look like two requests under one tool run"),))


def same_request_resent(p: Pair) -> Call | None:
    """The same random key on both requests: the same bytes were sent twice below the tool."""
    if not p.same_random_key or p.executions_differ:
        return None
    ev = [*p.call_line(), "identical idempotency key on both attempts: the same request was "
          "resent", "no client span to tell an SDK retry from a proxy resend"]
    return Call(Layer.SDK_RETRY, 0.55, tuple(ev), (Alternative(
        Layer.GATEWAY_RETRY, "a proxy resends the same bytes, key included"),))


def _above_tool_lines(p: Pair) -> list[str]:
    ev = p.call_line()
    if p.keys_differ:
        ev.append("a different idempotency key on each attempt: the key was made inside the "
                  "tool, so the whole tool ran again")
    if p.tools_differ:
        ev.append(f"two tool spans ({p._id('a', 'tool_span_id')}, "
                  f"{p._id('b', 'tool_span_id')}): the tool itself executed twice")
    if p.senders_differ:
        ev.append(f"the two requests' client spans hang under different parent spans "
                  f"({p._id('a', 'http_parent')}, {p._id('b', 'http_parent')}): the code above "
                  "the HTTP client ran twice (one of its spans was not exported)")
    return ev


def queue_redelivered(p: Pair) -> Call | None:
    """The queue's receive/delivery count above one for the thread: conclusive."""
    if not p.one_call or not p.redelivered:
        return None
    return Call(Layer.REDELIVERY, 0.95, (*_above_tool_lines(p), p.redelivered))


def one_queue_delivery(p: Pair) -> Call | None:
    """Both executions ran inside one delivery of the run by the queue: not a redelivery."""
    if not p.above_tool or not p.one_delivery:
        return None
    account = p.account.lines if p.account is not None else ()
    return Call(Layer.STEP_RETRY, 0.85, (*_above_tool_lines(p), p.one_delivery, *account))


def new_run(p: Pair) -> Call | None:
    """The second execution ran in another trace, or on another worker: the run was started
    again from its checkpoint, not retried inside it."""
    if not p.one_call:
        return None
    ta, tb = p.traces
    if p.workers:
        return Call(Layer.REDELIVERY, 0.8, (
            *_above_tool_lines(p), f"the attempts ran on different workers ({p.workers[0]}, "
            f"then {p.workers[1]}): the run was picked up again"))
    if ta and tb and ta != tb:
        return Call(Layer.REDELIVERY, 0.75, (
            *_above_tool_lines(p), f"the two executions belong to different traces ({ta}, "
            f"{tb}): the run was started again, not retried within it"))
    return None


def checkpoints_tell(p: Pair) -> Call | None:
    """The thread's own account of the call: a second writer or a thread that went on and came
    back to the call is a resumed run; the call and its result minutes apart with nothing
    between, work that stopped and started again; soon after with nothing between, one
    invocation that ran the tool twice (the framework's retry)."""
    account = p.account
    if account is None or not p.one_call:
        return None
    ev = [*_above_tool_lines(p), *account.lines]
    if account.story is Story.RESUMED:
        return Call(Layer.REDELIVERY, 0.8, tuple(ev))
    if account.story is Story.STOPPED:
        alternatives: tuple[Alternative, ...] = ()
        if p.gap < STEP_RETRY_REACH_S:
            alternatives = (Alternative(
                Layer.STEP_RETRY, f"a step retry after a client timeout of minutes would also "
                f"leave {fmt_gap(p.gap)} with nothing written in between"),)
        return Call(Layer.REDELIVERY, 0.65, tuple(ev), alternatives)
    if not p.above_tool:
        return None  # one invocation holds a resend below the tool just as well
    ta, tb = p.traces
    if ta and ta == tb:
        ev.append(f"both executions belong to one trace ({ta}): one run")
    return Call(Layer.STEP_RETRY, 0.85, tuple(ev))


def long_stop(p: Pair) -> Call | None:
    """Minutes with nothing recorded in between: the work stopped and started again."""
    if not p.one_call or p.band not in (Band.MINUTES, Band.BEYOND_RETENTION):
        return None
    ta, tb = p.traces
    ev = [*_above_tool_lines(p), f"{fmt_gap(p.gap)} with nothing recorded in between: the "
          "work stopped and started again (no queue or worker evidence to confirm)"]
    if ta and ta == tb:
        ev.append(f"but both executions are in one trace ({ta}): the framework retried "
                  "within the run, after a long client timeout")
        return Call(Layer.STEP_RETRY, 0.7, tuple(ev))
    alternatives: tuple[Alternative, ...] = ()
    if p.gap < STEP_RETRY_REACH_S:
        alternatives = (Alternative(
            Layer.STEP_RETRY, f"a step retry after a client timeout of minutes would also "
            f"leave {fmt_gap(p.gap)} with nothing in between"),)
    return Call(Layer.REDELIVERY, 0.6, tuple(ev), alternatives)


def within_run(p: Pair) -> Call | None:
    """The tool ran again within one run's time and nothing shows the run was picked up
    again: the framework retried the step."""
    if not p.above_tool:
        return None
    ta, tb = p.traces
    ev = [*_above_tool_lines(p), "no queue redelivery or change of worker recorded, and the "
          "repeat came within one run's time: the framework retried the step"]
    if ta and ta == tb:
        ev.append(f"both executions belong to one trace ({ta}): one run")
        return Call(Layer.STEP_RETRY, 0.85, tuple(ev))
    confidence = 0.8 if (p.same_call and (p.keys_differ or p.executions_differ)) else 0.65
    run_evidence = bool(p.ctx.spans_loaded or not p.ctx.receives.empty
                        or p.ctx.checkpoint_writers_named)
    if run_evidence or p.band is Band.SECONDS:
        return Call(Layer.STEP_RETRY, confidence, tuple(ev))
    return Call(Layer.STEP_RETRY, min(confidence, 0.65), tuple(ev), (Alternative(
        Layer.REDELIVERY, "without traces, workers' names or the queue's receive counts, a "
        "redelivery after a short visibility timeout looks the same"),))


def same_call_only(p: Pair) -> Call | None:
    """One tool call id and nothing else to go by (no keys, no spans, no workers): the gap
    says which side of the tool the repeat came from. The tool's own retry first waits for
    a client timeout; a resend below the tool comes at once or after a short backoff."""
    if not p.same_call:
        return None
    ev = [*p.call_line(), *p.key_lines(), "nothing else tells a resend below the tool (same "
          "request, no new key, no new tool span) from the tool running again"]
    if p.gap < BELOW_TOOL_S:
        ev.append(f"{fmt_gap(p.gap)} apart: sooner than a client timeout and a framework's "
                  "backoff allow, so the request was resent below the tool")
        return Call(Layer.SDK_RETRY, 0.5, tuple(ev), (Alternative(
            Layer.GATEWAY_RETRY, "a proxy's resend comes as fast, and without client spans "
            "the two look the same"),))
    ev.append(f"{fmt_gap(p.gap)} apart: time for a client timeout and a retry of the step")
    if p.band is Band.SECONDS:
        return Call(Layer.STEP_RETRY, 0.45, tuple(ev), (Alternative(
            Layer.SDK_RETRY, "an HTTP client's backoff can also reach a few seconds"),))
    return Call(Layer.STEP_RETRY, 0.55, tuple(ev))


def timing_only(p: Pair) -> Call:
    """Nothing but timing: the band's usual suspect, with low confidence."""
    suspects = usual_suspects(p.band)
    ev = ["no identifier links these requests to the agent (no tool_call_id, span or shared "
          f"key): judged from the gap alone, the usual cause in the {p.band} band"]
    alternatives = tuple(Alternative(layer, f"also usual in the {p.band} band")
                         for layer in suspects[1:])
    return Call(suspects[0], 0.35, tuple(ev), alternatives)


RULES: tuple[Rule, ...] = (
    model_asked_again, proxy_stamped, one_client_request, client_resent, one_tool_execution,
    same_request_resent, queue_redelivered, one_queue_delivery, new_run, checkpoints_tell,
    long_stop, within_run, same_call_only,
)


def decide(pair: Pair) -> Call:
    """The layer that produced attempt `b` after attempt `a`: the first rule that answers."""
    for rule in RULES:
        call = rule(pair)
        if call is not None:
            return call
    return timing_only(pair)


def judge(a: Attempt, b: Attempt, ctx: Context) -> Duplicate:
    gap = max((b["at"] - a["at"]).total_seconds(), 0.0)
    band = ctx.bands.classify(gap)
    pair = Pair(a, b, gap, ctx)
    call = decide(pair)
    layer, conf, ev = call.layer, call.confidence, list(call.evidence)
    if pair.trace_roots and layer in (Layer.STEP_RETRY, Layer.REDELIVERY):
        ev.append(pair.trace_roots)
    if not any(_s(x[c]) for x in (a, b) for c in ("tool_call_id", "http_span_id")):
        conf = min(conf, 0.45)
        ev.append("nothing on the agent's side (tool call, span) was linked to these requests: "
                  "two separate intents cannot be ruled out")
    typical = LAYERS[layer].bands
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
        protected=bool(protected), evidence=tuple(ev), fix=LAYERS[layer].fix,
        alternatives=call.alternatives,
    )
