"""The Sweeps page says a sweep is partial, as `twice sweep` does: a folder saved by `twice
investigate --out` whose trace backend failed (its manifest says so) is swept; in chromium the
list marks that sweep partial (a warning, and its status in the grid) and its page names the
failed source (its password masked), while the duplicates the folder did hold are listed. A
sweep of complete evidence says nothing of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import streamlit as st

from tests.connectors.test_localstripe import (  # noqa: F401 (incident: a fixture)
    TRACE_PASSWORD,
    _saved_partial,
    incident,
)
from tests.web.conftest import chromium, run_app, running_app
from twice.cli import main
from twice.cli.exits import EXIT_PARTIAL

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's aiohttp
ROOT = Path(__file__).resolve().parents[2]


def _sweep(target: Path, store: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    main(["sweep", str(target), "--store", str(store), "--format", "json", "--no-progress"])
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def test_the_sweeps_page_shows_a_partial_sweep(
        incident: tuple[str, str], tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, customer = incident
    saved = tmp_path / "saved"
    live = _saved_partial(url, customer, saved, capsys, monkeypatch)
    assert live["partial"] is True
    store = tmp_path / "investigations.sqlite3"
    assert main(["sweep", str(saved), "--store", str(store), "--no-progress"]) == EXIT_PARTIAL
    capsys.readouterr()
    partial = _sweep(saved, store, capsys)["sweep"]
    complete = _sweep(ROOT / "sample_data" / "step_retry", store, capsys)["sweep"]
    assert isinstance(partial, dict) and isinstance(complete, dict)

    with running_app({"TWICE_STORE": str(store)}) as app, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        page.goto(f"{app}/?sweep=all")
        warning = page.get_by_text("Partial: 1 sweep(s)", exact=False)
        warning.wait_for(timeout=120_000)
        said = warning.inner_text()
        assert str(partial["id"]) in said and str(complete["id"]) not in said

        page.goto(f"{app}/?sweep={partial['id']}")
        page.get_by_text("Partial: a swept folder says", exact=False).wait_for(timeout=60_000)
        failed = page.get_by_text("failed:", exact=False).first
        failed.wait_for(timeout=30_000)
        shown = failed.inner_text()
        assert "127.0.0.1" in shown and "jaeger" in shown
        assert TRACE_PASSWORD not in page.content()

        page.goto(f"{app}/?sweep={complete['id']}")
        # the heading (the caption's "N duplicate groups" matches the words too)
        page.get_by_text("Duplicate groups", exact=True).wait_for(timeout=60_000)
        page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
        assert "Partial:" not in page.locator("body").inner_text()
        page.close()

    # the list's status column (a grid: read through Streamlit's AppTest)
    monkeypatch.setenv("TWICE_STORE", str(store))
    st.cache_resource.clear()  # the app caches its store per process
    try:
        table = run_app({"sweep": "all"}, timeout=180).dataframe[0].value
    finally:
        st.cache_resource.clear()
    by_id = dict(zip(table["sweep"], table["status"], strict=True))
    assert by_id == {partial["id"]: "finished · partial", complete["id"]: "finished"}
