"""What the shown evidence says, read back from the rows a drill displays.

The explanation and the feedback (`twice.drills.explain`) are built from these facts only,
never from the lab's story or twice's verdict wording: every id and number in them is a cell
of a shown table, written by the same functions that wrote the table (`twice.drills.question`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from twice.drills.question import Question, cell, short, time_text
from twice.timeline import Kind

NEIGHBOUR_S = 10.0  # another customer's payment this close, of the same amount, is a look-alike


@dataclass(frozen=True)
class Request:
    id: str
    raw: str  # the provider's clock
    at: str  # aligned
    when: pd.Timestamp
    customer: str
    amount: str
    key: str  # "-" when none was sent
    effect: str
    payment: str
    thread: str


@dataclass(frozen=True)
class Call:
    id: str
    at: str
    when: pd.Timestamp
    thread: str
    step: str
    worker: str
    args: str
    result: str  # the tool result's text ("-" when none was recorded)
    result_status: str


@dataclass(frozen=True)
class Span:
    id: str
    kind: str  # "tool" | "http"
    at: str
    when: pd.Timestamp
    duration: str
    parent: str
    trace: str
    worker: str
    call: str
    resend: str
    key: str
    request: str
    status: str
    detail: str


@dataclass(frozen=True)
class Receive:
    at: str
    worker: str
    message: str
    count: str
    thread: str


@dataclass
class Facts:
    customer: str
    amount: str
    requests: list[Request]  # the customer's requests of the alert's amount, oldest first
    other_requests: list[Request]  # the customer's requests of other amounts
    neighbours: list[Request]  # other customers' requests of the same amount, shown
    calls: list[Call]  # tool calls naming the customer, oldest first
    inputs: list[tuple[str, str, pd.Timestamp]]  # (thread, time, when) of input checkpoints
    checkpoints: pd.DataFrame  # the checkpoint rows shown (typed)
    spans: list[Span] | None  # None: not exported
    receives: list[Receive] | None

    # -- reading ---------------------------------------------------------------------------
    def call_of(self, request: Request) -> Call | None:
        """The tool call that made a request: through its HTTP span (request id, then key),
        else the thread's latest tool call at or before it."""
        by_id = {c.id: c for c in self.calls}
        if self.spans:
            for s in self.spans:
                if s.kind == "http" and s.request == request.id and s.call in by_id:
                    return by_id[s.call]
            if request.key != "-":
                for s in self.spans:
                    if s.kind == "http" and s.key == request.key and s.call in by_id:
                        return by_id[s.call]
        before = [c for c in self.calls if c.thread == request.thread
                  and c.when <= request.when + pd.Timedelta(seconds=1)]
        return before[-1] if before else None

    def tool_spans(self, call: str) -> list[Span]:
        return [s for s in self.spans or [] if s.kind == "tool" and s.call == call]

    def http_spans(self, parent: str) -> list[Span]:
        return [s for s in self.spans or [] if s.kind == "http" and s.parent == parent]

    def http_span_of(self, request: Request) -> Span | None:
        for s in self.spans or []:
            if s.kind == "http" and s.request == request.id:
                return s
        return None

    def receives_of(self, thread: str) -> list[Receive]:
        return [r for r in self.receives or [] if r.thread == thread]

    def checkpoints_between(self, thread: str, first: pd.Timestamp,
                            second: pd.Timestamp) -> int:
        cp = self.checkpoints
        rows = cp[(cp["thread_id"] == thread) & (cp["kind"] == Kind.CHECKPOINT.value) &
                  (cp["at_aligned"] > first + pd.Timedelta(seconds=1)) &
                  (cp["at_aligned"] < second - pd.Timedelta(seconds=1))]
        return len(rows)

    def input_between(self, thread: str, first: pd.Timestamp,
                      second: pd.Timestamp) -> tuple[str, str, pd.Timestamp] | None:
        for item in self.inputs:
            if item[0] == thread and first < item[2] < second:
                return item
        return None


def _request(row: pd.Series, amount: str) -> Request:
    return Request(cell(row["request_id"]), time_text(row["at_raw"]), time_text(row["at"]),
                   pd.Timestamp(row["at"]), cell(row["subject"]), amount,
                   cell(row["idempotency_key"]), cell(row["effect"]), cell(row["object_id"]),
                   cell(row["thread_id"]))


def read_facts(q: Question) -> Facts:
    provider = q.rows["provider"]
    assert provider is not None  # the provider's records are always exported
    shown = q.shown["provider"]
    assert shown is not None
    amounts = list(shown["amount"])
    reqs = [_request(r, amounts[i]) for i, (_, r) in enumerate(provider.iterrows())]
    mine = [r for r in reqs if r.customer == q.customer]
    cp = q.rows["checkpoints"]
    assert cp is not None
    results = {str(r["tool_call_id"]): r for _, r in cp.iterrows()
               if r["kind"] == Kind.TOOL_RESULT.value and isinstance(r["tool_call_id"], str)}
    calls = []
    for _, r in cp.iterrows():
        if r["kind"] != Kind.TOOL_CALL.value or r["subject"] != q.customer:
            continue
        res = results.get(str(r["tool_call_id"]))
        calls.append(Call(cell(r["tool_call_id"]), time_text(r["at_aligned"]),
                          pd.Timestamp(r["at_aligned"]), cell(r["thread_id"]), cell(r["step"]),
                          cell(r["worker"]), short(r["args"]),
                          short(res["detail"]) if res is not None else "-",
                          cell(res["outcome"]) if res is not None else "-"))
    inputs = [(cell(r["thread_id"]), time_text(r["at_aligned"]), pd.Timestamp(r["at_aligned"]))
              for _, r in cp.iterrows()
              if r["kind"] == Kind.CHECKPOINT.value and r["name"] == "input"]
    spans_rows, spans_shown = q.rows["spans"], q.shown["spans"]
    spans = None
    if spans_rows is not None and spans_shown is not None:
        spans = [Span(s["span id"], "tool" if s["span"] == "tool" else "http", s["start"],
                      pd.Timestamp(r["at_aligned"]), s["duration"], s["parent span"],
                      s["trace id"], s["worker"], s["tool call id"], s["resend count"],
                      s["key sent"], s["request id"], s["status"], s["detail"])
                 for (_, r), (_, s) in zip(spans_rows.iterrows(), spans_shown.iterrows(),
                                           strict=True)]
    queue_shown = q.shown["queue"]
    receives = None if queue_shown is None else [
        Receive(r["received"], r["worker"], r["message id"], r["receive count"], r["thread"])
        for _, r in queue_shown.iterrows()]
    same = [r for r in mine if r.amount == q.amount]
    near = pd.Timedelta(seconds=NEIGHBOUR_S)
    neighbours = [r for r in reqs if r.customer != q.customer and r.amount == q.amount
                  and any(abs(r.when - m.when) <= near for m in same)]
    return Facts(q.customer, q.amount, same, [r for r in mine if r.amount != q.amount],
                 neighbours, calls, inputs, cp, spans, receives)
