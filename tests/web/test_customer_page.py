"""A customer's page (`?customer=cus_...`, AppTest: the real script, in-process): every saved
duplicate that charged them across investigations, each a link to its own verdict; a search
naming a customer with several duplicates links to it; a hostile id is shown as text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl

import pandas as pd
import pytest
import streamlit as st

from tests.web.conftest import run_app
from twice.connectors import registry
from twice.engine import analyze
from twice.store import open_store
from twice.web.samples import import_sample, sample_folders

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
CUSTOMER = "cus_WrcAXdGAH5bSQW"  # charged twice in the step retry sample


def _load(name: str) -> pd.DataFrame:
    found, _ = registry.scan_folder(SAMPLES / name)
    return registry.load_all([(n, p, {}) for n, p in found]).rows


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled samples (saved before the app starts, so its own import finds them all) and
    a busy day that holds the step retry's customer again."""
    path = tmp_path_factory.mktemp("customer") / "investigations.sqlite3"
    store = open_store(str(path))
    for folder in sample_folders():
        import_sample(store, folder)
    timeline = pd.concat([_load(n) for n in ("step_retry", "sdk_retry")], ignore_index=True)
    store.create("Busy day", timeline, id="busy-day", analysis=analyze(timeline))
    return path


@pytest.fixture
def app_env(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TWICE_STORE", str(store_path))
    st.cache_resource.clear()  # the app caches its store per process
    yield store_path
    st.cache_resource.clear()


def test_a_customers_page_lists_each_of_their_duplicates(app_env: Path) -> None:
    at = run_app({"customer": CUSTOMER})
    assert at.title[0].value == "Customer cus\\_WrcAXdGAH5bSQW"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Duplicates"] == "2" and metrics["Investigations"] == "2"
    assert metrics["Charged twice"] == "18.00 USD"
    table = at.dataframe[0].value
    assert list(table["layer"]) == ["step_retry", "step_retry"]
    assert set(table["investigation"]) == {"Busy day", "Sample: step retry"}
    assert list(table["when (UTC)"]) == sorted(table["when (UTC)"], reverse=True)
    # each row opens its own duplicate's verdict, and that verdict is the row's layer
    for layer, href in zip(table["layer"], table["open"], strict=True):
        params = dict(parse_qsl(href.lstrip("?")))
        assert params["tab"] == "verdict"
        assert run_app(params).header[0].value.startswith(layer)


def test_a_search_naming_a_customer_with_several_duplicates_links_their_page(
        app_env: Path) -> None:
    at = run_app()
    at.text_input[0].set_value(CUSTOMER).run()
    assert not at.exception
    links = [e for e in at.get("page_link") if "all 2 duplicates" in e.proto.label]
    assert len(links) == 1
    assert dict(parse_qsl(links[0].proto.query_string)) == {"customer": CUSTOMER}


def test_an_unknown_or_hostile_customer_is_said_plainly(app_env: Path) -> None:
    at = run_app({"customer": "cus_nobody"})
    assert "No saved investigation" in at.info[0].value
    at = run_app({"customer": "[click](https://evil.example) <b>x</b> :skull:"})
    title = at.title[0].value
    assert "](" not in title.replace("\\]\\(", "") and "<b>" not in title
    assert "No saved investigation" in at.info[0].value


def test_a_verdict_links_to_its_customers_page(app_env: Path) -> None:
    at = run_app({"inv": "sample-step-retry", "tab": "verdict"})
    links = [e for e in at.get("page_link") if "Every saved duplicate of" in e.proto.label]
    assert len(links) == 1
    assert dict(parse_qsl(links[0].proto.query_string)) == {"customer": CUSTOMER}
