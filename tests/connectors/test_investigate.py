"""`twice investigate` against live local servers: the lab's Stripe-compatible server (the real
stripe SDK talks to it), a real PostgreSQL written by LangGraph's PostgresSaver, and a trace
backend answering Jaeger's and Tempo's query APIs with spans from the real OpenTelemetry SDK."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.connectors.hostile_http import hostile_backend
from tests.contract import contract
from twice.cli import main
from twice.lab.scenarios import run_scenario_with_server
from twice.lab.stripe_server import StripeServer
from twice.lab.trace_server import TraceServer

ROOT = Path(__file__).resolve().parents[2]
PLANTED_KEY = "sk_test_51PlantedSecretKeyForLeakScan0042"
KEY_ENV = "TWICE_TEST_STRIPE_KEY"


@dataclass
class Live:
    folder: Path
    truth: dict[str, Any]
    server: StripeServer
    traces: TraceServer
    dsn: str
    around: str


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory,
         new_postgres_database: Any) -> Iterator[Live]:
    dsn = new_postgres_database()
    folder, server = run_scenario_with_server(
        "step_retry", tmp_path_factory.mktemp("lab") / "incident", seed=5, noise=3, dsn=dsn)
    truth = json.loads((folder / "truth.json").read_text())
    events = json.loads((folder / "events.json").read_text())["data"]
    first = min(e["created"] for e in events
                if e["data"]["object"].get("customer") == truth["customer"])
    server.api_keys[PLANTED_KEY] = "full"
    server.start()  # the provider's state, answering live again
    try:
        with TraceServer(folder / "spans.jsonl") as traces:
            around = datetime.fromtimestamp(first, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            yield Live(folder, truth, server, traces, dsn, around)
    finally:
        server.stop()


def _investigate(live: Live, out: Path, capsys: pytest.CaptureFixture[str],
                 monkeypatch: pytest.MonkeyPatch, *extra: str, key: str = PLANTED_KEY,
                 traces: str = "jaeger") -> tuple[int, dict[str, Any], str]:
    monkeypatch.setenv(KEY_ENV, key)
    rc = main(["investigate", "--customer", live.truth["customer"], "--around", live.around,
               "--window", "2h", "--stripe-key-env", KEY_ENV,
               "--stripe-base-url", live.server.url, "--checkpoints", live.dsn,
               "--traces", f"{traces}+{live.traces.url}", "--out", str(out),
               "--format", "json", *extra])
    captured = capsys.readouterr()
    return rc, contract(captured.out), captured.out + captured.err


def _analyze(folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    out: dict[str, Any] = contract(capsys.readouterr().out)
    return out


def _verdicts(report: dict[str, Any]) -> list[tuple[str, ...]]:
    return [(g["group_id"], *(d["layer"] for d in g["duplicates"])) for g in report["groups"]]


@pytest.mark.parametrize("backend", ["jaeger", "tempo", "phoenix"])
def test_investigate_finds_the_duplicate_and_the_saved_folder_agrees(
        live: Live, tmp_path: Path, backend: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "saved"
    rc, report, _ = _investigate(live, out, capsys, monkeypatch, traces=backend)
    assert rc == 0, report.get("errors")
    assert report["partial"] is False
    (group,) = report["groups"]
    assert group["tool_call_ids"] == live.truth["duplicate_tool_call_ids"]
    assert [d["layer"] for d in group["duplicates"]] == ["step_retry"]
    # only the incident's thread was pulled, not the noise threads
    assert report["thread_ids"] == [live.truth["thread_id"]]
    assert report["trace_ids"]
    offline = _analyze(out, capsys)
    assert _verdicts(offline) == _verdicts(report)


def test_no_secret_reaches_output_or_saved_files(
        live: Live, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "saved"
    _, _, printed = _investigate(live, out, capsys, monkeypatch)
    password = live.dsn.split(":")[2].split("@")[0]
    for secret in (PLANTED_KEY, password):
        assert secret not in printed
        for path in out.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


def test_wrong_key_is_one_clear_message_and_a_partial_result(
        live: Live, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "sk_test_51WrongKeyNobodyIssued000000000"
    rc, report, printed = _investigate(live, tmp_path / "saved", capsys, monkeypatch, key=wrong)
    assert rc == 3  # a partial result
    assert report["partial"] is True
    assert any("stripe" in e.lower() for e in report["errors"])
    assert wrong not in printed
    assert "Traceback" not in printed


def test_unreachable_trace_backend_keeps_the_rest_labelled_partial(
        live: Live, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, PLANTED_KEY)
    rc = main(["investigate", "--customer", live.truth["customer"], "--around", live.around,
               "--stripe-key-env", KEY_ENV, "--stripe-base-url", live.server.url,
               "--checkpoints", live.dsn, "--traces", "jaeger+http://127.0.0.1:9",
               "--format", "json"])
    report = contract(capsys.readouterr().out)
    assert rc == 3  # a partial result
    assert report["partial"] is True
    assert any("127.0.0.1:9" in e for e in report["errors"])
    # the provider and the checkpoints still name the layer
    assert [d["layer"] for g in report["groups"] for d in g["duplicates"]] == ["step_retry"]


def test_a_trace_backend_redirecting_to_an_internal_host_is_not_followed(
        live: Live, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SSRF: the backend answers 302 to another host; that host is never asked, and nothing of
    it reaches the output or the saved folder; the rest is kept, labelled partial."""
    out = tmp_path / "saved"
    monkeypatch.setenv(KEY_ENV, PLANTED_KEY)
    with hostile_backend("redirect") as (url, internal):
        rc = main(["investigate", "--customer", live.truth["customer"], "--around",
                   live.around, "--stripe-key-env", KEY_ENV, "--stripe-base-url",
                   live.server.url, "--checkpoints", live.dsn, "--traces", f"jaeger+{url}",
                   "--out", str(out), "--format", "json"])
    printed = capsys.readouterr()
    report = contract(printed.out)
    assert rc == 3 and report["partial"] is True
    assert any("redirect to another host" in e for e in report["errors"]), report["errors"]
    assert internal.requests == []
    assert [d["layer"] for g in report["groups"] for d in g["duplicates"]] == ["step_retry"]
    written = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert b"redirect to another host" in written  # the README names the failed source
    for text in (printed.out + printed.err, written.decode(errors="replace")):
        assert "INTERNAL" not in text and "int3rnal" not in text


def test_database_with_other_tables_is_named(
        live: Live, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, fresh_postgres_dsn: str) -> None:
    import psycopg

    with psycopg.connect(fresh_postgres_dsn, autocommit=True) as conn:
        conn.execute("create table orders (id serial primary key, total int)")
    monkeypatch.setenv(KEY_ENV, PLANTED_KEY)
    rc = main(["investigate", "--customer", live.truth["customer"], "--around", live.around,
               "--stripe-key-env", KEY_ENV, "--stripe-base-url", live.server.url,
               "--checkpoints", fresh_postgres_dsn, "--format", "json"])
    report = contract(capsys.readouterr().out)
    assert rc == 3  # a partial result
    assert any("127.0.0.1" in e and "checkpoint" in e.lower() for e in report["errors"])


TRACE_PASSWORD = "tr4ce-Backend-Pw-planted"


@pytest.mark.parametrize("backend", ["jaeger", "tempo"])
def test_a_trace_backend_echoing_credentials_leaks_them_nowhere(
        live: Live, tmp_path: Path, backend: str) -> None:
    """The backend answers 401 quoting the Authorization header, `user:password` and the URL
    with them (`TraceServer(echo_credentials=True)`); `twice investigate` run as a user runs
    it: neither the password nor its basic-auth form is in stdout, stderr or the saved folder."""
    wrong = "wrong-" + TRACE_PASSWORD
    out = tmp_path / "saved"
    with TraceServer(live.folder / "spans.jsonl", auth=("ops", TRACE_PASSWORD),
                     echo_credentials=True) as traces:
        host = traces.url.removeprefix("http://")
        done = subprocess.run(
            [sys.executable, "-m", "twice.cli", "investigate", "--customer",
             live.truth["customer"], "--around", live.around, "--stripe-key-env", KEY_ENV,
             "--stripe-base-url", live.server.url, "--checkpoints", live.dsn,
             "--traces", f"{backend}+http://ops:{wrong}@{host}", "--out", str(out),
             "--format", "json"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, KEY_ENV: PLANTED_KEY, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 3, done.stderr  # a partial result
    report = contract(done.stdout)
    assert any("HTTP 401" in e and "***" in e for e in report["errors"])
    basic = base64.b64encode(f"ops:{wrong}".encode()).decode()
    written = [p.read_bytes() for p in out.rglob("*") if p.is_file()]
    assert (out / "README.md").exists() and "HTTP 401" in (out / "README.md").read_text()
    for secret in (TRACE_PASSWORD, basic):
        assert secret not in done.stdout and secret not in done.stderr
        assert all(secret.encode() not in data for data in written)
    assert "Traceback" not in done.stderr
