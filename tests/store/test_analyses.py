"""An investigation's analysis kept in the store (`twice.store.analyses`): what a page reads
back is the analysis it would have made itself, on evidence twice did not make too, and an
analysis made by other code or options, or damaged, is analysed again and replaced. Real
stores (SQLite and PostgreSQL), real loaders, the real engine."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg
import pytest

from tests.independent_corpus import extract, incidents
from twice.connectors.registry import load_all, scan_folder
from twice.engine import Analysis, Options
from twice.layers import Bands
from twice.store import open_store
from twice.store.analyses import engine_fingerprint
from twice.store.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from twice.store.sqlite import SqliteStore
from twice.web.cache import _read_and_analyse, analysis_of

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "sample_data").iterdir() if p.is_dir())
FIELD = incidents(step=10)  # every tenth incident of the independent corpus
BUSY_DAY = "independent/set-610000/field/field_busy_day"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract(tmp_path_factory.mktemp("corpus"))


def _load(folder: Path) -> tuple[pd.DataFrame, list[Any]]:
    found, _ = scan_folder(folder)
    loaded = load_all((c, p, {}) for c, p in found)
    return loaded.rows, loaded.warnings


def _value(v: Any) -> tuple[type, Any]:
    return type(v), ("missing" if v is None or (not isinstance(v, str) and pd.isna(v)) else v)


def assert_same(kept: Analysis, fresh: Analysis) -> None:
    """Every part of the two analyses equal, the records' values of the same Python types."""
    pd.testing.assert_frame_equal(kept.attempts, fresh.attempts, check_exact=True)
    pd.testing.assert_frame_equal(kept.timeline, fresh.timeline, check_exact=True)
    assert (kept.offsets, kept.warnings) == (fresh.offsets, fresh.warnings)
    assert len(kept.groups) == len(fresh.groups)
    for g, h in zip(kept.groups, fresh.groups, strict=True):
        assert (g.group_id, g.tool_name, g.thread_id, g.tool_call_ids, g.positions) == \
            (h.group_id, h.tool_name, h.thread_id, h.tool_call_ids, h.positions)
        assert (g.duplicates, g.findings) == (h.duplicates, h.findings)
        pd.testing.assert_frame_equal(g.attempts, h.attempts, check_exact=True)
        assert [{k: _value(v) for k, v in r.items()} for r in g.records] == \
            [{k: _value(v) for k, v in r.items()} for r in h.records]


@pytest.mark.parametrize("folder", [*SAMPLES, *FIELD], ids=lambda p: Path(p).name)
def test_a_kept_analysis_is_the_one_its_page_would_make(tmp_path: Path, folder: Path | str,
                                                        corpus: Path) -> None:
    rows, warnings = _load(folder if isinstance(folder, Path) else corpus / folder)
    store = open_store(str(tmp_path / "s.sqlite3"))
    inv = store.create(Path(folder).name, rows, warnings=warnings)
    snap = store.get(inv)
    assert snap is not None
    kept = store.analysis(snap)
    assert kept is not None, "saving keeps the analysis it made"
    fresh, failure = analysis_of(snap)
    assert failure is None
    assert_same(kept, fresh)


def test_the_field_corpus_is_here() -> None:
    assert len(FIELD) >= 9 and BUSY_DAY in incidents()


def _raw(url: str) -> Callable[[str, list[Any]], list[tuple[Any, ...]]]:
    def run(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        if url.startswith("postgresql"):
            with psycopg.connect(url, autocommit=True) as conn:
                cur = conn.execute(sql.replace("?", "%s"), params)
                return cur.fetchall() if cur.description else []
        with sqlite3.connect(url) as conn:
            return conn.execute(sql, params).fetchall()
    return run


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "investigations.sqlite3")
    return str(request.getfixturevalue("fresh_postgres_dsn"))


def test_the_page_reads_the_kept_analysis_and_deleting_drops_it(url: str) -> None:
    store = open_store(url)
    raw = _raw(url)
    rows, _ = _load(ROOT / "sample_data" / "step_retry")
    inv = store.create("step retry", rows)
    [(engine, body)] = raw("SELECT engine, body FROM analyses WHERE investigation_id = ?",
                           [inv])
    assert engine == engine_fingerprint()
    # what the page shows is what the store keeps, not the engine run again: a fix written
    # into the kept duplicate comes back
    saved = json.loads(body)
    saved["groups"][0]["duplicates"][0]["fix"] = "kept, not recomputed"
    raw("UPDATE analyses SET body = ? WHERE investigation_id = ?", [json.dumps(saved), inv])
    analysis, failure = _read_and_analyse(store, inv)
    assert failure is None
    assert analysis.groups[0].duplicates[0].fix == "kept, not recomputed"
    snap = store.get(inv)
    assert snap is not None
    store.delete(inv)
    assert raw("SELECT count(*) FROM analyses", []) == [(0,)]
    # an analysis finished after its investigation was deleted keeps nothing
    assert store.keep_analysis(snap, analysis) is False
    assert raw("SELECT count(*) FROM analyses", []) == [(0,)]


def _kept(raw: Callable[[str, list[Any]], list[tuple[Any, ...]]], inv: str) -> tuple[Any, ...]:
    [row] = raw("SELECT engine, body FROM analyses WHERE investigation_id = ?", [inv])
    return tuple(row)


def test_an_analysis_made_by_other_code_is_made_again_and_replaced(url: str) -> None:
    store = open_store(url)
    raw = _raw(url)
    rows, _ = _load(ROOT / "sample_data" / "redelivery")
    inv = store.create("redelivery", rows)
    before = _kept(raw, inv)
    raw("UPDATE analyses SET engine = 'made by an older twice' WHERE investigation_id = ?",
        [inv])
    snap = store.get(inv)
    assert snap is not None and store.analysis(snap) is None
    analysis, failure = _read_and_analyse(store, inv)  # analysed, and kept again
    assert failure is None
    assert_same(analysis, analysis_of(snap)[0])
    assert _kept(raw, inv) == before


def test_an_analysis_made_with_other_options_is_not_used(url: str) -> None:
    store = open_store(url)
    raw = _raw(url)
    rows, _ = _load(ROOT / "sample_data" / "step_retry")
    options = Options(bands=Bands(seconds=5.0, tens_of_seconds=120.0, retention=86_400.0),
                      window_s=600.0)
    inv = store.create("step retry, own bands", rows, options=options)
    snap = store.get(inv)
    assert snap is not None and snap.options == options
    assert_same(store.analysis(snap) or pytest.fail("not kept"), analysis_of(snap)[0])
    engine, body = _kept(raw, inv)
    saved = json.loads(body)
    saved["options"] = Options().to_dict()
    raw("UPDATE analyses SET body = ? WHERE investigation_id = ?", [json.dumps(saved), inv])
    assert store.analysis(snap) is None


@pytest.mark.parametrize("damage", [
    ("body", "not json"),
    ("body", "layer"),
    ("body", "rows"),
    ("attempts", b"PAR1 not parquet"),
    ("aligned", "other rows"),
])
def test_a_damaged_analysis_is_analysed_again(tmp_path: Path, damage: tuple[str, Any],
                                              caplog: pytest.LogCaptureFixture) -> None:
    url = str(tmp_path / "investigations.sqlite3")
    store = open_store(url)
    raw = _raw(url)
    rows, _ = _load(ROOT / "sample_data" / "step_retry")
    inv = store.create("step retry", rows)
    column, how = damage
    _, body = _kept(raw, inv)
    saved = json.loads(body)
    if how == "layer":  # a layer twice does not know
        saved["groups"][0]["duplicates"][0]["layer"] = "cosmic_ray"
        how = json.dumps(saved)
    elif how == "rows":  # a group past the rows kept
        saved["groups"][0]["stop"] = 10_000
        how = json.dumps(saved)
    elif how == "other rows":  # the aligned times of another timeline
        [(other,)] = raw("SELECT aligned FROM analyses WHERE investigation_id = ?", [inv])
        small = store.create("small", rows.iloc[:5].reset_index(drop=True))
        [(how,)] = raw("SELECT aligned FROM analyses WHERE investigation_id = ?", [small])
        assert how != other
    raw(f"UPDATE analyses SET {column} = ? WHERE investigation_id = ?", [how, inv])
    snap = store.get(inv)
    assert snap is not None
    with caplog.at_level(logging.WARNING, logger="twice.store.analyses"):
        assert store.analysis(snap) is None
    assert f"investigation {inv!r}: its saved analysis is not used" in caplog.text
    analysis, failure = _read_and_analyse(store, inv)  # the page: analysed again, kept again
    assert failure is None
    assert_same(analysis, analysis_of(snap)[0])
    assert_same(store.analysis(snap) or pytest.fail("not kept again"), analysis)


def test_a_store_of_version_5_gets_its_analyses_kept_on_first_read(tmp_path: Path) -> None:
    url = str(tmp_path / "v5.sqlite3")
    SqliteStore(url, migrations=SQLITE_MIGRATIONS[:5])
    store = open_store(url)
    assert store.schema_version() == len(SQLITE_MIGRATIONS) >= 6
    raw = _raw(url)
    rows, _ = _load(ROOT / "sample_data" / "step_retry")
    inv = store.create("saved before analyses were kept", rows)
    raw("DELETE FROM analyses", [])  # as a version 5 store has it: none kept
    snap = store.get(inv)
    assert snap is not None and store.analysis(snap) is None
    analysis, failure = _read_and_analyse(store, inv)
    assert failure is None
    assert_same(store.analysis(snap) or pytest.fail("not kept"), analysis)


def test_an_analysis_of_rows_numbered_otherwise_is_not_kept(tmp_path: Path) -> None:
    """A timeline read back from the store is numbered 0, 1, 2, ...; one saved numbered
    otherwise keeps no analysis at save (its page analyses the rows as read, and keeps that)."""
    url = str(tmp_path / "investigations.sqlite3")
    store = open_store(url)
    rows, _ = _load(ROOT / "sample_data" / "step_retry")
    inv = store.create("reversed", rows.iloc[::-1])
    assert _raw(url)("SELECT count(*) FROM analyses", []) == [(0,)]
    analysis, _ = _read_and_analyse(store, inv)
    snap = store.get(inv)
    assert snap is not None
    assert_same(store.analysis(snap) or pytest.fail("not kept"), analysis)


def test_an_analysis_put_together_from_several_is_not_kept(tmp_path: Path,
                                                          corpus: Path) -> None:
    """`create` keeps the analysis it is given only when it is one analysis of the timeline (its
    groups' attempts rows of one frame): one put together from several saves without it, and
    its page analyses the timeline and keeps that."""
    from twice.engine import analyze

    url = str(tmp_path / "investigations.sqlite3")
    store = open_store(url)
    rows, _ = _load(corpus / BUSY_DAY)
    one, other = analyze(rows), analyze(rows)
    assert len(one.groups) >= 2
    mixed = Analysis(groups=[one.groups[0], other.groups[1]], attempts=one.attempts,
                     timeline=one.timeline, offsets=one.offsets, warnings=[])
    inv = store.create("put together", rows, analysis=mixed)
    assert _raw(url)("SELECT count(*) FROM analyses", []) == [(0,)]
    analysis, failure = _read_and_analyse(store, inv)
    assert failure is None and len(analysis.groups) == len(one.groups)
    snap = store.get(inv)
    assert snap is not None
    assert_same(store.analysis(snap) or pytest.fail("not kept"), analysis)
