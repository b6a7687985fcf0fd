"""`twice sweep` of folders saved by `twice investigate --out`: a folder whose manifest says a
source failed makes the sweep partial, with that source's error, in its table and its JSON (and
again on `--show`); a complete folder does not."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.connectors.test_localstripe import (  # noqa: F401
    KEY,
    KEY_ENV,
    _saved_partial,
    incident,
)
from tests.contract import contract
from twice.cli import main
from twice.cli.exits import EXIT_PARTIAL
from twice.connectors.live import STRIPE_BASE_URL_ENV

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's aiohttp


def test_a_swept_folder_whose_source_failed_makes_the_sweep_partial(
        incident: tuple[str, str], tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, customer = incident
    out = tmp_path / "saved"
    live = _saved_partial(url, customer, out, capsys, monkeypatch)
    (error,) = live["errors"]
    assert "127.0.0.1:9" in error
    store = str(tmp_path / "investigations.sqlite3")

    assert main(["sweep", str(out), "--store", store, "--format", "json",
                 "--no-progress"]) == EXIT_PARTIAL
    doc = contract(capsys.readouterr().out)
    assert doc["partial"] is True and doc["errors"] == [error]
    assert [g["customer"] for g in doc["groups"]] == [customer]  # what was saved is swept

    assert main(["sweep", "--show", doc["sweep"]["id"], "--store", store]) == EXIT_PARTIAL
    table = capsys.readouterr().out
    assert "PARTIAL (saved by the investigation)" in table and "127.0.0.1:9" in table


def test_an_unreadable_manifest_makes_the_sweep_partial_with_a_warning(
        incident: tuple[str, str], tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, customer = incident
    out = tmp_path / "saved"
    _saved_partial(url, customer, out, capsys, monkeypatch)
    (out / "twice-manifest.json").write_bytes(b"{not json")
    assert main(["sweep", str(out), "--store", str(tmp_path / "s.sqlite3"), "--format", "json",
                 "--no-progress"]) == EXIT_PARTIAL
    doc = contract(capsys.readouterr().out)
    assert doc["partial"] is True and doc["errors"] == []
    (warning,) = [w for w in doc["warnings"] if "twice-manifest.json" in w["source"]]
    assert "partial state is unknown" in warning["detail"]


def test_a_complete_saved_folder_sweeps_as_complete(
        incident: tuple[str, str], tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, customer = incident
    out = tmp_path / "saved"
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(STRIPE_BASE_URL_ENV, url)
    around = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert main(["investigate", "--customer", customer, "--around", around, "--stripe-key-env",
                 KEY_ENV, "--out", str(out), "--format", "json"]) == 0
    capsys.readouterr()
    assert json.loads((out / "twice-manifest.json").read_text())["partial"] is False
    assert main(["sweep", str(out), "--store", str(tmp_path / "s.sqlite3"), "--format", "json",
                 "--no-progress"]) == 0
    doc = contract(capsys.readouterr().out)
    assert doc["partial"] is False and doc["errors"] == []
