"""`twice investigate` pointed at localstripe (a real Stripe-compatible server, PyPI) by the
documented environment variable alone: localstripe refuses the `types[]` filter, so twice lists
every event type and keeps the effect types itself, and still finds the duplicate charge the
real stripe SDK made there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import stripe

from twice.cli import main
from twice.cli.exits import EXIT_PARTIAL
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


TRACE_PASSWORD = "tr4ce-Pw-planted-in-url"


def _saved_partial(url: str, customer: str, out: Path, capsys: pytest.CaptureFixture[str],
                   monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Investigate with a trace backend nobody answers at: a partial folder is saved."""
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(STRIPE_BASE_URL_ENV, url)
    around = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    main(["investigate", "--customer", customer, "--around", around, "--stripe-key-env", KEY_ENV,
          "--traces", f"jaeger+http://ops:{TRACE_PASSWORD}@127.0.0.1:9", "--out", str(out),
          "--format", "json"])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def test_a_saved_partial_folder_stays_partial_when_analysed(
        incident: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, customer = incident
    out = tmp_path / "saved"
    live = _saved_partial(url, customer, out, capsys, monkeypatch)
    assert live["partial"] is True and live["errors"]

    saved = json.loads((out / "twice-manifest.json").read_text())
    assert saved["partial"] is True and saved["errors"] == live["errors"]
    by_name = {s["name"]: s for s in saved["sources"]}
    assert by_name["stripe_api"]["ok"] is True and by_name["stripe_api"]["files"] == [
        "events.json"]
    assert by_name["traces"]["ok"] is False and "127.0.0.1:9" in by_name["traces"]["errors"][0]
    for path in out.iterdir():
        assert TRACE_PASSWORD.encode() not in path.read_bytes(), path
        assert KEY.encode() not in path.read_bytes(), path

    assert main(["analyze", str(out), "--format", "json"]) == EXIT_PARTIAL  # partial, as live
    offline = json.loads(capsys.readouterr().out)
    assert offline["partial"] is True and offline["errors"] == live["errors"]
    assert [g["tool_call_ids"] for g in offline["groups"]] == [["call_1"]]

    assert main(["analyze", str(out)]) == EXIT_PARTIAL
    table = capsys.readouterr().out
    assert "PARTIAL (saved by the investigation)" in table and "127.0.0.1:9" in table
    assert "twice-manifest.json" not in table  # no evidence file, not "skipped" either


@pytest.mark.parametrize("manifest", [b"{not json", b'{"twice_manifest": 1, "partial": "yes"}',
                                      b"[]", b'{"twice_manifest": 1, "partial": false, '
                                                b'"errors": [1, 2]}'])
def test_an_unreadable_manifest_is_a_warning_and_the_folder_counts_as_partial(
        incident: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, manifest: bytes) -> None:
    url, customer = incident
    out = tmp_path / "saved"
    _saved_partial(url, customer, out, capsys, monkeypatch)
    (out / "twice-manifest.json").write_bytes(manifest)
    assert main(["analyze", str(out), "--format", "json"]) == EXIT_PARTIAL
    printed = capsys.readouterr()
    offline = json.loads(printed.out)
    assert offline["partial"] is True
    (warning,) = [w for w in offline["warnings"] if "twice-manifest.json" in w["source"]]
    assert "partial state is unknown" in warning["detail"]
    assert "Traceback" not in printed.err


def test_a_complete_saved_folder_says_it_is_not_partial(
        incident: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, customer = incident
    out = tmp_path / "saved"
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(STRIPE_BASE_URL_ENV, url)
    around = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert main(["investigate", "--customer", customer, "--around", around, "--stripe-key-env",
                 KEY_ENV, "--out", str(out), "--format", "json"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(out), "--format", "json"]) == 0
    offline = json.loads(capsys.readouterr().out)
    assert offline["partial"] is False and offline["errors"] == []


def test_a_hostile_manifest_is_shown_not_obeyed(
        incident: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A saved folder travels (a ticket attachment): its manifest's text is evidence, so
    terminal escapes in it are named on the table, and kept as data in the JSON."""
    url, customer = incident
    out = tmp_path / "saved"
    _saved_partial(url, customer, out, capsys, monkeypatch)
    manifest = json.loads((out / "twice-manifest.json").read_text())
    manifest["errors"] = ["traces: \x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J\u202egone"]
    (out / "twice-manifest.json").write_text(json.dumps(manifest))
    assert main(["analyze", str(out)]) == EXIT_PARTIAL
    table = capsys.readouterr().out
    assert "\x1b]52" not in table and "\x1b[2J" not in table and "\u202e" not in table
    assert "<U+001B>]52" in table
    assert main(["analyze", str(out), "--format", "json"]) == EXIT_PARTIAL
    assert json.loads(capsys.readouterr().out)["errors"] == manifest["errors"]
