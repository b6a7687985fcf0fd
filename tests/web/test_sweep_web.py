"""The Sweeps page in the web app (AppTest: the real script, in-process): it lists the stored
sweeps, a sweep's duplicates with their links, and each link opens the group's verdict."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.web.conftest import run_app
from twice.lab.month import month
from twice.store import open_store
from twice.store.sweeps import SweepGroup, get_sweep, sweep_groups
from twice.sweep.report import totals
from twice.sweep.run import run_sweep
from twice.web.views.sweeps import sweep_caption


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[SweepGroup]]:
    folder = tmp_path_factory.mktemp("sweep_web")
    data = folder / "week.parquet"
    month(days=7).to_parquet(data, index=False)
    store_path = folder / "investigations.sqlite3"
    result = run_sweep(open_store(str(store_path)), [("timeline", data, {})])
    return store_path, result.record.id, sweep_groups(open_store(str(store_path)),
                                                      result.record.id)


@pytest.fixture
def store_env(small_sweep: tuple[Path, str, list[SweepGroup]],
              monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[SweepGroup]]]:
    store_path, sweep_id, groups = small_sweep
    monkeypatch.setenv("TWICE_STORE", str(store_path))
    st.cache_resource.clear()  # the app caches its store per process
    yield sweep_id, groups
    st.cache_resource.clear()


def run(params: dict[str, str]) -> AppTest:
    return run_app(params, timeout=180)


def test_the_sweeps_page_lists_the_stored_sweeps(
        store_env: tuple[str, list[SweepGroup]]) -> None:
    sweep_id, groups = store_env
    at = run({"sweep": "all"})
    assert at.title[0].value == "Sweeps"
    table = at.dataframe[0].value
    row = table[table["sweep"] == sweep_id].iloc[0]
    assert row["open"] == f"?sweep={sweep_id}"
    assert row["groups"] == len(groups) and row["status"] == "finished"


def test_a_sweep_lists_its_groups_and_each_link_opens_the_verdict(
        store_env: tuple[str, list[SweepGroup]]) -> None:
    sweep_id, groups = store_env
    at = run({"sweep": sweep_id})
    assert at.title[0].value == f"Sweep {sweep_id}"
    frames = [d.value for d in at.dataframe]
    by_layer, listed = frames[0], frames[1]
    assert int(by_layer["groups"].sum()) == len(groups)
    assert list(listed["layer"]) == [g.layer for g in groups]
    links = list(listed["open"])
    assert links == [f"?inv={g.investigation_id}&group={g.group_id}&tab=verdict"
                     for g in groups]
    layers = {g.layer for g in groups}
    assert {"redelivery", "sdk_retry", "gateway_retry"} <= layers
    opened: set[str] = set()
    for g, href in zip(groups, links, strict=True):
        if g.layer in opened:
            continue  # one link per layer is enough to show links open their verdict
        opened.add(str(g.layer))
        view = run(dict(parse_qsl(href.lstrip("?"))))
        assert view.header[0].value.startswith(str(g.layer)), (href, view.header[0].value)
    assert opened == layers


def test_an_unknown_sweep_says_so(store_env: tuple[str, list[SweepGroup]]) -> None:
    at = run({"sweep": "sw-doesnotexist"})
    assert "was not found" in at.error[0].value


def test_the_sidebar_opens_the_sweeps_page(store_env: tuple[str, list[SweepGroup]]) -> None:
    at = run({})
    assert at.title[0].value == "Incidents"
    next(b for b in at.sidebar.button if b.label == "Sweeps").click().run()
    assert not at.exception
    assert at.title[0].value == "Sweeps"
    assert at.query_params["sweep"] == "all"


def test_a_sweep_caption_counts_its_groups_in_words(
        small_sweep: tuple[Path, str, list[SweepGroup]]) -> None:
    store_path, sweep_id, groups = small_sweep
    record = get_sweep(open_store(str(store_path)), sweep_id)
    assert record is not None
    one = sweep_caption(record, {"groups": 1, "money_at_risk": {}})
    assert "· 1 duplicate group ·" in one and "1 duplicate groups" not in one
    many = sweep_caption(record, totals(groups))
    assert f"· {len(groups):,} duplicate groups ·" in many and "finished" in many
