"""Field realism: the busy day really interleaves, the exports are valid and time-sorted, the
detailed truth names exactly the incident's requests, the drawn timings land where drawn, and the
clean realism is what it was.

The incidents are generated in one subprocess (time-machine moves the whole process's clock and
moto keeps its queues for the life of a process). Seeds from 7000 up are this file's own; each was
picked for the exports its checks read (asserted below, so a change to the draws says so).
"""

from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl
from uuid import UUID

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from twice.lab.field import FIELD_MIX, draw_variant, field_scenario
from twice.lab.incident import DETAIL_FIELDS
from twice.lab.scenarios import SCENARIOS
from twice.lab.stripe_server import RequestRecord
from twice.lab.truth_detail import Exports, IncidentFacts, expected_findings

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data"
INCIDENTS = {
    "step_retry": 7017,  # timeout 2.7 s (the seconds band), backoff 2 s, lab spans
    "model_reemission": 7201,  # timeout 121.7 s (the minutes band), reports failure
    "redelivery": 7004,  # visibility timeout 432 s
    "control_same_amount": 7007,  # no `stripe logs tail`, no spans
}
RUN = """
import json, sys
from twice.lab.scenarios import run_scenario
for name, seed, out, realism in json.loads(sys.argv[1]):
    run_scenario(name, out, seed=seed, realism=realism)
"""


@pytest.fixture(scope="module")
def field(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("field")
    specs = [(name, seed, str(root / name), "field") for name, seed in INCIDENTS.items()]
    specs.append(("step_retry", 7, str(root / "clean_step_retry"), "clean"))
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(specs)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return {spec[0] if spec[3] == "field" else "clean": Path(spec[2]) for spec in specs}


def truth(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "truth.json").read_text())


def request_log(folder: Path) -> list[dict[str, str]]:
    with (folder / "request_log.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def creates(folder: Path) -> list[dict[str, Any]]:
    """POST /v1/payment_intents rows of the request log, body decoded."""
    return [r | {"form": dict(parse_qsl(r["body"]))} for r in request_log(folder)
            if r["method"] == "POST" and r["path"] == "/v1/payment_intents"]


def at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def thread_ranges(folder: Path) -> dict[str, tuple[float, float]]:
    """Each thread's first and last checkpoint time."""
    conn = sqlite3.connect(folder / "checkpoints.sqlite", check_same_thread=False)
    try:
        ranges: dict[str, tuple[float, float]] = {}
        for item in SqliteSaver(conn).list(None):
            thread = item.config["configurable"]["thread_id"]
            ts = at(item.checkpoint["ts"])
            low, high = ranges.get(thread, (ts, ts))
            ranges[thread] = (min(low, ts), max(high, ts))
        return ranges
    finally:
        conn.close()


# ---------------------------------------------------------------------------- the draws


def test_a_variant_is_a_function_of_scenario_and_seed_and_stays_in_its_ranges() -> None:
    assert draw_variant("step_retry", 1234) == draw_variant("step_retry", 1234)
    assert draw_variant("step_retry", 1234) != draw_variant("step_retry", 1235)
    offsets: list[float] = []
    instruments: Counter[str] = Counter()
    formats: Counter[str] = Counter()
    absent: Counter[str] = Counter()
    fixed = 0
    for seed in range(300):
        for name in ("step_retry", "model_reemission", "redelivery", "human_pause"):
            v = draw_variant(name, seed)
            o = v["options"]
            if "timeout" in o:
                assert 2.0 <= o["timeout"] <= 125.0
            if "visibility_timeout" in o:
                assert 30 <= o["visibility_timeout"] <= 900
            fixed += any(k in o for k in ("key", "on_timeout", "effects"))
            offsets.append(v["clock_offset"])
            assert 1.0 <= abs(v["clock_offset"]) <= 8.0
            assert 60 <= v["busy_day"]["threads"] <= 90
            assert v["busy_day"]["customers"] >= v["busy_day"]["threads"]
            assert v["exports"]["events"]
            instruments[v["instrumentation"]] += 1
            formats[v["trace_format"]] += 1
            absent.update(k for k, on in v["exports"].items() if not on)
    assert min(offsets) < 0 < max(offsets)
    assert set(instruments) == {"lab", "openinference", "callback", "none"}
    assert set(formats) == {"otlp", "jaeger"}
    assert {"stripe_logs", "request_log", "queue_log"} <= set(absent)
    assert 0.08 < fixed / 1200 < 0.25
    timeouts = [draw_variant("step_retry", s)["options"]["timeout"] for s in range(300)]
    assert min(timeouts) < 5 and max(timeouts) > 100  # both ends: seconds band and minutes band


def test_the_field_mix_covers_every_layer_and_a_share_of_controls() -> None:
    drawn = Counter(field_scenario(seed) for seed in range(1000, 2000))
    assert set(drawn) == set(FIELD_MIX)
    controls = sum(n for name, n in drawn.items() if name.startswith("control_"))
    assert 0.15 < controls / 1000 < 0.4
    assert min(drawn.values()) >= 30


# ---------------------------------------------------------------------------- the busy day


@pytest.mark.parametrize("name", sorted(INCIDENTS))
def test_the_busy_day_interleaves_sixty_threads_with_the_incident(
        name: str, field: dict[str, Path]) -> None:
    folder = field[name]
    t = truth(folder)
    ranges = thread_ranges(folder)
    mine = [t["thread_id"], *t["related_threads"]]
    others = {th: r for th, r in ranges.items() if th not in mine}
    assert len(others) >= 60
    first = ranges[t["thread_id"]][0]
    assert sum(r[0] < first for r in others.values()) >= 10  # threads before the incident ...
    assert sum(r[0] > first for r in others.values()) >= 10  # ... and after it
    # time ranges overlap: many threads were running while another one was
    spans = sorted(others.values())
    overlapping = sum(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))
    assert overlapping >= 5
    # the incident's own window has other threads running in it
    low, high = ranges[t["thread_id"]]
    assert any(r[0] <= high and r[1] >= low for r in others.values())
    assert t["variant"]["busy_day_run"]["run_order"] == "shuffled"


@pytest.mark.parametrize("name", sorted(INCIDENTS))
def test_the_exports_are_time_sorted_and_only_those_drawn(
        name: str, field: dict[str, Path]) -> None:
    folder = field[name]
    variant = truth(folder)["variant"]
    events = json.loads((folder / "events.json").read_text())["data"]
    created = [e["created"] for e in events]
    assert created == sorted(created, reverse=True)  # GET /v1/events: newest first
    assert (folder / "request_log.csv").exists() == variant["exports"]["request_log"]
    assert (folder / "stripe_logs.jsonl").exists() == variant["exports"]["stripe_logs"]
    drawn = variant["applied"]["instrumentation"] != "none"
    jaeger = variant["trace_format"] == "jaeger"
    assert (folder / "spans.jsonl").exists() == (drawn and not jaeger)
    assert (folder / "spans.jaeger.json").exists() == (drawn and jaeger)
    if (folder / "request_log.csv").exists():
        logged = [at(r["created"]) for r in request_log(folder)]
        assert logged == sorted(logged)
    if (folder / "stripe_logs.jsonl").exists():
        tail = [json.loads(line)["created_at"]
                for line in (folder / "stripe_logs.jsonl").read_text().splitlines()]
        assert tail == sorted(tail)
    if (folder / "spans.jsonl").exists():
        ends = [int(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
                    ["endTimeUnixNano"])
                for line in (folder / "spans.jsonl").read_text().splitlines()]
        assert ends == sorted(ends)


@pytest.mark.parametrize("name", sorted(INCIDENTS))
def test_checkpoint_ids_carry_their_own_time(name: str, field: dict[str, Path]) -> None:
    """Runs executed out of time order still get UUIDv6 ids whose time is their `ts`."""
    conn = sqlite3.connect(field[name] / "checkpoints.sqlite", check_same_thread=False)
    try:
        items = list(SqliteSaver(conn).list(None))
    finally:
        conn.close()
    assert len(items) > 300
    for item in items:
        uid = UUID(item.config["configurable"]["checkpoint_id"])
        assert uid.version == 6
        # v6 reorders v1's fields: time_high, time_mid, time_low (100 ns since 1582-10-15)
        ticks = (uid.time_low << 28) | (uid.time_mid << 12) | (uid.time_hi_version & 0x0FFF)
        seconds = (ticks - 0x01B21DD213814000) / 1e7
        # LangGraph reads the (ticking, virtual) clock twice, for `ts` and for the id, a few
        # statements apart: on a loaded machine the process may be descheduled in between for
        # tens of milliseconds. An id from another run's time (what this guards against) is
        # minutes to hours off, so a second tells the two apart on any machine.
        assert abs(seconds - at(item.checkpoint["ts"])) < 1.0


# ---------------------------------------------------------------------------- the truth


def test_request_ids_are_exactly_the_incident_calls_requests(field: dict[str, Path]) -> None:
    folder = field["step_retry"]
    t = truth(folder)
    rows = creates(folder)
    mine = [r["request_id"] for r in rows if r["form"].get("metadata[thread_id]") == t["thread_id"]]
    assert t["request_ids"] == mine and len(mine) == 2
    assert {r["form"]["customer"] for r in rows if r["request_id"] in mine} == {t["customer"]}
    # the customer's other threads (other amounts, the same day) are not the incident's
    others = [r for r in rows if r["form"].get("customer") == t["customer"]
              and r["request_id"] not in mine]
    assert others
    assert {r["form"]["amount"] for r in others}.isdisjoint(
        {r["form"]["amount"] for r in rows if r["request_id"] in mine})
    assert t["exported_request_ids"] == t["request_ids"]
    assert t["effects_created"] == 2 and not t["protected"]


def test_a_control_names_both_of_its_threads(field: dict[str, Path]) -> None:
    folder = field["control_same_amount"]
    t = truth(folder)
    assert t["layer"] == "none" and len(t["related_threads"]) == 1
    rows = {r["request_id"]: r for r in creates(folder)}
    first, second = (rows[i] for i in t["request_ids"])
    assert first["form"]["customer"] == t["customer"] != second["form"]["customer"]
    assert (first["form"]["amount"], first["form"]["currency"]) == \
        (second["form"]["amount"], second["form"]["currency"])
    assert 0.5 <= at(second["created"]) - at(first["created"]) <= 5.5
    assert t["expected_findings"] == []


def test_neighbours_are_charged_the_same_amount_seconds_later(field: dict[str, Path]) -> None:
    for name in INCIDENTS:
        t = truth(field[name])
        neighbours = t["variant"]["neighbours_run"]
        assert len(neighbours) == t["variant"]["busy_day"]["neighbours"] >= 1
        for n in neighbours:
            assert n["customer"] != t["customer"]
            assert 0.5 <= n["gap_s"] <= 5.5, n


def test_timeouts_land_where_drawn(field: dict[str, Path]) -> None:
    # step_retry: the timeout, then RetryPolicy's backoff (initial interval + jitter up to 1 s)
    t = truth(field["step_retry"])
    options = t["variant"]["options"]
    rows = {r["request_id"]: r for r in creates(field["step_retry"])}
    gap = at(rows[t["request_ids"][1]]["created"]) - at(rows[t["request_ids"][0]]["created"])
    low = options["timeout"] + options["retry_initial"]
    assert low - 0.1 <= gap <= low + 1.5, (gap, options)
    assert gap < 10  # a 2.7 s timeout puts this step retry in the seconds band
    # model_reemission: the timeout, then one model turn
    t = truth(field["model_reemission"])
    timeout, (_, think_high) = t["variant"]["options"]["timeout"], t["variant"]["think_range"]
    rows = {r["request_id"]: r for r in creates(field["model_reemission"])}
    gap = at(rows[t["request_ids"][1]]["created"]) - at(rows[t["request_ids"][0]]["created"])
    assert timeout - 0.1 <= gap <= timeout + think_high + 0.5, (gap, timeout)
    assert gap > 120  # past the tens-of-seconds band
    # redelivery: about the visibility timeout (less worker-a's turn, plus worker-b's poll)
    t = truth(field["redelivery"])
    visibility, (_, think_high) = (t["variant"]["options"]["visibility_timeout"],
                                   t["variant"]["think_range"])
    rows = {r["request_id"]: r for r in creates(field["redelivery"])}
    gap = at(rows[t["request_ids"][1]]["created"]) - at(rows[t["request_ids"][0]]["created"])
    assert visibility - think_high - 1 <= gap <= visibility + 20 + think_high + 1


def test_expected_findings_follow_what_the_lab_did(field: dict[str, Path]) -> None:
    # a new random key per re-run; the timed-out attempt's tool span never ended
    assert set(truth(field["step_retry"])["expected_findings"]) == \
        {"key_regenerated", "span_missing"}
    # the tool told the model "failed" although the PaymentIntent went through
    assert "failure_reported_for_unknown_outcome" in \
        truth(field["model_reemission"])["expected_findings"]
    # worker-a died after the charge: a new key, and its tool span was never exported
    assert set(truth(field["redelivery"])["expected_findings"]) == \
        {"key_regenerated", "span_missing"}


def _record(request_id: str, created: float, key: str | None, status: int = 200,
            replayed: bool = False) -> RequestRecord:
    return RequestRecord(request_id, created, "POST", "/v1/payment_intents", key, status,
                         "metadata[thread_id]=t1&customer=cus_1", replayed)


def test_key_findings_depend_on_what_the_exports_record() -> None:
    facts = IncidentFacts(
        threads=["t1"], requests=[_record("req_1", 100.0, None), _record("req_2", 100.2, None)],
        calls={"t1": ["call_1"]}, results={"call_1": '{"status": "succeeded"}'},
        result_status={"call_1": "success"}, event_request_ids={"req_1", "req_2"},
        clock_offset=0.0)
    assert expected_findings(facts, Exports(request_log=False, spans=False)) == ["key_missing"]
    # an account on an API version before 2017-05-25: events carry no key, no request log
    assert expected_findings(facts, Exports(request_log=False, spans=False,
                                            events_record_keys=False)) == []
    # a key reused a day and a half later made a second effect: expired
    facts.requests = [_record("req_1", 100.0, "k"), _record("req_2", 100.0 + 36 * 3600, "k")]
    assert "key_expired" in expected_findings(facts, Exports(spans=False))
    facts.requests = [_record("req_1", 100.0, "k"), _record("req_2", 101.0, "k", replayed=True)]
    assert expected_findings(facts, Exports(spans=False)) == ["replayed"]
    # one request: no group for the findings to be reported in
    facts.requests = facts.requests[:1]
    assert expected_findings(facts, Exports()) == []


# ---------------------------------------------------------------------------- clean realism


def test_the_clean_realism_is_unchanged(field: dict[str, Path]) -> None:
    """sample_data/ is the clean realism at seed 7: the same truth byte for byte, the same
    events (the SDK's random keys and sub-second timing aside, as before this mode existed)."""
    folder, sample = field["clean"], SAMPLES / "step_retry"
    assert (folder / "truth.json").read_bytes() == (sample / "truth.json").read_bytes()
    assert not set(DETAIL_FIELDS) & set(truth(folder))

    def events(path: Path) -> list[tuple[Any, ...]]:
        return [(e["id"], e["type"], e["request"]["id"], bool(e["request"]["idempotency_key"]),
                 e["data"]["object"]["id"], e["created"])
                for e in json.loads((path / "events.json").read_text())["data"]]

    ours, theirs = events(folder), events(sample)
    assert [e[:5] for e in ours] == [e[:5] for e in theirs]
    assert all(abs(a[5] - b[5]) <= 1 for a, b in zip(ours, theirs, strict=True))
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in sample.iterdir())


def test_the_new_controls_are_not_samples() -> None:
    assert not {"control_same_amount", "control_two_subscriptions",
                "control_declined_retry"} & set(SCENARIOS)
