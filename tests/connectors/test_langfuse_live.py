"""`twice investigate --traces langfuse+http://...` against a local Langfuse-compatible server
(tests/connectors/langfuse_server.py: it stores what the real `langfuse` SDK sends over OTLP as
Langfuse's ingestion does, and answers its public observations API from that) fed by the real
SDK tracing a real LangGraph agent (tests/connectors/traced_agent.py, run in the Langfuse side
environment: tests/side_venvs.py) whose tool charged a real Stripe-compatible server
(localstripe), timed out, and was re-run by its RetryPolicy: twice reads the tool observations
back and names the step retry. The keys come from LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY (or
the URL) and appear in no output or saved file."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import stripe

from tests.connectors.langfuse_server import Store, langfuse_server
from tests.contract import contract
from tests.side_venvs import LANGFUSE, ROOT, side_python
from twice.cli import main
from twice.cli.exits import EXIT_PARTIAL
from twice.connectors.live import (
    LANGFUSE_PUBLIC_KEY_ENV,
    LANGFUSE_SECRET_KEY_ENV,
    STRIPE_BASE_URL_ENV,
)

pytest.importorskip("localstripe")
pytest.importorskip("opentelemetry.proto")  # the server decodes what the SDK sends

from twice.lab.localstripe import LocalStripe  # noqa: E402

STRIPE_KEY = "sk_test_langfuseLive4242"
STRIPE_ENV = "TWICE_TEST_LANGFUSE_STRIPE_KEY"
PUBLIC_KEY = "pk-lf-planted0public0key0never0shown"
SECRET_KEY = "sk-lf-planted0secret0key0never0shown"
THREAD = "thr_lf_1"
CALL = "toolu_01LangfuseRetry"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's aiohttp


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[str, str, str, Store]]:
    """(stripe url, customer, langfuse url, its store): the agent's tool charged the customer,
    timed out, and its step was retried; the SDK sent every span to the server."""
    python = side_python(LANGFUSE)
    with LocalStripe() as stripe_server, \
            langfuse_server(PUBLIC_KEY, SECRET_KEY, page=2) as (url, store):
        sdk = stripe.StripeClient(STRIPE_KEY, base_addresses={"api": stripe_server.url})
        customer = sdk.v1.customers.create(params={"email": "ada@example.com"}).id
        card = sdk.v1.payment_methods.create(params={
            "type": "card", "card": {"number": "4242424242424242", "exp_month": 12,
                                     "exp_year": 2030, "cvc": "123"}}).id
        settings = {"tracer": "langfuse", "langfuse": url, "public_key": PUBLIC_KEY,
                    "secret_key": SECRET_KEY, "stripe": stripe_server.url, "stripe_key": STRIPE_KEY,
                    "customer": customer, "card": card, "thread": THREAD, "call": CALL}
        done = subprocess.run([python, "-m", "tests.connectors.traced_agent",
                               json.dumps(settings)], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-1] == "2"  # the tool ran twice
        tools = [o for o in store.observations.values() if o["type"] == "TOOL"]
        assert len(tools) == 2 and all(o["endTime"] for o in tools)
        yield stripe_server.url, customer, url, store


def _investigate(traced: tuple[str, str, str, Store], monkeypatch: pytest.MonkeyPatch,
                 capsys: pytest.CaptureFixture[str], *extra: str,
                 keys: tuple[str, str] | None = (PUBLIC_KEY, SECRET_KEY),
                 url: str | None = None) -> tuple[int, dict[str, Any], str]:
    stripe_url, customer, langfuse_url, _ = traced
    monkeypatch.setenv(STRIPE_ENV, STRIPE_KEY)
    monkeypatch.setenv(STRIPE_BASE_URL_ENV, stripe_url)
    for variable, key in zip((LANGFUSE_PUBLIC_KEY_ENV, LANGFUSE_SECRET_KEY_ENV),
                             keys or ("", ""), strict=True):
        monkeypatch.setenv(variable, key)
    around = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rc = main(["investigate", "--customer", customer, "--around", around, "--stripe-key-env",
               STRIPE_ENV, "--traces", url or f"langfuse+{langfuse_url}", "--format", "json",
               *extra])
    printed = capsys.readouterr()
    return rc, contract(printed.out), printed.out + printed.err


def test_investigate_reads_langfuse_observations_and_finds_the_step_retry(
        traced: tuple[str, str, str, Store], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    store = traced[3]
    asked = len(store.seen)
    out = tmp_path / "saved"
    rc, report, printed = _investigate(traced, monkeypatch, capsys, "--out", str(out))
    assert rc == 0, report["errors"]
    assert report["partial"] is False and len(report["trace_ids"]) == 1
    (group,) = report["groups"]
    assert group["tool_call_ids"] == [CALL] and group["thread_id"] == THREAD
    assert [d["layer"] for d in group["duplicates"]] == ["step_retry"]
    evidence = " ".join(group["duplicates"][0]["evidence"])
    # from the two tool observations read back (without traces it is a guess from the gap)
    assert "two tool spans" in evidence and "the tool itself executed twice" in evidence

    queries = [(m, p, h) for m, p, h in store.seen[asked:]]
    assert all(p.startswith("/api/public/v2/observations?") for _, p, _ in queries)
    assert sum("type=TOOL" in p for _, p, _ in queries) >= 1
    assert sum("cursor=" in p for _, p, _ in queries) >= 1  # pages of 2 observations
    assert all(h.get("Authorization") == store.authorization for _, _, h in queries)
    for key in (PUBLIC_KEY, SECRET_KEY):
        assert key not in printed
        for path in out.iterdir():
            assert key.encode() not in path.read_bytes(), path

    assert main(["analyze", str(out), "--format", "json"]) == 0
    offline = contract(capsys.readouterr().out)
    assert [[d["layer"] for d in g["duplicates"]] for g in offline["groups"]] == [["step_retry"]]


def test_keys_in_the_url_are_used_and_never_shown(
        traced: tuple[str, str, str, Store], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    host = traced[2].removeprefix("http://")
    rc, report, printed = _investigate(
        traced, monkeypatch, capsys, keys=None,
        url=f"langfuse+http://{PUBLIC_KEY}:{SECRET_KEY}@{host}")
    assert rc == 0, report["errors"]
    assert [[d["layer"] for d in g["duplicates"]] for g in report["groups"]] == [["step_retry"]]
    assert PUBLIC_KEY not in printed and SECRET_KEY not in printed


def test_wrong_keys_are_a_partial_result_that_never_shows_them(
        traced: tuple[str, str, str, Store], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    wrong = ("pk-lf-wrong0public0also0hidden", "sk-lf-wrong0secret0also0hidden")
    rc, report, printed = _investigate(traced, monkeypatch, capsys, keys=wrong)
    assert rc == EXIT_PARTIAL
    (error,) = report["errors"]
    assert "HTTP 401" in error and "langfuse+http://127.0.0.1" in error
    for key in (*wrong, PUBLIC_KEY, SECRET_KEY):
        assert key not in printed
    assert report["groups"]  # the Stripe evidence is kept


def test_no_keys_is_an_error_naming_the_variables(
        traced: tuple[str, str, str, Store], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, report, _ = _investigate(traced, monkeypatch, capsys, keys=None)
    assert rc == EXIT_PARTIAL
    (error,) = report["errors"]
    assert "no Langfuse keys" in error and LANGFUSE_SECRET_KEY_ENV in error


def test_the_tool_observations_read_back_as_the_sdk_sent_them(
        traced: tuple[str, str, str, Store], monkeypatch: pytest.MonkeyPatch) -> None:
    """One trace; the first attempt failed (level ERROR, its status message a timeout), the
    second did not; both of one tool call of the thread, with the tool's arguments."""
    from twice.connectors.live.traces import backend_from_url

    monkeypatch.setenv(LANGFUSE_PUBLIC_KEY_ENV, PUBLIC_KEY)
    monkeypatch.setenv(LANGFUSE_SECRET_KEY_ENV, SECRET_KEY)
    backend = backend_from_url(f"langfuse+{traced[2]}")
    now = datetime.now(UTC)
    (trace_id,) = backend.find_traces(tags={"gen_ai.conversation.id": THREAD},
                                      start=now - timedelta(hours=1), end=now)
    assert backend.find_traces(tags={"gen_ai.conversation.id": "another"},
                               start=now - timedelta(hours=1), end=now) == []
    result, doc = backend.get_trace(trace_id)
    assert result.warnings == []
    tools = result.rows[result.rows["kind"] == "tool_span"].sort_values("at")
    assert list(tools["tool_call_id"]) == [CALL, CALL]
    assert list(tools["thread_id"]) == [THREAD, THREAD]
    assert list(tools["outcome"]) == ["timeout", "unknown"]
    assert "read timed out" in str(tools["detail"].iloc[0])
    assert set(tools["amount"]) == {4900} and set(tools["tool_name"]) == {
        "charge_subscription"}
    assert all(set(o.get("metadata", {})) <= {"tool_call_id", "thread_id", "langgraph_step",
                                               "langgraph_node", "checkpoint_ns",
                                               "langfuse_session_id", "resourceAttributes"}
               for o in doc["data"])  # only what twice reads is kept for saving
