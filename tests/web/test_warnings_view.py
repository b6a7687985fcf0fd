"""The investigation page lists what loading and analysis skipped or doubted. Every warning is a
line of text when there are few; past `WARNINGS_SHOWN`, the first are listed and the whole list
is a table drawn when asked (Streamlit's grid is 1.2 MB of script a shared link's new browser
would otherwise fetch before the page settles)."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st

from tests.web.conftest import run_app
from twice.connectors import registry
from twice.store import open_store
from twice.web.views.investigation import WARNINGS_SHOWN

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "step_retry"


def _page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int) -> object:
    found, _ = registry.scan_folder(SAMPLE)
    rows = registry.load_all([(n, p, {}) for n, p in found]).rows
    warnings = [{"source": f"stripe_logs.jsonl:{i + 1}", "detail": f"line {i + 1} skipped"}
                for i in range(count)]
    path = tmp_path / "investigations.sqlite3"
    open_store(str(path)).create("warned", rows, id="warned", warnings=warnings)
    monkeypatch.setenv("TWICE_STORE", str(path))
    st.cache_resource.clear()
    return run_app({"inv": "warned", "tab": "verdict"})


@pytest.fixture(autouse=True)
def _fresh_caches() -> object:
    yield
    st.cache_resource.clear()


def test_a_few_warnings_are_each_a_line_and_no_grid(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    at = _page(tmp_path, monkeypatch, 3)
    [expander] = [e for e in at.expander if e.label.startswith("Warnings (3)")]
    lines = [m.value for m in expander.markdown]
    assert [x for x in lines if "skipped" in x] == [
        f"- **stripe\\_logs\\.jsonl:{i}**: line {i} skipped" for i in (1, 2, 3)]
    assert not expander.dataframe and not expander.toggle


def test_many_warnings_list_the_first_and_draw_the_table_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    count = WARNINGS_SHOWN + 5
    at = _page(tmp_path, monkeypatch, count)
    [expander] = [e for e in at.expander if e.label.startswith(f"Warnings ({count})")]
    assert len([m for m in expander.markdown if "skipped" in m.value]) == WARNINGS_SHOWN
    assert "5 more" in expander.caption[0].value
    assert not expander.dataframe
    [toggle] = expander.toggle
    toggle.set_value(True).run()
    assert not at.exception, at.exception
    [expander] = [e for e in at.expander if e.label.startswith(f"Warnings ({count})")]
    [table] = expander.dataframe
    assert len(table.value) == count
    assert list(table.value["warning"])[-1] == f"line {count} skipped"
