"""`twice investigate` pointed at localstripe (a real Stripe-compatible server, PyPI) by the
documented environment variable alone: localstripe refuses the `types[]` filter, so twice lists
every event type and keeps the effect types itself, and still finds the duplicate charge the
real stripe SDK made there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import stripe

from twice.cli import main
from twice.connectors.live import STRIPE_BASE_URL_ENV

pytest.importorskip("localstripe")

from twice.lab.localstripe import LocalStripe  # noqa: E402

KEY = "sk_test_localstripeKey4242"
KEY_ENV = "TWICE_TEST_LOCALSTRIPE_KEY"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's aiohttp


@pytest.fixture(scope="module")
def incident() -> Iterator[tuple[str, str]]:
    """(server url, customer id): one tool call that charged the customer twice."""
    with LocalStripe() as server:
        sdk = stripe.StripeClient(KEY, base_addresses={"api": server.url})
        customer = sdk.v1.customers.create(params={"email": "ada@example.com"})
        card = sdk.v1.payment_methods.create(params={
            "type": "card",
            "card": {"number": "4242424242424242", "exp_month": 12, "exp_year": 2030,
                     "cvc": "123"}})
        other = sdk.v1.customers.create(params={"email": "bob@example.com"})
        for who, call in ((customer.id, "call_1"), (customer.id, "call_1"), (other.id, "call_9")):
            intent = sdk.v1.payment_intents.create(params={
                "amount": 2000, "currency": "usd", "customer": who, "payment_method": card.id,
                "metadata": {"thread_id": "thr_1", "tool_call_id": call}})
            sdk.v1.payment_intents.confirm(intent.id)
        yield server.url, customer.id


def test_investigate_finds_the_duplicate_on_localstripe(
        incident: tuple[str, str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, customer = incident
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(STRIPE_BASE_URL_ENV, url)
    around = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rc = main(["investigate", "--customer", customer, "--around", around,
               "--stripe-key-env", KEY_ENV, "--format", "json"])
    printed = capsys.readouterr()
    report = json.loads(printed.out)
    assert rc == 0, report["errors"]
    assert report["partial"] is False
    (group,) = report["groups"]
    assert group["tool_call_ids"] == ["call_1"]
    assert len(group["duplicates"]) == 1
    warnings = " ".join(w["detail"] for w in report["warnings"])
    assert "refused the `types[]` filter" in warnings and "Unexpected types" in warnings
    assert KEY not in printed.out + printed.err


def test_the_base_url_flag_is_documented() -> None:
    from click.testing import CliRunner

    from twice.cli.root import cli

    shown = CliRunner().invoke(cli, ["investigate", "--help"]).output
    assert "--stripe-base-url" in shown and STRIPE_BASE_URL_ENV in shown
