"""`twice investigate --traces phoenix+http://127.0.0.1:PORT/PROJECT` against a real Phoenix
server (`arize-phoenix`'s `phoenix serve`, in the Phoenix side environment: tests/side_venvs.py)
started once for this module on free ports with a working directory of its own. The spans come
from the real OpenInference LangChain instrumentation tracing the real LangGraph agent of
tests/agent_graph.py (tests/connectors/traced_agent.py): its tool charged a real
Stripe-compatible server (localstripe), timed out, and its step was re-run by RetryPolicy.
Phoenix stores them as it does any OTLP export; twice asks its REST API for the thread's spans
and names the step retry."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import stripe

from tests.contract import contract
from tests.side_venvs import PHOENIX, ROOT, side_python
from twice.cli import main
from twice.connectors.live import STRIPE_BASE_URL_ENV

pytest.importorskip("localstripe")

from twice.lab.localstripe import LocalStripe  # noqa: E402

STRIPE_KEY = "sk_test_phoenixServer4242"
STRIPE_ENV = "TWICE_TEST_PHOENIX_STRIPE_KEY"
PROJECT = "billing-agents"
THREAD = "thr_px_1"
CALL = "toolu_01PhoenixRetry"
START_S = 300  # Phoenix starts in up to 2 min on a busy 2-core machine
INGEST_S = 60  # spans are written to its database a moment after the export answers

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's aiohttp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


@contextmanager
def phoenix_server(python: str, folder: Path) -> Iterator[str]:
    """`phoenix serve` on free loopback ports (HTTP and gRPC), its SQLite database in `folder`;
    yields its URL once its health check answers, and stops it (what it printed is in
    `folder/phoenix.log`, quoted when it does not start)."""
    port = _free_port()
    log = folder / "phoenix.log"
    env = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(_free_port()), "PHOENIX_WORKING_DIR": str(folder),
           "PHOENIX_TELEMETRY_ENABLED": "false"}
    with log.open("wb") as out:
        # `phoenix serve`, the documented command, beside the environment's python
        proc = subprocess.Popen([str(Path(python).parent / "phoenix"), "serve"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=folder)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"phoenix did not start in {START_S} s:\n"
                                f"{log.read_text(errors='replace')[-3000:]}", pytrace=False)
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tool_spans(url: str) -> list[dict[str, Any]]:
    page = _get(f"{url}/v1/projects/{PROJECT}/spans/otlpv1?limit=1000")
    return [s for s in page["data"] if any(
        a["key"] == "openinference.span.kind" and a["value"].get("string_value") == "TOOL"
        for a in s["attributes"])]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """(stripe url, customer, phoenix url): the agent's tool charged the customer, timed out,
    and its step was retried 3 s later; Phoenix holds both tool spans."""
    python = side_python(PHOENIX)
    folder = tmp_path_factory.mktemp("phoenix")
    with LocalStripe() as stripe_server, phoenix_server(python, folder) as url:
        sdk = stripe.StripeClient(STRIPE_KEY, base_addresses={"api": stripe_server.url})
        customer = sdk.v1.customers.create(params={"email": "ada@example.com"}).id
        card = sdk.v1.payment_methods.create(params={
            "type": "card", "card": {"number": "4242424242424242", "exp_month": 12,
                                     "exp_year": 2030, "cvc": "123"}}).id
        settings = {"tracer": "phoenix", "phoenix": url, "project": PROJECT,
                    "stripe": stripe_server.url, "stripe_key": STRIPE_KEY,
                    "customer": customer, "card": card, "thread": THREAD, "call": CALL}
        done = subprocess.run([python, "-m", "tests.connectors.traced_agent",
                               json.dumps(settings)], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-1] == "2"  # the tool ran twice
        deadline = time.monotonic() + INGEST_S
        while len(tools := _tool_spans(url)) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(tools) == 2, tools
        yield stripe_server.url, customer, url


def test_investigate_reads_a_real_phoenix_and_finds_the_step_retry(
        traced: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    stripe_url, customer, url = traced
    monkeypatch.setenv(STRIPE_ENV, STRIPE_KEY)
    monkeypatch.setenv(STRIPE_BASE_URL_ENV, stripe_url)
    out = tmp_path / "saved"
    around = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rc = main(["investigate", "--customer", customer, "--around", around, "--stripe-key-env",
               STRIPE_ENV, "--traces", f"phoenix+{url}/{PROJECT}", "--format", "json",
               "--out", str(out)])
    report = contract(capsys.readouterr().out)
    assert rc == 0, report["errors"]
    assert report["partial"] is False and len(report["trace_ids"]) == 1
    (group,) = report["groups"]
    assert group["thread_id"] == THREAD
    assert [d["layer"] for d in group["duplicates"]] == ["step_retry"]
    evidence = " ".join(group["duplicates"][0]["evidence"])
    assert "two tool spans" in evidence  # read back from Phoenix, not guessed from the gap

    assert main(["analyze", str(out), "--format", "json"]) == 0
    offline = contract(capsys.readouterr().out)
    assert [[d["layer"] for d in g["duplicates"]] for g in offline["groups"]] == [["step_retry"]]
