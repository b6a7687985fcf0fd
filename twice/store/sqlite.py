"""The investigation store in one SQLite file (the default: the user's data dir).

This module only connects and migrates (the queries are `twice.store.sql`'s). One connection per
call, so Streamlit's session threads never share one; WAL so readers do not wait for a writer;
`busy_timeout` so two writers queue instead of failing; foreign keys on so a note cannot
outlive its investigation.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from twice.store.dialect import SQLITE
from twice.store.errors import StoreError
from twice.store.schema import Migration, migrations
from twice.store.sql import Store, Transaction, migrate

# Applied in order at open; schema version N = MIGRATIONS[:N] applied (twice.store.schema).
MIGRATIONS: list[Migration] = migrations(SQLITE)


class SqliteStore(Store):
    def __init__(self, path: str | Path, *, busy_timeout_s: float = 10.0,
                 migrations: Sequence[Migration] = MIGRATIONS) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        self.busy_timeout_s = busy_timeout_s
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create its folder ({exc.strerror})") from None
        with self._connect() as conn:
            # WAL is a property of the file: set once, every later connection uses it
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: cannot switch to WAL mode (got {mode})")
        # IMMEDIATE: two processes opening the same new file at once do not both create tables
        with self.transaction(write=True) as tx:
            migrate(tx, migrations, self.name)

    def __repr__(self) -> str:
        return f"SqliteStore({self.name!r})"

    @contextmanager
    def transaction(self, write: bool = False) -> Iterator[Transaction]:
        with self._connect("BEGIN IMMEDIATE" if write else "BEGIN") as conn:
            yield Transaction(conn, SQLITE)

    @contextmanager
    def _connect(self, begin: str | None = None) -> Iterator[sqlite3.Connection]:
        """A connection for one call; `begin` opens a transaction committed at the end."""
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                                   check_same_thread=True)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from None
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            if begin:
                conn.execute(begin)
            yield conn
            if conn.in_transaction:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"{self.path}: {exc}") from None
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()
