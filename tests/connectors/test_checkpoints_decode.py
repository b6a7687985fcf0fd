"""The pure parts of the checkpoints connector: blob safety, UUIDv6 time, outcomes, parsing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import ormsgpack
import pandas as pd
import pytest
import time_machine
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.base import id as lg_id
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from twice.connectors.base import SourceWarning
from twice.connectors.checkpoints import parse_checkpoints
from twice.connectors.checkpoints.decode import (
    REFUSED,
    BlobDecoder,
    CheckpointRecord,
    ToolResultFact,
    WriteRecord,
    datetime_ns,
    message_facts,
    outcome_of,
    parse_ts,
    uuid6_bound,
    uuid6_time_ns,
)
from twice.timeline import validate

T = datetime(2025, 3, 4, 10, 0, 0, 123456, tzinfo=UTC)


def real_id_at(at: datetime, step: int) -> str:
    """A checkpoint id minted by LangGraph's own uuid6() with the clock at `at`."""
    saved = lg_id._last_v6_timestamp
    lg_id._last_v6_timestamp = None
    try:
        with time_machine.travel(at, tick=False):
            return str(lg_id.uuid6(clock_seq=step))
    finally:
        lg_id._last_v6_timestamp = saved


def test_uuid6_time_and_bounds_match_ids_langgraph_mints():
    for step in (-1, 0, 7):
        cid = real_id_at(T, step)
        assert uuid6_time_ns(cid) == datetime_ns(T)
        assert uuid6_bound(datetime_ns(T), upper=False) <= cid <= uuid6_bound(datetime_ns(T),
                                                                                upper=True)
        # ids sort in time order as text: a microsecond later is above the upper bound
        later = real_id_at(T + timedelta(microseconds=1), step)
        assert later > uuid6_bound(datetime_ns(T), upper=True) > cid
    assert uuid6_time_ns("not-a-uuid") is None
    assert uuid6_time_ns("6fa459ea-ee8a-3ca4-894e-db77e160355e") is None  # version 3


def test_times_outside_2000_to_2100_are_not_read() -> None:
    """Near pandas' last nanosecond (2262) the engine's arithmetic on a time overflows."""
    assert parse_ts(T.isoformat()) == datetime_ns(T)
    for ts in ("2262-04-11T23:47:16.854775+00:00", "2200-01-01T00:00:00+00:00",
               "1677-09-22T00:12:43.145225+00:00", "1999-12-31T23:59:59+00:00"):
        assert parse_ts(ts) is None, ts
    assert uuid6_time_ns(real_id_at(datetime(2200, 1, 1, tzinfo=UTC), 0)) is None


@pytest.mark.parametrize(("status", "content", "outcome"), [
    ("error", "Error: ConnectionResetError('reset')", "error"),
    ("success", '{"status": "unknown", "lookup_key": "3f2a"}', "unknown"),
    ("success", "Request timed out after 80 s", "timeout"),
    ("success", "httpx.ReadTimeout", "timeout"),
    ("success", '{"status": "succeeded", "charge": "ch_1"}', "ok"),
])
def test_outcome_of_a_tool_result(status: str, content: str, outcome: str):
    assert outcome_of(ToolResultFact("toolu_1", "charge", status, content)) == outcome


def test_message_facts_from_dict_forms():
    openai = {"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "charge", "arguments": '{"amount": 5}'}}]}
    calls, _ = message_facts(openai)
    assert [(c.tool_call_id, c.tool_name, c.args) for c in calls] == [("call_1", "charge",
                                                                       {"amount": 5})]
    _, result = message_facts({"type": "tool", "tool_call_id": "call_1", "name": "charge",
                               "content": [{"type": "text", "text": "done"}]})
    assert result is not None and (result.tool_call_id, result.content) == ("call_1", "done")
    assert message_facts({"role": "user", "content": "hi"}) == ([], None)


def test_blob_naming_a_class_off_the_allow_list_is_not_constructed(tmp_path: Path):
    marker = tmp_path / "made-by-blob"
    # EXT_CONSTRUCTOR_SINGLE_ARG (0): "call module.name(arg)" on load
    blob = ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb(("os", "mkdir", str(marker)))))
    warnings: list[SourceWarning] = []
    with BlobDecoder("cp.sqlite", warnings) as decoder:
        value = decoder.decode("msgpack", blob, "cp.sqlite#t/1")
    assert value == str(marker)  # the raw argument, nothing called
    assert not marker.exists()
    assert any("os.mkdir" in w.detail and "allow-list" in w.detail for w in warnings)
    # the same blob through a permissive serializer does run the call
    JsonPlusSerializer(allowed_msgpack_modules=True).loads_typed(("msgpack", blob))
    assert marker.exists()


def test_pickle_and_unknown_types_are_refused():
    warnings: list[SourceWarning] = []
    with BlobDecoder("db", warnings) as decoder:
        assert decoder.decode("pickle", b"\x80\x04K\x01.", "db#t/1") is REFUSED
        assert decoder.decode("marshal", b"x", "db#t/2") is REFUSED
        assert decoder.decode("msgpack", b"\xc1", "db#t/3") is REFUSED  # corrupt
        assert decoder.decode("empty", None, "db#t/4") is None
    assert [w.source for w in warnings] == ["db#t/1", "db#t/2", "db#t/3"]
    assert "refused to unpickle" in warnings[0].detail


def cp(step: int, at: datetime, values: dict[str, object], ts: str | None = "auto",
       thread: str = "t1") -> CheckpointRecord:
    cid = real_id_at(at, step)
    return CheckpointRecord(thread, "", cid, at.isoformat() if ts == "auto" else ts,
                            {"source": "loop", "step": step, "host.name": "ip-10-0-3-7"},
                            values)


def test_parse_finds_messages_in_any_list_channel_and_keeps_the_first_sighting():
    call = AIMessage(content="", tool_calls=[{"id": "toolu_01X", "name": "refund",
                                              "args": {"customer": "cus_9", "amount": 19.99}}])
    answer = ToolMessage(content='{"status": "unknown"}', tool_call_id="toolu_01X")
    records = [
        cp(1, T, {"history": [call], "counter": 3}),
        cp(2, T + timedelta(seconds=4), {"history": [call, answer]}, ts=None),  # no ts
        cp(3, T + timedelta(seconds=9), {"history": [call, answer]}),
    ]
    result = parse_checkpoints(records, [], "cp.sqlite")
    validate(result.rows)
    rows = result.rows.set_index("kind")
    assert rows.loc["tool_call", "at"] == T
    assert rows.loc["tool_call", "subject"] == "cus_9"
    assert pd.isna(rows.loc["tool_call", "amount"])  # 19.99 is not an amount in minor units
    assert rows.loc["tool_result", "outcome"] == "unknown"
    assert rows.loc["tool_result", "tool_name"] == "refund"  # from the call it answers
    assert rows.loc["tool_result", "at"] == T + timedelta(seconds=4)  # the id's own time
    assert set(result.rows["worker"]) == {"ip-10-0-3-7"}


def test_parse_reports_ts_far_from_the_id_time_and_skips_timeless_checkpoints():
    skewed = cp(1, T, {}, ts=(T + timedelta(minutes=5)).isoformat())
    timeless = CheckpointRecord("t1", "", "legacy-id", None, {}, {})
    result = parse_checkpoints([skewed, timeless], [], "db")
    assert len(result.rows) == 1 and result.rows.loc[0, "at"] == T + timedelta(minutes=5)
    details = " | ".join(w.detail for w in result.warnings)
    assert "1 checkpoint(s) have a `ts` more than 1 s away" in details
    assert "no readable `ts`" in details


def test_parse_result_only_in_writes_of_a_vanished_checkpoint_uses_the_id_time():
    cid = real_id_at(T, 4)
    write = WriteRecord("t1", "", cid, "task-1", "messages",
                        [ToolMessage(content="boom", tool_call_id="call_9", status="error")])
    rows = parse_checkpoints([], [write], "db").rows
    assert list(rows["kind"]) == ["tool_result"]
    assert rows.loc[0, "at"] == T and rows.loc[0, "outcome"] == "error"
