"""The newest saved investigations are analysed in the background once the server's first
session has imported the samples (`twice.web.cache.warm_up`): a first link to one of them opens
as fast as a second visit. The real store, samples and engine; no Streamlit runtime needed."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from twice.connectors import registry
from twice.engine import analyze
from twice.store import open_store
from twice.web.cache import WARM_UP, Analyses, analysis_of, warm_up, warm_up_count
from twice.web.samples import SampleImport, sample_id

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


def _load(name: str) -> pd.DataFrame:
    found, _ = registry.scan_folder(SAMPLES / name)
    return registry.load_all([(n, p, {}) for n, p in found]).rows


def test_the_newest_investigations_are_analysed_ahead(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "investigations.sqlite3"))
    step = _load("step_retry")
    saved = [store.create(f"upload {i}", step, id=f"upload-{i}") for i in range(WARM_UP + 2)]
    importing = SampleImport(store).start()
    analyses = Analyses()
    warm_up(store, analyses, importing)
    assert not importing.running
    newest = saved[::-1][:WARM_UP]  # saved last, listed first
    assert all(analyses.has(i) for i in newest)
    assert not any(analyses.has(i) for i in saved[:2])  # past the newest WARM_UP
    assert not any(analyses.has(sample_id(f)) for f in importing.folders)
    # what is kept is the analysis a page would make itself
    kept, failure = analyses.get(newest[0], lambda: (_ for _ in ()).throw(AssertionError))
    fresh, _ = analysis_of(store.get(newest[0]))
    assert failure is None and [g.group_id for g in kept.groups] == [
        g.group_id for g in fresh.groups] == [g.group_id for g in analyze(step).groups]


def test_the_server_says_how_many_are_analysed_ahead(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert warm_up_count({}) == WARM_UP
    assert warm_up_count({"TWICE_WARM_UP": "0"}) == 0
    assert warm_up_count({"TWICE_WARM_UP": " 7 "}) == 7
    assert warm_up_count({"TWICE_WARM_UP": "1000"}) == 32
    for bad in ("-1", "two", "1e3", ""):
        assert warm_up_count({"TWICE_WARM_UP": bad}) == WARM_UP
    store = open_store(str(tmp_path / "investigations.sqlite3"))
    saved = store.create("upload", _load("step_retry"), id="upload")
    monkeypatch.setenv("TWICE_WARM_UP", "0")
    analyses = Analyses()
    warm_up(store, analyses, SampleImport(store).start())
    assert not analyses.has(saved)
