"""The engine never crashes on evidence: timelines of any shape, source mix and mix of missing
values (None, NaN, pd.NA, NaT in every nullable column) give a contract that validates.

Property tests, derandomised in CI (tests/conftest.py's `ci` profile). The rows are drawn from
small pools of ids, customers and times, so that the joins the engine makes (request ids, tool
call ids, threads, span parents, keys) really happen between the drawn rows.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from twice.engine import Options, analyze
from twice.layers import Bands
from twice.report import to_contract
from twice.timeline import COLUMNS, INT, TEXT, TIME, Kind, coerce, validate

T0 = pd.Timestamp("2025-03-03T09:00:00Z")

# what each kind of row may come from: the source a connector names it with
SOURCES = {
    Kind.PROVIDER_EVENT: ["stripe_events"],
    Kind.PROVIDER_REQUEST: ["stripe_logs", "request_log"],
    Kind.CHECKPOINT: ["checkpoints"], Kind.TOOL_CALL: ["checkpoints"],
    Kind.TOOL_RESULT: ["checkpoints"],
    Kind.TOOL_SPAN: ["spans"], Kind.HTTP_SPAN: ["spans"],
    Kind.QUEUE_RECEIVE: ["sqs", "spans"],
}
MISSING = [None, float("nan"), pd.NA]  # every way a value can be missing in an object column
POOLS: dict[str, list[Any]] = {
    "thread_id": ["th_1", "th_2", "run_a"],
    "tool_call_id": ["toolu_1", "toolu_2", "call_3"],
    "tool_name": ["charge_subscription", "refund"],
    "args_fingerprint": ["f1", "f2"],
    "subject": ["cus_1", "cus_2", ""],
    "currency": ["usd", "eur", "jpy"],
    "idempotency_key": ["k1", "k2", "0" * 32],
    "request_id": ["req_1", "req_2", "req_3"],
    "object_id": ["pi_1", "pi_2", "ch_1", "in_1", "re_1"],
    "object_type": ["payment_intent", "charge", "invoice", "refund", "customer"],
    "belongs_to": ["pi_1", "in_1", "pi_1,in_1", "sub_1"],
    "initiator": ["api", "automatic"],
    "event_type": ["payment_intent.created", "charge.succeeded", "payment_intent.succeeded",
                   "charge.failed", "charge.refunded", "invoice.paid", "customer.updated"],
    "event_id": ["evt_1", "evt_2"],
    "method": ["POST", "GET", "post"],
    "path": ["/v1/payment_intents", "/v1/charges", "/v1/customers/cus_1", "/v1/refunds"],
    "trace_id": ["t1", "t2"],
    "span_id": ["s1", "s2", "s3", "s4"],
    "parent_span_id": ["s1", "s2", "r1"],
    "name": ["input", "loop", "update", "execute_tool charge", "POST", "process_message q"],
    "worker": ["worker-a", "worker-b"],
    "message_id": ["m1", "m2"],
    "outcome": ["ok", "error", "timeout", "unknown", "replayed"],
    "detail": ["Payment failed", "timed out"],
    "origin": ["file.json:1"],
    "checkpoint_id": ["c1", "c2"],
    "args": ['{"amount": 4900}'],
}
INTS: dict[str, list[int]] = {
    "step": [-1, 0, 1, 2, 3], "amount": [4900, 1900, 0, 2**63 - 1],
    "key_recorded": [0, 1], "status": [200, 402, 500], "resend_count": [0, 1, 2],
    "proxy_attempt": [1, 2], "delivery_count": [1, 2, 3],
}
NULLABLE = [c for c in COLUMNS if c.name not in ("at", "source", "kind", "at_aligned")]


def _times(draw: st.DrawFn, whole: bool) -> pd.Timestamp:
    seconds = draw(st.integers(0, 400)) if whole else draw(
        st.floats(0, 400, allow_nan=False, allow_infinity=False))
    return T0 + pd.Timedelta(seconds=seconds)


@st.composite
def rows(draw: st.DrawFn, whole: bool) -> dict[str, Any]:
    kind = draw(st.sampled_from(list(SOURCES)))
    row: dict[str, Any] = {"kind": kind.value, "source": draw(st.sampled_from(SOURCES[kind])),
                           "at": _times(draw, whole)}
    for column in NULLABLE:
        if not draw(st.booleans()):
            row[column.name] = draw(st.sampled_from(
                [pd.NaT, None] if column.dtype == TIME else MISSING))
            continue
        if column.dtype == TIME:
            row[column.name] = row["at"] + pd.Timedelta(seconds=draw(st.floats(0, 60)))
        elif column.dtype == INT:
            row[column.name] = draw(st.sampled_from(INTS.get(column.name, [0, 1])))
        elif column.dtype == TEXT:
            row[column.name] = draw(st.sampled_from(POOLS.get(column.name, ["x"])))
    return row


@st.composite
def timelines(draw: st.DrawFn) -> pd.DataFrame:
    whole = draw(st.booleans())  # whole-second provider times, or not
    drawn = draw(st.lists(rows(whole), min_size=0, max_size=24))
    frame = pd.DataFrame(drawn, dtype=object) if drawn else pd.DataFrame(
        columns=["at", "source", "kind"])
    timeline = coerce(frame)
    validate(timeline)
    return timeline


def _check_contract(doc: dict[str, Any]) -> None:
    text = json.dumps(doc, allow_nan=False)  # no NaN or Infinity may reach the JSON
    assert json.loads(text) == doc
    assert doc["version"] == 1
    for group in doc["groups"]:
        ids = {a["attempt_id"] for a in group["attempts"]}
        assert len(group["attempts"]) >= 2
        for d in group["duplicates"]:
            assert {d["first"], d["second"]} <= ids
            assert 0.0 <= d["confidence"] <= 1.0
            assert math.isfinite(d["gap_seconds"]) and d["gap_seconds"] >= 0
            assert d["evidence"] and d["fix"]
        for a in group["attempts"]:
            assert isinstance(a["attempt_id"], str) and a["at"].endswith("Z")


@settings(max_examples=200, deadline=None)
@given(timelines())
def test_any_timeline_gives_a_contract_that_validates(timeline: pd.DataFrame) -> None:
    analysis = analyze(timeline)
    _check_contract(to_contract(analysis))


@settings(max_examples=60, deadline=None)
@given(timelines(), st.sampled_from([(5.0, 10.0), (10.0, 120.0), (1.0, 3600.0)]),
       st.sampled_from([1.0, 900.0, 86400.0]))
def test_any_timeline_with_any_options(timeline: pd.DataFrame, bands: tuple[float, float],
                                       window: float) -> None:
    options = Options(bands=Bands(seconds=bands[0], tens_of_seconds=bands[1]), window_s=window)
    _check_contract(to_contract(analyze(timeline, options=options)))


def test_a_column_holding_every_kind_of_missing_value_at_once() -> None:
    """The mix that crashed the engine on production-shaped evidence (None beside pd.NA in a
    thread column), in every nullable text column at once."""
    base = {"kind": Kind.PROVIDER_EVENT.value, "source": "stripe_events",
            "event_type": "charge.succeeded", "object_type": "charge", "subject": "cus_1",
            "amount": 4900, "currency": "usd", "initiator": "api"}
    records = []
    for i, missing in enumerate([None, np.nan, pd.NA, None]):
        row = dict(base, at=T0 + pd.Timedelta(seconds=i), request_id=f"req_{i}",
                   object_id=f"ch_{i}")
        for column in NULLABLE:
            if column.dtype == TEXT and column.name not in row:
                row[column.name] = missing
        records.append(row)
    timeline = coerce(pd.DataFrame(records, dtype=object))
    doc = to_contract(analyze(timeline))
    _check_contract(doc)
    assert len(doc["groups"]) == 1  # one customer, one amount, four charges a second apart
