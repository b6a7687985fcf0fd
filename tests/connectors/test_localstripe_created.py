"""A Stripe-compatible server that refuses the `created` filter: localstripe 1.15.5 (PyPI, the
real server, in its side environment: tests/side_venvs.py) answers `GET /v1/events` with
created[gte]/[lte] 400 "Unexpected created, types", and lists its events oldest first. twice
then lists every event it holds, keeps the window and the event types itself, says so in a
warning, and keeps the source; events older than the window listed first do not stop the scan,
and none of them is kept."""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
import stripe

from tests.side_venvs import OLD_LOCALSTRIPE, side_python
from twice.cli import main
from twice.connectors.live import STRIPE_BASE_URL_ENV, stripe_api

KEY = "sk_test_oldLocalstripe4242"
KEY_ENV = "TWICE_TEST_OLD_LOCALSTRIPE_KEY"
# localstripe's own app on a loopback port (its `localstripe` command binds every interface),
# its store in memory (the command writes /tmp/localstripe.pickle, shared by every localstripe
# on the machine, at each change)
SERVE = """
import sys
from aiohttp import web
from localstripe.resources import store
from localstripe.server import app
store.dump_to_disk = lambda: None
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def old_localstripe(python: str) -> Iterator[str]:
    port = _free_port()
    log = tempfile.TemporaryFile()  # not a pipe: one nobody reads blocks the server when full
    proc = subprocess.Popen([python, "-c", SERVE, str(port)], stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:  # any answer means it listens (an unknown path is a 404)
                urllib.request.urlopen(f"{url}/v1/events", timeout=2)
            except urllib.error.HTTPError:
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    out = log.read().decode(errors="replace")
                    pytest.fail(f"localstripe 1.15.5 did not start:\n{out[-2000:]}",
                                pytrace=False)
                time.sleep(0.2)
            else:
                break
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def incident() -> Iterator[tuple[str, str, int, int]]:
    """(server url, customer, first and last second of the window): the customer was created
    (its event listed first, before the window), then updated twice inside it. localstripe
    1.15.5 records no PaymentIntent or charge events, so customer events stand in here."""
    with old_localstripe(side_python(OLD_LOCALSTRIPE)) as url:
        sdk = stripe.StripeClient(KEY, base_addresses={"api": url})
        customer = sdk.v1.customers.create(params={"email": "ada@example.com"}).id
        created = int(time.time())
        while int(time.time()) < created + 2:  # the window starts a whole second later
            time.sleep(0.05)
        first = int(time.time())
        for name in ("Ada", "Ada L."):
            sdk.v1.customers.update(customer, params={"name": name})
        yield url, customer, first, int(time.time())


def test_fetch_keeps_the_window_from_an_unfiltered_oldest_first_scan(
        incident: tuple[str, str, int, int]) -> None:
    url, customer, first, last = incident
    client = stripe.StripeClient(KEY, base_addresses={"api": url}, max_network_retries=0)
    fetched = stripe_api.fetch_events(
        client, stripe_api.Subject(customer), datetime.fromtimestamp(first, UTC),
        datetime.fromtimestamp(last, UTC), types=["customer.created", "customer.updated"])
    details = " ".join(w.detail for w in fetched.warnings)
    assert "refused the `created` filter" in details and "Unexpected created" in details
    assert "refused the `types[]` filter" in details
    # the customer's creation, listed first and older than the window, did not end the scan
    assert [e["type"] for e in fetched.events] == ["customer.updated", "customer.updated"]
    assert all(first <= e["created"] <= last for e in fetched.events)


def test_investigate_keeps_the_source_and_says_what_it_filtered(
        incident: tuple[str, str, int, int], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the fallback the whole Stripe source was lost (exit 2, nothing analysed)."""
    url, customer, _, _ = incident
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(STRIPE_BASE_URL_ENV, url)
    around = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rc = main(["investigate", "--customer", customer, "--around", around,
               "--stripe-key-env", KEY_ENV, "--format", "json"])
    printed = capsys.readouterr()
    report: dict[str, Any] = json.loads(printed.out)
    assert rc == 0, report["errors"]
    assert report["partial"] is False and report["errors"] == []
    warnings = " ".join(w["detail"] for w in report["warnings"])
    assert "refused the `created` filter" in warnings
    assert "refused the `types[]` filter" in warnings
    assert KEY not in printed.out + printed.err
