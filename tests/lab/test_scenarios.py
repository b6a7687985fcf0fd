"""Each lab scenario, run for real, leaves the ground truth it claims in the files it writes.

The checks read the incident folder the way an investigator would: the provider's exports
(events.json, request_log.csv), the LangGraph checkpoints through LangGraph's own SqliteSaver,
the OTLP JSON spans, the SQS receives.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl
from uuid import UUID

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from twice.lab.__main__ import main
from twice.lab.agent import derived_key
from twice.lab.scenarios import SCENARIOS, run_scenario

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
_RUNS: dict[tuple[str, str], tuple[Path, float]] = {}


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory):
    """Run a scenario once per module (and options); returns (folder, wall seconds)."""

    def run(name: str, **options: Any) -> Path:
        key = (name, json.dumps(options, sort_keys=True))
        if key not in _RUNS:
            out = tmp_path_factory.mktemp(name)
            started = time.monotonic()
            run_scenario(name, out, seed=11, **options)
            _RUNS[key] = (out, time.monotonic() - started)
        return _RUNS[key][0]

    return run


# ---------------------------------------------------------------------------- readers


def truth(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "truth.json").read_text())


def effect_requests(folder: Path, customer: str) -> list[dict[str, str]]:
    with (folder / "request_log.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [
        r
        for r in rows
        if r["method"] == "POST"
        and r["path"] == "/v1/payment_intents"
        and dict(parse_qsl(r["body"])).get("customer") == customer
    ]


def created_intents(folder: Path, customer: str) -> list[dict[str, Any]]:
    events = json.loads((folder / "events.json").read_text())["data"]
    return sorted(
        (
            e
            for e in events
            if e["type"] == "payment_intent.created"
            and e["data"]["object"]["customer"] == customer
        ),
        key=lambda e: e["created"],
    )


def seconds_between(rows: list[dict[str, str]]) -> float:
    first, last = (datetime.fromisoformat(r["created"]) for r in (rows[0], rows[-1]))
    return (last - first).total_seconds()


def checkpoints(folder: Path, thread_id: str) -> list[Any]:
    """Checkpoint tuples of a thread, oldest first, read with LangGraph's own SqliteSaver."""
    conn = sqlite3.connect(str(folder / "checkpoints.sqlite"))
    try:
        saver = SqliteSaver(conn)
        found = list(saver.list({"configurable": {"thread_id": thread_id}}))
    finally:
        conn.close()
    return sorted(found, key=lambda t: t.checkpoint["ts"])


def final_messages(folder: Path, thread_id: str) -> list[Any]:
    return list(checkpoints(folder, thread_id)[-1].checkpoint["channel_values"]["messages"])


def tool_calls(messages: list[Any]) -> list[dict[str, Any]]:
    return [dict(c) for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]


def uuid6_time(checkpoint_id: str) -> datetime:
    value = UUID(checkpoint_id).int
    ticks = ((value >> 80) << 12) | ((value >> 64) & 0x0FFF)  # 100 ns since 1582-10-15
    return datetime.fromtimestamp((ticks - 0x01B21DD213814000) / 1e7, UTC)


def _value(v: dict[str, Any]) -> Any:
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    (kind, raw), = v.items()
    return int(raw) if kind == "intValue" else raw


def spans(folder: Path) -> list[dict[str, Any]]:
    out = []
    for line in (folder / "spans.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            resource = {a["key"]: _value(a["value"]) for a in rs["resource"]["attributes"]}
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    attrs = {a["key"]: _value(a["value"]) for a in s.get("attributes", [])}
                    out.append({**s, "attrs": attrs, "host": resource["host.name"]})
    return out


def tool_spans(all_spans: list[dict[str, Any]], call_id: str) -> list[dict[str, Any]]:
    return [s for s in all_spans if s["attrs"].get("gen_ai.tool.call.id") == call_id]


def http_spans_with_keys(all_spans: list[dict[str, Any]], keys: set[str]) -> list[dict[str, Any]]:
    found = [
        s
        for s in all_spans
        if s["kind"] == 3 and set(s["attrs"].get("http.request.header.idempotency-key", [])) & keys
    ]
    return sorted(found, key=lambda s: int(s["startTimeUnixNano"]))


def children(all_spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    found = [s for s in all_spans if s.get("parentSpanId") == parent["spanId"]]
    return sorted(found, key=lambda s: int(s["startTimeUnixNano"]))


# ---------------------------------------------------------------------------- layers


def test_sdk_retry_resends_post_without_key_two_charges_under_one_tool_span(incident):
    folder = incident("sdk_retry")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 2 and len(created_intents(folder, t["customer"])) == 2
    assert [r["idempotency_key"] for r in rows] == ["", ""]
    assert seconds_between(rows) < 10
    (call_id,) = {c["id"] for c in tool_calls(final_messages(folder, t["thread_id"]))}
    assert t["duplicate_tool_call_ids"] == [call_id] and t["layer"] == "sdk_retry"
    all_spans = spans(folder)
    (tool_span,) = tool_spans(all_spans, call_id)
    attempts = children(all_spans, tool_span)
    assert [s["attrs"]["http.request.resend_count"] for s in attempts] == [0, 1]
    assert "error.type" in attempts[0]["attrs"] and attempts[1]["attrs"][
        "http.response.status_code"
    ] == 200


def test_sdk_retry_with_stripe_sdk_is_replayed_one_effect(incident):
    folder = incident("sdk_retry_replayed")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 2
    assert rows[0]["idempotency_key"] == rows[1]["idempotency_key"] != ""
    assert [r["replayed"] for r in rows] == ["false", "true"]
    assert len(created_intents(folder, t["customer"])) == 1 == t["effects_created"]
    assert t["protected"] is True
    attempts = http_spans_with_keys(spans(folder), {rows[0]["idempotency_key"]})
    assert [s["attrs"]["http.request.resend_count"] for s in attempts] == [0, 1]
    assert attempts[0]["parentSpanId"] == attempts[1]["parentSpanId"]
    assert attempts[1]["attrs"]["http.response.header.idempotent-replayed"] == ["true"]


def test_gateway_retry_two_provider_requests_one_client_span(incident):
    folder = incident("gateway_retry")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 2 and rows[0]["body"] == rows[1]["body"]
    assert [r["idempotency_key"] for r in rows] == ["", ""]
    assert seconds_between(rows) < 2
    assert len(created_intents(folder, t["customer"])) == 2
    (call_id,) = t["duplicate_tool_call_ids"]
    all_spans = spans(folder)
    (tool_span,) = tool_spans(all_spans, call_id)
    (attempt,) = children(all_spans, tool_span)
    assert attempt["attrs"]["http.request.resend_count"] == 0
    assert attempt["attrs"]["http.response.status_code"] == 200


def test_step_retry_reruns_same_tool_call_with_new_key_tens_of_seconds_later(incident):
    folder = incident("step_retry")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 2 and len(created_intents(folder, t["customer"])) == 2
    keys = [r["idempotency_key"] for r in rows]
    assert keys[0] != keys[1] and all(keys)
    assert 30 <= seconds_between(rows) <= 40
    messages = final_messages(folder, t["thread_id"])
    (call_id,) = {c["id"] for c in tool_calls(messages)}
    assert t["duplicate_tool_call_ids"] == [call_id]
    assert [m.tool_call_id for m in messages if isinstance(m, ToolMessage)] == [call_id]
    all_spans = spans(folder)
    # only-on-success tool spans: the timed-out attempt left no tool span
    (tool_span,) = tool_spans(all_spans, call_id)
    failed, succeeded = http_spans_with_keys(all_spans, set(keys))
    assert failed["attrs"]["error.type"] == "requests.exceptions.ReadTimeout"
    assert int(failed["endTimeUnixNano"]) - int(failed["startTimeUnixNano"]) >= 29e9
    assert succeeded["parentSpanId"] == tool_span["spanId"]
    assert failed["parentSpanId"] not in {s["spanId"] for s in all_spans}


def test_redelivery_resumes_on_another_worker_minutes_later(incident):
    folder = incident("redelivery")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 2 and len(created_intents(folder, t["customer"])) == 2
    assert rows[0]["idempotency_key"] != rows[1]["idempotency_key"]
    # the visibility timeout, less the model turn worker-a spent before its charge
    assert 360 - 10 <= seconds_between(rows) <= 360 + 120
    logged = [json.loads(line) for line in (folder / "sqs.jsonl").read_text().splitlines()]
    receives = [r["message"]["Messages"][0] for r in logged]
    mine = [m for m in receives if json.loads(m["Body"])["thread_id"] == t["thread_id"]]
    assert [m["Attributes"]["ApproximateReceiveCount"] for m in mine] == ["1", "2"]
    assert len({m["MessageId"] for m in mine}) == 1
    received = [
        datetime.fromisoformat(r["received_at"])
        for r in logged
        if json.loads(r["message"]["Messages"][0]["Body"])["thread_id"] == t["thread_id"]
    ]
    assert (received[1] - received[0]).total_seconds() >= 360
    assert [r["worker"] for r in logged if r["message"]["Messages"][0] in mine] == [
        "worker-a", "worker-b",
    ]
    assert all(m["Attributes"]["ApproximateReceiveCount"] == "1" for m in receives if m not in mine)
    history = checkpoints(folder, t["thread_id"])
    workers = [c.metadata["worker"] for c in history]
    assert workers[0] == "worker-a" and workers[-1] == "worker-b"
    (call_id,) = {c["id"] for c in tool_calls(final_messages(folder, t["thread_id"]))}
    assert t["duplicate_tool_call_ids"] == [call_id]
    all_spans = spans(folder)
    assert [s["host"] for s in tool_spans(all_spans, call_id)] == ["worker-b"]
    lost, resumed = http_spans_with_keys(all_spans, {r["idempotency_key"] for r in rows})
    assert (lost["host"], resumed["host"]) == ("worker-a", "worker-b")
    assert lost["parentSpanId"] not in {s["spanId"] for s in all_spans}
    consumer = [s for s in all_spans if s["kind"] == 5 and s["host"] == "worker-b"]
    assert 2 in {s["attrs"]["messaging.aws_sqs.approximate_receive_count"] for s in consumer}


def test_redelivery_with_six_minute_visibility_timeout_runs_in_seconds(incident):
    incident("redelivery")
    assert _RUNS[("redelivery", "{}")][1] < 30


def test_model_reemission_new_tool_call_id_same_arguments_after_failure(incident):
    folder = incident("model_reemission")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 2 and len(created_intents(folder, t["customer"])) == 2
    assert 20 <= seconds_between(rows) <= 60
    messages = final_messages(folder, t["thread_id"])
    first, second = tool_calls(messages)
    assert first["id"] != second["id"] and first["args"] == second["args"]
    assert t["duplicate_tool_call_ids"] == [first["id"], second["id"]]
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert results[0].tool_call_id == first["id"]
    assert str(results[0].content).startswith("Payment failed")
    assert sum(isinstance(m, HumanMessage) for m in messages) == 1
    all_spans = spans(folder)
    assert len(tool_spans(all_spans, first["id"])) == len(tool_spans(all_spans, second["id"])) == 1


def test_human_pause_resumes_past_key_retention_same_key_charged_twice(incident):
    folder = incident("human_pause")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 2 and len(created_intents(folder, t["customer"])) == 2
    # the fix for rows 1-4 was in place: one derived key, sent twice, and the provider had
    # pruned it (no replay) because the resume came after its 24 h retention
    (call_id,) = {c["id"] for c in tool_calls(final_messages(folder, t["thread_id"]))}
    assert {r["idempotency_key"] for r in rows} == {derived_key(t["thread_id"], call_id)}
    assert [r["replayed"] for r in rows] == ["false", "false"]
    assert 24 * 3600 < seconds_between(rows) < 36 * 3600
    assert t["layer"] == "redelivery" and t["protected"] is False
    assert t["duplicate_tool_call_ids"] == [call_id]
    history = checkpoints(folder, t["thread_id"])
    workers = [c.metadata["worker"] for c in history]
    assert workers[0] == "worker-a" and workers[-1] == "worker-b"
    # worker-a's last checkpoint holds the pending tool call and the interrupt, not its result
    paused = [c for c in history if c.metadata["worker"] == "worker-a"][-1]
    assert paused.checkpoint["channel_values"]["messages"][-1].tool_calls[0]["id"] == call_id
    assert any(w[1] == "__interrupt__" for w in paused.pending_writes or [])
    results = [m for m in final_messages(folder, t["thread_id"]) if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in results] == [call_id]
    hosts = [s["host"] for s in http_spans_with_keys(spans(folder), {rows[0]["idempotency_key"]})]
    assert hosts == ["worker-a", "worker-b"]


def test_effects_ledger_stops_the_resumed_charge(incident):
    folder = incident("human_pause", effects="ledger")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 1 and len(created_intents(folder, t["customer"])) == 1
    assert t["layer"] == "none" and t["effects_created"] == 1
    (call_id,) = t["duplicate_tool_call_ids"]
    conn = sqlite3.connect(str(folder / "checkpoints.sqlite"))
    try:
        recorded = conn.execute(
            "SELECT object_id, tool_call_id FROM agent_effects WHERE idempotency_key = ?",
            (rows[0]["idempotency_key"],),
        ).fetchall()
    finally:
        conn.close()
    assert recorded == [(t["payment_intents"][0], call_id)]
    # the run still completed after the human's approval, answering from the record
    results = [m for m in final_messages(folder, t["thread_id"]) if isinstance(m, ToolMessage)]
    assert json.loads(str(results[0].content))["payment_intent"] == t["payment_intents"][0]


# ---------------------------------------------------------------------------- fixes, controls


def test_derived_key_turns_step_retry_into_a_replay(incident):
    folder = incident("step_retry", key="derived")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 2 and rows[0]["idempotency_key"] == rows[1]["idempotency_key"]
    assert rows[1]["replayed"] == "true"
    assert len(created_intents(folder, t["customer"])) == 1


def test_unknown_outcome_stops_the_model_from_asking_again(incident):
    folder = incident("model_reemission", on_timeout="unknown")
    t = truth(folder)
    assert len(effect_requests(folder, t["customer"])) == 1
    assert len(tool_calls(final_messages(folder, t["thread_id"]))) == 1
    assert t["layer"] == "none" and t["effects_created"] == 1


def test_control_new_turn_two_charges_each_asked_for(incident):
    folder = incident("control_new_turn")
    t = truth(folder)
    assert t["layer"] == "none" and t["duplicate_tool_call_ids"] == []
    assert len(created_intents(folder, t["customer"])) == 2
    messages = final_messages(folder, t["thread_id"])
    kinds = [type(m).__name__ for m in messages]
    assert kinds == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage",
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage",
    ]


def test_control_renewal_same_arguments_a_month_apart_in_two_threads(incident):
    folder = incident("control_renewal")
    t = truth(folder)
    rows = effect_requests(folder, t["customer"])
    assert len(rows) == 2 and rows[0]["body"].split("&metadata")[0] == rows[1]["body"].split(
        "&metadata"
    )[0]
    assert 29 * 86400 <= seconds_between(rows) <= 31 * 86400
    intents = [e["data"]["object"] for e in created_intents(folder, t["customer"])]
    threads = {pi["metadata"]["thread_id"] for pi in intents}
    assert len(threads) == 2 and t["thread_id"] in threads
    # checkpoint ids (UUIDv6) carry the same time as `ts`, although this process has already
    # run scenarios dated later than this one
    for tup in checkpoints(folder, t["thread_id"]):
        ts = datetime.fromisoformat(tup.checkpoint["ts"])
        assert abs((uuid6_time(tup.checkpoint["id"]) - ts).total_seconds()) < 1


def test_noise_other_customers_charged_in_the_same_window(incident):
    folder = incident("step_retry")
    t = truth(folder)
    events = json.loads((folder / "events.json").read_text())["data"]
    created = [e["data"]["object"] for e in events if e["type"] == "payment_intent.created"]
    customers = {pi["customer"] for pi in created}
    assert len(customers - {t["customer"]}) >= 2


def test_checkpoints_go_to_postgres_when_a_dsn_is_given(tmp_path, fresh_postgres_dsn):
    from langgraph.checkpoint.postgres import PostgresSaver

    run_scenario("control_new_turn", tmp_path, seed=3, noise=1, dsn=fresh_postgres_dsn)
    t = truth(tmp_path)
    assert not (tmp_path / "checkpoints.sqlite").exists()
    with PostgresSaver.from_conn_string(fresh_postgres_dsn) as saver:
        history = list(saver.list({"configurable": {"thread_id": t["thread_id"]}}))
    assert {c.metadata["worker"] for c in history} == {"worker-a"}
    calls = tool_calls(list(history[0].checkpoint["channel_values"]["messages"]))
    assert len(calls) == 2 and all(c["id"].startswith("call_") for c in calls)


def test_cli_run_writes_an_incident_folder(tmp_path):
    assert main(["run", "control_new_turn", "--out", str(tmp_path), "--noise", "1"]) == 0
    assert {p.name for p in tmp_path.iterdir()} >= {
        "events.json", "request_log.csv", "stripe_logs.jsonl", "checkpoints.sqlite",
        "spans.jsonl", "truth.json", "README.md",
    }


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_sample_folder_matches_its_truth(name):
    folder = SAMPLES / name
    t = truth(folder)
    assert t["scenario"] == name
    assert len(created_intents(folder, t["customer"])) == t["effects_created"]
    assert all(p.stat().st_size < 1_000_000 for p in folder.iterdir())


def test_cli_passes_scenario_options(tmp_path, capsys):
    out = tmp_path / "fixed"
    assert main(["run", "human_pause", "--out", str(out), "--noise", "0",
                 "--set", "effects=ledger", "--set", "pause_hours=30"]) == 0
    t = truth(out)
    assert t["effects_created"] == 1
    history = checkpoints(out, t["thread_id"])
    first, last = (datetime.fromisoformat(c.checkpoint["ts"]) for c in (history[0], history[-1]))
    assert 30 * 3600 <= (last - first).total_seconds() <= 30 * 3600 + 120
    with pytest.raises(SystemExit) as exited:
        main(["run", "human_pause", "--out", str(tmp_path / "bad"), "--set", "colour=blue"])
    assert exited.value.code == 2
    assert "does not take ['colour']" in capsys.readouterr().err
