"""The lab on PostgreSQL (a real server from tests/conftest.py).

The redelivery scenario on the PostgreSQL-backed queue: the queue's visibility timeout hands the
run to worker-b with receive count 2, and `twice analyze` (the folder plus the PostgresSaver
checkpoints) names the layer `redelivery`. The human_pause fix keeps its record of effects in
the PostgresSaver database."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import time_machine

from twice.cli import main
from twice.lab.pg_queue import TABLE, PgRunQueue

# one scenario per process: the lab moves the whole process's clock
RUN = """
import sys
from twice.lab.scenarios import run_scenario
run_scenario(sys.argv[1], sys.argv[2], seed=5, noise=2, dsn=sys.argv[3], **{options})
"""


def _run(out: Path, dsn: str, scenario: str = "redelivery", **options: Any) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", RUN.format(options=options), scenario,
                           str(out), dsn],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    truth: dict[str, Any] = json.loads((out / "truth.json").read_text())
    return truth


@pytest.fixture(scope="module")
def pg_incident(tmp_path_factory: pytest.TempPathFactory,
                new_postgres_database: Any) -> tuple[Path, str, dict[str, Any]]:
    dsn = new_postgres_database()
    out = tmp_path_factory.mktemp("pg_redelivery")
    return out, dsn, _run(out, dsn)


def _receives(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "queue.jsonl").read_text().splitlines()]


def test_the_postgres_queue_redelivers_after_the_visibility_timeout(pg_incident) -> None:
    folder, dsn, truth = pg_incident
    assert not (folder / "sqs.jsonl").exists() and not (folder / "checkpoints.sqlite").exists()
    logged = _receives(folder)
    mine = [r for r in logged
            if json.loads(r["message"]["Body"])["thread_id"] == truth["thread_id"]]
    assert [r["message"]["Attributes"]["ApproximateReceiveCount"] for r in mine] == ["1", "2"]
    assert [r["worker"] for r in mine] == ["worker-a", "worker-b"]
    assert len({r["message"]["MessageId"] for r in mine}) == 1
    assert _at(mine[1]) - _at(mine[0]) >= 360
    others = [r for r in logged if r not in mine]
    assert others and all(r["message"]["Attributes"]["ApproximateReceiveCount"] == "1"
                          for r in others)
    # the DSN (and its password) is not written anywhere in the folder
    password = psycopg.conninfo.conninfo_to_dict(dsn)["password"]
    assert password and all(str(password) not in p.read_text(errors="replace")
                            for p in folder.iterdir())
    assert {r["queue"] for r in logged} == {f"postgresql:{TABLE}/billing-agent-runs"}
    # the run's rows are gone from the table once the run is over
    with psycopg.connect(dsn) as conn:
        assert conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (0,)
    assert truth["effects_created"] == 2


def _at(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["received_at"]).timestamp()


def test_analyze_names_redelivery_from_the_postgres_queue(
        pg_incident, capsys: pytest.CaptureFixture[str]) -> None:
    folder, dsn, truth = pg_incident
    capsys.readouterr()
    assert main(["analyze", str(folder), "--checkpoints", dsn, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    groups = [g for g in report["groups"]
              if any(a["subject"] == truth["customer"] for a in g["attempts"])]
    (group,) = groups
    (duplicate,) = group["duplicates"]
    assert duplicate["layer"] == "redelivery" and not duplicate["protected"]
    assert set(truth["duplicate_tool_call_ids"]) <= set(group["tool_call_ids"])
    assert any(e.startswith(f"the queue delivered thread {truth['thread_id']}'s run 2 times")
               for e in duplicate["evidence"])
    assert duplicate["confidence"] >= 0.9


def test_a_receive_claims_a_message_once_until_its_visibility_timeout(
        tmp_path: Path, fresh_postgres_dsn: str) -> None:
    with time_machine.travel("2025-03-05 02:00:00+00:00", tick=False) as traveller, \
            PgRunQueue(fresh_postgres_dsn, tmp_path / "q.jsonl", queue="q",
                       visibility_timeout=30) as queue:
        sent = queue.send("thread-1", "hello")
        first = queue.receive("a")
        assert first is not None and first["MessageId"] == sent
        assert queue.receive("b") is None  # invisible while a holds it
        traveller.shift(31)
        again = queue.receive("b")
        assert again is not None and again["Attributes"]["ApproximateReceiveCount"] == "2"
        queue.delete(first)  # a's stale receipt handle deletes nothing
        traveller.shift(31)
        third = queue.receive("c")
        assert third is not None and third["Attributes"]["ApproximateReceiveCount"] == "3"
        queue.delete(third)
        traveller.shift(31)
        assert queue.receive("d") is None


def test_the_effects_record_lives_in_the_postgres_checkpointer_database(
        tmp_path: Path, fresh_postgres_dsn: str) -> None:
    truth = _run(tmp_path, fresh_postgres_dsn, "human_pause", effects="ledger")
    assert truth["effects_created"] == 1 and truth["layer"] == "none"
    with psycopg.connect(fresh_postgres_dsn) as conn:
        rows = conn.execute("SELECT object_id, tool_call_id FROM agent_effects "
                            "WHERE thread_id = %s", (truth["thread_id"],)).fetchall()
    assert rows == [(truth["payment_intents"][0], truth["duplicate_tool_call_ids"][0])]


def test_the_postgres_queue_needs_a_dsn(tmp_path: Path) -> None:
    from twice.lab.__main__ import main as lab_main

    with pytest.raises(SystemExit) as exited:
        lab_main(["run", "redelivery", "--out", str(tmp_path), "--set", "queue=postgres"])
    assert exited.value.code == 2
