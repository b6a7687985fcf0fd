"""`twice analyze` end to end: the bundled samples give their true layer; bad input exits 2."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.contract import contract
from twice.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data"
INCIDENTS = sorted(p.name for p in SAMPLES.iterdir() if (p / "truth.json").exists())


def analyze_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["analyze", *args, "--format", "json"]) == 0
    out: dict[str, Any] = contract(capsys.readouterr().out)
    return out


def test_samples_cover_every_layer_and_two_controls() -> None:
    truths = [json.loads((SAMPLES / n / "truth.json").read_text()) for n in INCIDENTS]
    layers = {t["layer"] for t in truths}
    assert {"sdk_retry", "gateway_retry", "step_retry", "redelivery",
            "model_reemission"} <= layers
    assert sum(t["layer"] == "none" for t in truths) >= 2


@pytest.mark.parametrize("name", INCIDENTS)
def test_sample_incident_gets_its_true_layer(name: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    truth = json.loads((SAMPLES / name / "truth.json").read_text())
    report = analyze_json(capsys, str(SAMPLES / name))
    assert report["version"] == 1
    assert report["warnings"] == []
    if truth["layer"] == "none":
        # a control: nothing for the incident's customer is called a duplicate
        flagged = [g for g in report["groups"]
                   if any(a["subject"] == truth["customer"] for a in g["attempts"])]
        assert flagged == []
        return
    (group,) = [g for g in report["groups"]
                if set(truth["duplicate_tool_call_ids"]) <= set(g["tool_call_ids"])]
    assert {d["layer"] for d in group["duplicates"]} == {truth["layer"]}
    assert all(d["confidence"] >= 0.7 for d in group["duplicates"])
    created = [a for a in group["attempts"] if a["effect"] == "created"]
    assert len(created) == truth["effects_created"]
    assert all(d["protected"] == truth.get("protected", False) for d in group["duplicates"])
    assert all(a["request_id"] for a in group["attempts"])
    # noise from other customers and threads is not flagged
    assert len(report["groups"]) == 1


EXPECTED_FINDINGS = {
    "step_retry": {"key_regenerated", "span_missing"},
    "redelivery": {"key_regenerated"},
    "model_reemission": {"failure_reported_for_unknown_outcome"},
    "gateway_retry": {"key_missing"},
    "sdk_retry": {"key_missing"},
    "sdk_retry_replayed": {"replayed"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED_FINDINGS))
def test_sample_findings(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    report = analyze_json(capsys, str(SAMPLES / name))
    codes = {f["code"] for g in report["groups"] for f in g["findings"]}
    assert EXPECTED_FINDINGS[name] <= codes


def test_explicit_flags_give_the_same_verdict_as_the_folder(
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = SAMPLES / "step_retry"
    by_folder = analyze_json(capsys, str(folder))
    by_flags = analyze_json(capsys, "--stripe-events", str(folder / "events.json"),
                            "--checkpoints", str(folder / "checkpoints.sqlite"),
                            "--spans", str(folder / "spans.jsonl"))
    assert [d["layer"] for g in by_flags["groups"] for d in g["duplicates"]] == \
        [d["layer"] for g in by_folder["groups"] for d in g["duplicates"]] == ["step_retry"]


def test_table_output_names_layer_evidence_and_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SAMPLES / "redelivery")]) == 0
    out = capsys.readouterr().out
    assert "redelivery" in out
    assert "delivery count 2" in out
    assert "fix:" in out


def test_installed_entry_point_runs() -> None:
    exe = shutil.which("twice")
    assert exe, "the `twice` console script is installed by `pip install -e .`"
    done = subprocess.run([exe, "analyze", str(SAMPLES / "model_reemission"), "--format",
                           "json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert contract(done.stdout)["groups"][0]["duplicates"][0]["layer"] == "model_reemission"


def _fails_cleanly(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["analyze", *args]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.err.startswith("twice: ")
    return captured.err


def test_missing_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = _fails_cleanly(capsys, str(tmp_path / "nope"))
    assert "no such file" in err


def test_folder_with_nothing_recognisable(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")
    err = _fails_cleanly(capsys, str(tmp_path))
    assert str(tmp_path) in err


def test_truncated_events_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = (SAMPLES / "step_retry" / "events.json").read_text()
    bad = tmp_path / "events.json"
    bad.write_text(text[: len(text) // 2])
    err = _fails_cleanly(capsys, "--stripe-events", str(bad))
    assert "events.json" in err


def test_sqlite_with_other_tables(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("create table users (id integer primary key, name text)")
    err = _fails_cleanly(capsys, "--checkpoints", str(db))
    assert "app.sqlite" in err


def test_unreachable_dsn_is_named_without_its_password(
        capsys: pytest.CaptureFixture[str]) -> None:
    dsn = "postgresql://reader:s3cret-pw@127.0.0.1:9/agent?connect_timeout=2"
    err = _fails_cleanly(capsys, "--checkpoints", dsn)
    assert "s3cret-pw" not in err
    assert "127.0.0.1" in err


def test_bad_line_in_spans_is_a_warning_not_a_failure(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    folder = tmp_path / "incident"
    shutil.copytree(SAMPLES / "step_retry", folder)
    with (folder / "spans.jsonl").open("a") as fh:
        fh.write('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": \n')
    report = analyze_json(capsys, str(folder))
    assert any("spans.jsonl" in w["source"] for w in report["warnings"])
    assert report["groups"][0]["duplicates"][0]["layer"] == "step_retry"


def test_bad_option_values(capsys: pytest.CaptureFixture[str]) -> None:
    # a value click's option type refuses: its usage error, exit 2 (tests/cli/test_cli_inputs.py)
    with pytest.raises(SystemExit) as exited:
        main(["analyze", str(SAMPLES / "step_retry"), "--bands", "fast,slow"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--bands" in err and "Traceback" not in err


def test_the_json_contract_shape(capsys: pytest.CaptureFixture[str]) -> None:
    report = analyze_json(capsys, str(SAMPLES / "step_retry"))
    assert set(report) >= {"version", "groups", "warnings"}
    group = report["groups"][0]
    assert set(group) >= {"group_id", "tool_name", "thread_id", "tool_call_ids", "attempts",
                          "duplicates", "findings"}
    attempt = group["attempts"][0]
    assert set(attempt) >= {"attempt_id", "at", "source", "request_id", "idempotency_key",
                            "tool_call_id", "span_id", "effect", "object_id"}
    assert attempt["at"].endswith("Z")
    dup = group["duplicates"][0]
    assert set(dup) >= {"first", "second", "gap_seconds", "band", "layer", "confidence",
                        "protected", "evidence", "fix"}
    assert 0 <= dup["confidence"] <= 1
    ids = {a["attempt_id"] for a in group["attempts"]}
    assert {dup["first"], dup["second"]} <= ids
    for f in group["findings"]:
        assert set(f) == {"code", "detail", "fix"}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


def test_checkpoints_from_a_postgres_dsn_give_the_same_verdict(
        tmp_path: Path, fresh_postgres_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The lab's real agent writes its checkpoints with PostgresSaver; twice reads them back
    over the DSN (read-only session) beside the provider's events and the spans."""
    from twice.lab.scenarios import run_scenario

    folder = run_scenario("step_retry", tmp_path / "incident", seed=11, noise=2,
                          dsn=fresh_postgres_dsn)
    truth = json.loads((folder / "truth.json").read_text())
    report = analyze_json(capsys, "--checkpoints", fresh_postgres_dsn,
                          "--stripe-events", str(folder / "events.json"),
                          "--spans", str(folder / "spans.jsonl"))
    (group,) = report["groups"]
    assert group["tool_call_ids"] == truth["duplicate_tool_call_ids"]
    assert [d["layer"] for d in group["duplicates"]] == ["step_retry"]
    password = fresh_postgres_dsn.split(":")[2].split("@")[0]
    assert password not in json.dumps(report)
