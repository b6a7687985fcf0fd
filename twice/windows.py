"""The agent-side windows a provider request can be placed in, on the reference clock: HTTP client
spans (with the tool span above them), tool spans, and checkpointed tool calls (from the
checkpoint holding the call to the one holding its result).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from twice.matching import CONTENT, known, ns
from twice.timeline import Kind, positions


def span_end(frame: pd.DataFrame) -> pd.Series:
    """Span ends on the reference clock (`end` is raw; a span's shift is `at_aligned - at`)."""
    end = frame["end"].fillna(frame["at"])
    if "at_aligned" not in frame:
        return end
    return end + (frame["at_aligned"] - frame["at"])


def frame(timeline: pd.DataFrame, kind: Kind, columns: list[str]) -> pd.DataFrame:
    """The rows of one kind, with only the columns a step reads (a timeline has 38)."""
    return timeline.loc[timeline["kind"] == kind.value, columns]


NO_CUSTOMER = ""  # a subject the provider knows to be empty, for `agree`


def _asked(spans: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """Spans with what their tool call asked for (customer, amount, currency) and its thread,
    from the checkpointed tool call with the same id, where the span itself does not say: a
    tool span that records no arguments still names its call (`gen_ai.tool.call.id`)."""
    need = spans["tool_call_id"].notna() & spans[["subject", "amount", "currency"]].isna().all(
        axis=1)
    if not need.any():
        return spans
    calls = frame(timeline, Kind.TOOL_CALL, ["tool_call_id", "thread_id", *CONTENT])
    if calls.empty:
        return spans
    calls = calls[calls["tool_call_id"].notna()].drop_duplicates("tool_call_id")
    where = pd.Index(calls["tool_call_id"].astype(object)).get_indexer(
        spans.loc[need, "tool_call_id"].astype(object))
    found = where >= 0
    if not found.any():
        return spans
    rows = spans.index[need][found]
    out = spans.copy()
    for col in ("thread_id", *CONTENT):
        have = out[col].astype(object)
        asked = calls[col].astype(object).to_numpy()[where[found]]
        mine = have.loc[rows]
        have.loc[rows] = mine.where(mine.notna(), pd.Series(asked, index=rows))
        out[col] = have
    return out


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


HTTP_COLS = ["span_id", "at", "end", "parent_span_id", "tool_span_id", "tool_call_id",
              "thread_id", "resend_count", "proxy_attempt", "worker", "subject", "amount",
              "currency", "content", "trace_id"]


def http_spans(timeline: pd.DataFrame, same_worker: bool = False) -> pd.DataFrame:
    """HTTP client spans, with the tool call and the effect fields of the tool span above them
    (when the instrumentation nests them; with `same_worker`, only a tool span of the HTTP
    span's own worker counts)."""
    http = frame(timeline, Kind.HTTP_SPAN, [
        "span_id", "at", "at_aligned", "end", "parent_span_id", "tool_call_id", "thread_id",
        "resend_count", "proxy_attempt", "worker", "request_id", "idempotency_key", "method",
        "path", "trace_id", "status", "outcome"])
    # on the reference clock (a host's clock may run off the others')
    http = http.assign(end=span_end(http).where(http["end"].notna()), at=http["at_aligned"])
    http = http.drop(columns="at_aligned")
    tools = frame(timeline, Kind.TOOL_SPAN,
                   ["span_id", "subject", "amount", "currency", "tool_call_id", "thread_id",
                    *(["worker"] if same_worker else [])])
    keys = ["parent_span_id"], ["tool_span_id"]
    if same_worker:  # a missing worker is one host, as `clocks` counts them
        http = http.assign(host=http["worker"].fillna("").astype(object))
        tools = tools.assign(host=tools.pop("worker").fillna("").astype(object))
        keys = ["parent_span_id", "host"], ["tool_span_id", "tool_host"]
    tools = tools.rename(columns=lambda c: f"tool_{c}")
    if not same_worker and not tools["tool_span_id"].duplicated().any():
        # each HTTP span has at most one tool span above it: its row found by position (a
        # left merge, without hashing every id twice)
        pos = positions(tools["tool_span_id"], http["parent_span_id"])
        http = http.reset_index(drop=True)
        http = pd.concat([http, pd.DataFrame({
            c: pd.Series(tools[c].array.take(pos, allow_fill=True)) for c in tools.columns})],
            axis=1)
    else:
        http = http.merge(tools, left_on=keys[0], right_on=keys[1], how="left")
    if same_worker:
        http = http.drop(columns=["host", "tool_host"])
    http = http.assign(
        tool_call_id=http["tool_call_id"].fillna(http["tool_tool_call_id"]),
        thread_id=http["thread_id"].fillna(http["tool_thread_id"]),
        subject=http["tool_subject"], amount=http["tool_amount"],
        currency=http["tool_currency"],
    )
    http = _asked(http, timeline)
    http["content"] = known(http) > 0
    # a span's trace says which run it belongs to only when it is nested in that run (HTTP
    # client spans made outside the agent's context are each a trace of their own)
    http["trace_id"] = http["trace_id"].where(http["parent_span_id"].notna())
    return http


def tool_windows(aligned: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(tool span windows, checkpointed tool call windows) on the reference clock, with the
    effect fields the tool was asked for. A tool call's window runs from the checkpoint that
    holds it to the one that holds its result (open while no result was recorded)."""
    tools = frame(aligned, Kind.TOOL_SPAN, ["at", "at_aligned", "end", *CONTENT,
                                             "tool_call_id", "thread_id", "span_id", "worker",
                                             "trace_id"])
    tools = _asked(tools, aligned)
    shift = ns(tools["at_aligned"]) - ns(tools["at"])
    spans = tools.assign(start=ns(tools["at_aligned"]),
                         end=ns(tools["end"].fillna(tools["at"])) + shift)
    calls = frame(aligned, Kind.TOOL_CALL,
                   ["at_aligned", *CONTENT, "tool_call_id", "thread_id"])
    results = frame(aligned, Kind.TOOL_RESULT, ["tool_call_id", "at_aligned"]
                     ).drop_duplicates("tool_call_id")
    calls = calls.drop_duplicates("tool_call_id").merge(
        results, on="tool_call_id", how="left", suffixes=("", "_result"))
    result_at = calls["at_aligned_result"]
    calls = calls.assign(start=ns(calls["at_aligned"]),
                         end=np.where(result_at.notna(), ns(result_at.fillna(
                             calls["at_aligned"])), np.inf))
    return spans.reset_index(drop=True), calls.reset_index(drop=True)

