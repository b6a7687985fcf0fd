"""The investigation store in one SQLite file (the default: the user's data dir).

This module only connects and migrates (the queries are `twice.store.sql`'s). One connection per
call, so Streamlit's session threads never share one; WAL so readers do not wait for a writer;
`busy_timeout` so two writers queue instead of failing; foreign keys on so a note cannot
outlive its investigation.

A file that is not twice's is refused before anything is written to it (`refuse_foreign_file`):
a missing or empty file becomes a new store, a SQLite database with no tables too, one with
twice's tables is opened; anything else (another program's database, a file that is not SQLite,
a damaged one) is a StoreError naming the file, and the file is left exactly as it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from twice.store.dialect import SQLITE
from twice.store.errors import StoreError, StoreReadOnly
from twice.store.schema import OWN_TABLES, Migration, migrations
from twice.store.sql import Store, Transaction, migrate

# Applied in order at open; schema version N = MIGRATIONS[:N] applied (twice.store.schema).
MIGRATIONS: list[Migration] = migrations(SQLITE)


def store_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """The StoreError for a failed SQLite call: StoreReadOnly for SQLITE_READONLY and its
    extended codes (a read-only file, folder or mount)."""
    read_only = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_READONLY
    return (StoreReadOnly if read_only else StoreError)(f"{path}: {exc}")


def refuse_foreign_file(path: Path, own_tables: frozenset[str], what: str) -> None:
    """StoreError unless `path` is missing, empty, a SQLite database without tables, or one
    holding `own_tables`. Only reads: no lock, journal or WAL switch touches the file.

    The file is read through SQLite only, never opened with `open()`: closing any descriptor of
    a database file drops every POSIX lock this process holds on it, so a plain read while
    another connection of the process (a web session's thread) has it open can corrupt it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if size == 0:
        return
    nothing = "nothing was written to it"
    # immutable: not even a lock or a -shm file; with a -wal beside it (a database in use)
    # read-only, so what the WAL holds is seen
    wal = path.with_name(path.name + "-wal").exists()
    uri = f"{path.resolve().as_uri()}?mode=ro{'' if wal else '&immutable=1'}"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            tables = {str(r[0]) for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code == sqlite3.SQLITE_READONLY:  # a WAL a killed writer left needs a writer's
            return  # recovery: the ordinary connection does it, then migrate() checks the schema
        if code == sqlite3.SQLITE_NOTADB:
            raise StoreError(f"{path}: not {what}: not a SQLite database ({nothing}); give the "
                             "path of twice's own file, or of a new one") from None
        raise StoreError(f"{path}: not {what}: the SQLite file cannot be read ({exc}; "
                         f"{nothing})") from None
    tables = {t for t in tables if not t.startswith("sqlite_")}
    if tables and not own_tables <= tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(f"{path}: not {what}: a SQLite database with other tables ({shown}); "
                         f"{nothing}. twice keeps its data in a file of its own: give a new "
                         "path")


class SqliteStore(Store):
    def __init__(self, path: str | Path, *, busy_timeout_s: float = 10.0,
                 migrations: Sequence[Migration] = MIGRATIONS) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        self.busy_timeout_s = busy_timeout_s
        refuse_foreign_file(self.path, OWN_TABLES, "a twice investigation store")
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
            raise store_error(self.path, exc) from None
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()
