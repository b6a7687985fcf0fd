"""`twice investigate --traces langsmith+http://...` against a local server that keeps what the
real `langsmith` SDK posts while tracing a real LangGraph agent (tests/agent_graph.py) whose
tool charged a real Stripe-compatible server (localstripe), timed out, and was re-run by its
RetryPolicy: twice reads the runs back through LangSmith's query API and names the step retry.
The API key comes from LANGSMITH_API_KEY only and appears in no output or saved file."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import stripe

from tests.agent_graph import Ledger, build_agent, charge_turn, final_turn, run
from tests.connectors.langsmith_server import Store, langsmith_server
from tests.contract import contract
from twice.cli import main
from twice.cli.exits import EXIT_PARTIAL
from twice.connectors.live import LANGSMITH_KEY_ENV, STRIPE_BASE_URL_ENV

pytest.importorskip("localstripe")
pytest.importorskip("langsmith")

from twice.lab.localstripe import LocalStripe  # noqa: E402

STRIPE_KEY = "sk_test_langsmithLive4242"
STRIPE_ENV = "TWICE_TEST_LANGSMITH_STRIPE_KEY"
LS_KEY = "lsv2_pt_planted0key0never0shown_0123456789"
PROJECT = "billing agents"  # a space: the URL quotes it
THREAD = "thr_ls_1"
CALL = "toolu_01LangSmithRetry"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's aiohttp


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[str, str, str, Store]]:
    """(stripe url, customer, langsmith url, its store): the agent's tool charged the customer,
    timed out, and its step was retried 3 s later (localstripe's times have whole seconds: a
    shorter backoff puts both charges inside one tool run); the SDK's tracer sent every run
    to the server."""
    from langchain_core.tracers import LangChainTracer
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import RetryPolicy
    from langsmith import Client

    with LocalStripe() as stripe_server, langsmith_server(LS_KEY, page=3) as (url, store):
        sdk = stripe.StripeClient(STRIPE_KEY, base_addresses={"api": stripe_server.url})
        customer = sdk.v1.customers.create(params={"email": "ada@example.com"}).id
        card = sdk.v1.payment_methods.create(params={
            "type": "card", "card": {"number": "4242424242424242", "exp_month": 12,
                                     "exp_year": 2030, "cvc": "123"}}).id

        def charge(customer_id: str, amount: int, currency: str) -> None:
            intent = sdk.v1.payment_intents.create(params={
                "amount": amount, "currency": currency, "customer": customer_id,
                "payment_method": card, "metadata": {"thread_id": THREAD, "tool_call_id": CALL}})
            sdk.v1.payment_intents.confirm(intent.id)

        client = Client(api_url=url, api_key=LS_KEY)
        tracer = LangChainTracer(project_name=PROJECT, client=client)
        ledger = Ledger()
        graph = build_agent(InMemorySaver(), [charge_turn(CALL, customer_id=customer),
                                              final_turn()],
                            ledger=ledger, fail_first=TimeoutError("read timed out"),
                            handle_tool_errors=False, provider=charge,
                            tool_retry=RetryPolicy(max_attempts=2, initial_interval=3.0,
                                                   jitter=False, retry_on=TimeoutError))
        graph = graph.with_config({"callbacks": [tracer]})
        run(graph, THREAD)
        tracer.wait_for_futures()
        client.flush()
        assert ledger.calls == 2
        tools = [r for r in store.runs.values() if r.get("run_type") == "tool"]
        assert len(tools) == 2 and all(r.get("end_time") for r in tools)  # posted and patched
        yield stripe_server.url, customer, url, store


def _investigate(traced: tuple[str, str, str, Store], monkeypatch: pytest.MonkeyPatch,
                 capsys: pytest.CaptureFixture[str], *extra: str, key: str = LS_KEY,
                 project: str = "billing%20agents") -> tuple[int, dict[str, Any], str]:
    stripe_url, customer, url, _ = traced
    monkeypatch.setenv(STRIPE_ENV, STRIPE_KEY)
    monkeypatch.setenv(STRIPE_BASE_URL_ENV, stripe_url)
    monkeypatch.setenv(LANGSMITH_KEY_ENV, key)
    around = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rc = main(["investigate", "--customer", customer, "--around", around, "--stripe-key-env",
               STRIPE_ENV, "--traces", f"langsmith+{url}/{project}", "--format", "json",
               *extra])
    printed = capsys.readouterr()
    return rc, contract(printed.out), printed.out + printed.err


def test_investigate_reads_langsmith_runs_and_finds_the_step_retry(
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
    # from the two tool runs read back (without traces it is a guess from the gap alone)
    assert "two tool spans" in evidence and "the tool itself executed twice" in evidence

    queries = [(m, p, h) for m, p, h, _ in store.seen[asked:]]
    assert any(p.startswith("/sessions?") for _, p, _ in queries)
    assert sum(p == "/runs/query" for _, p, _ in queries) >= 2  # pages of 3 runs
    assert all(h.get("x-api-key") == LS_KEY for _, _, h in queries)
    assert LS_KEY not in printed
    for path in out.iterdir():
        assert LS_KEY.encode() not in path.read_bytes(), path

    assert main(["analyze", str(out), "--format", "json"]) == 0
    offline = contract(capsys.readouterr().out)
    assert [[d["layer"] for d in g["duplicates"]] for g in offline["groups"]] == [["step_retry"]]


def test_a_wrong_key_is_a_partial_result_that_never_shows_the_key(
        traced: tuple[str, str, str, Store], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    wrong = "lsv2_pt_wrong0key0also0hidden_9876543210"
    rc, report, printed = _investigate(traced, monkeypatch, capsys, key=wrong)
    assert rc == EXIT_PARTIAL
    (error,) = report["errors"]
    assert "HTTP 401" in error and "langsmith+http://127.0.0.1" in error
    assert wrong not in printed and LS_KEY not in printed
    assert report["groups"]  # the Stripe evidence is kept


def test_an_unknown_project_is_named(
        traced: tuple[str, str, str, Store], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, report, _ = _investigate(traced, monkeypatch, capsys, project="nobody")
    assert rc == EXIT_PARTIAL
    assert "no project named 'nobody'" in report["errors"][0]


def test_the_cloud_form_needs_the_key_in_its_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from twice.connectors.base import SourceError
    from twice.connectors.live.traces import backend_from_url

    monkeypatch.delenv(LANGSMITH_KEY_ENV, raising=False)
    with pytest.raises(SourceError, match=LANGSMITH_KEY_ENV):
        backend_from_url("langsmith://my-project")
    monkeypatch.setenv(LANGSMITH_KEY_ENV, LS_KEY)
    backend = backend_from_url("langsmith://my-project")
    assert backend.name == "langsmith"

