"""`--store` (and TWICE_STORE) pointed at something that is not twice's store is refused, and the
file or database is left as it was.

SQLite: a missing or empty file, or a SQLite database without tables, becomes a new store; one
with twice's tables is opened; another program's database, a file that is not SQLite and a
damaged one are refused (exit 2, one line naming the file, its bytes unchanged, nothing created
beside it). PostgreSQL: the schema the store would be created in (the first of the search_path)
is refused when it holds other tables but not twice's; an empty schema, or a schema of its own
named with `options=-csearch_path=...`, is used.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from twice.cli import main
from twice.drills.store import DrillStore
from twice.store import StoreError, open_store


def _sweep_list(store: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["sweep", "--list", "--store", store])
    return rc, capsys.readouterr().err


def _foreign_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)")
        conn.execute("INSERT INTO orders (total) VALUES (4900)")
    conn.close()


def _damaged_sqlite(path: Path) -> None:
    _foreign_sqlite(path)
    data = bytearray(path.read_bytes())
    data[100:400] = b"\xff" * 300  # the schema page's header and cells
    path.write_bytes(bytes(data))


def _drill_scores(path: Path) -> None:
    DrillStore(path)
    for extra in ("-wal", "-shm"):
        path.with_name(path.name + extra).unlink(missing_ok=True)


def _not_sqlite(path: Path) -> None:
    path.write_text("request_id,created\nreq_1,2024-06-03T14:21:00Z\n")


FOREIGN: dict[str, tuple[Callable[[Path], None], str]] = {
    "another program's database": (_foreign_sqlite, "other tables (orders)"),
    "a file that is not SQLite": (_not_sqlite, "not a SQLite database"),
    "a damaged SQLite file": (_damaged_sqlite, "cannot be read"),
    "twice's drill scores": (_drill_scores, "other tables (answers, assignments, attempts"),
}


@pytest.mark.parametrize("kind", FOREIGN)
def test_a_file_that_is_not_twices_store_is_refused_and_left_as_it_was(
        tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    make, why = FOREIGN[kind]
    path = tmp_path / "their.db"
    make(path)
    before = path.read_bytes()
    rc, err = _sweep_list(str(path), capsys)
    assert rc == 2
    assert str(path) in err and "not a twice investigation store" in err and why in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["their.db"]  # no -wal, no -shm
    with pytest.raises(StoreError, match="nothing was written"):
        open_store(f"sqlite:///{path}")
    assert path.read_bytes() == before


@pytest.mark.parametrize("kind", ["missing", "empty file", "SQLite without tables"])
def test_a_new_file_becomes_a_store(tmp_path: Path, kind: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "new.sqlite3"
    if kind == "empty file":
        path.touch()
    elif kind == "SQLite without tables":
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA user_version = 7")  # a header, no tables
        conn.close()
    rc, err = _sweep_list(str(path), capsys)
    assert rc == 0, err
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert {"schema_version", "investigations", "sweeps"} <= tables
    assert _sweep_list(str(path), capsys)[0] == 0  # and it opens again


def test_the_drill_scores_file_refuses_an_investigation_store(tmp_path: Path) -> None:
    path = tmp_path / "investigations.sqlite3"
    open_store(str(path))
    for extra in ("-wal", "-shm"):
        path.with_name(path.name + extra).unlink(missing_ok=True)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a twice drill scores file"):
        DrillStore(path)
    assert path.read_bytes() == before
    DrillStore(tmp_path / "drills.sqlite3")  # a new one is made


def _tables(dsn: str, schema: str = "public") -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,))]


def test_a_postgres_schema_with_other_tables_is_refused(
        fresh_postgres_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(fresh_postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE checkpoints (thread_id text, checkpoint_id text)")
        conn.execute("CREATE TABLE orders (id serial primary key)")
    rc, err = _sweep_list(fresh_postgres_dsn, capsys)
    assert rc == 2 and "Traceback" not in err
    assert "not a twice investigation store: schema public holds other tables " \
           "(checkpoints, orders)" in err
    assert _tables(fresh_postgres_dsn) == ["checkpoints", "orders"]  # nothing created
    password = fresh_postgres_dsn.split(":")[2].split("@")[0]
    assert password not in err

    # a schema of its own in the same database: used
    with psycopg.connect(fresh_postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA twice")
    own = f"{fresh_postgres_dsn}?options={quote('-csearch_path=twice')}"
    rc, err = _sweep_list(own, capsys)
    assert rc == 0, err
    assert {"schema_version", "investigations"} <= set(_tables(fresh_postgres_dsn, "twice"))
    assert _tables(fresh_postgres_dsn) == ["checkpoints", "orders"]


def test_a_postgres_store_beside_other_tables_is_still_opened(
        fresh_postgres_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A team whose store already shares its schema with other tables keeps working."""
    open_store(fresh_postgres_dsn)
    with psycopg.connect(fresh_postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id serial primary key)")
    rc, err = _sweep_list(fresh_postgres_dsn, capsys)
    assert rc == 0, err
