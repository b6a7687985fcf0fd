"""A store that can be read but no longer written fails with StoreReadOnly, on both backends.

Made read-only for real: the SQLite file marked immutable (`chattr +i`, which even root cannot
write through; the tests run as root, for whom file modes are no obstacle), and the PostgreSQL
database switched to read-only transactions (`default_transaction_read_only`).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import psycopg
import pytest
from psycopg import sql

from twice.connectors.registry import load_all, scan_folder
from twice.store import Note, StoreReadOnly, open_store

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


def _rows() -> pd.DataFrame:
    found, _ = scan_folder(SAMPLES / "step_retry")
    return load_all((c, p, {}) for c, p in found).rows


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    """`chattr +i path` for the block; skips where the file system or user cannot."""
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("needs chattr(1) to make a file read-only for root")
    done = subprocess.run([chattr, "+i", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mark a file immutable here: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


def test_a_sqlite_store_made_immutable_is_read_but_not_written(tmp_path: Path) -> None:
    path = tmp_path / "investigations.sqlite3"
    store = open_store(str(path))
    inv = store.create("Read-only", _rows(), id="ro-one")
    with immutable(path):
        assert store.get(inv) is not None  # reading still works
        with pytest.raises(StoreReadOnly) as caught:
            store.add_note(inv, Note(author="ana", text="kept?", at=datetime.now(UTC)))
        assert "readonly" in str(caught.value)
    store.add_note(inv, Note(author="ana", text="kept!", at=datetime.now(UTC)))
    snap = store.get(inv)
    assert snap is not None and [n.text for n in snap.notes] == ["kept!"]


def test_a_postgres_store_in_read_only_mode_is_read_but_not_written(
        fresh_postgres_dsn: str) -> None:
    store = open_store(fresh_postgres_dsn)
    inv = store.create("Read-only", _rows(), id="ro-one")
    name = fresh_postgres_dsn.rpartition("/")[2]
    with psycopg.connect(fresh_postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on")
                     .format(sql.Identifier(name)))
    assert store.get(inv) is not None
    with pytest.raises(StoreReadOnly, match="read-only transaction"):
        store.add_note(inv, Note(author="ana", text="kept?", at=datetime.now(UTC)))
    password = fresh_postgres_dsn.split(":")[2].split("@")[0]
    with pytest.raises(StoreReadOnly) as caught:
        store.create("Another", _rows())
    assert password not in str(caught.value)


def test_a_page_of_a_read_only_store_is_analysed_and_says_it_kept_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An investigation whose analysis is not kept (saved before analyses were) opens on a
    store the server cannot write to: analysed, shown, and the log says it was not kept."""
    import sqlite3

    from twice.web.cache import _read_and_analyse

    path = tmp_path / "investigations.sqlite3"
    store = open_store(str(path))
    inv = store.create("Read-only", _rows(), id="ro-one")
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM analyses")
    with immutable(path), caplog.at_level("WARNING", logger="twice.web.cache"):
        analysis, failure = _read_and_analyse(store, inv)
    assert failure is None and len(analysis.groups) == 1
    assert "'ro-one': its analysis is not kept in the store" in caplog.text
