"""The investigation store in one SQLite file (the default: the user's data dir).

This module only connects and migrates (the queries are `twice.store.sql`'s). One connection per
call, so Streamlit's session threads never share one; WAL so readers do not wait for a writer;
`busy_timeout` so two writers queue instead of failing; foreign keys on so a note cannot
outlive its investigation.

A full disk is said as such (StoreFull), and reading goes on: SQLite cannot grow the `-shm`
index a WAL database needs, so while the disk is full and the `-wal` holds nothing the file is
read as it is (`immutable`: exact, since everything committed is in the file); writes fail with
StoreFull and keep nothing half-done.

A file that is not twice's is refused before anything is written to it (`refuse_foreign_file`):
a missing or empty file becomes a new store, a SQLite database with no tables too, one with
twice's tables is opened; anything else (another program's database, a file that is not SQLite,
a damaged one) is a StoreError naming the file, and the file is left exactly as it was.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from twice.store.dialect import SQLITE
from twice.store.errors import StoreError, StoreFull, StoreReadOnly
from twice.store.schema import OWN_TABLES, Migration, migrations
from twice.store.sql import Store, Transaction, migrate

# Applied in order at open; schema version N = MIGRATIONS[:N] applied (twice.store.schema).
MIGRATIONS: list[Migration] = migrations(SQLITE)


def store_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """The StoreError for a failed SQLite call: StoreFull when the disk is full, StoreReadOnly
    for SQLITE_READONLY and its extended codes (a read-only file, folder or mount)."""
    if disk_full(path, exc):
        return StoreFull(f"{path}: the disk is full ({exc})")
    read_only = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_READONLY
    return (StoreReadOnly if read_only else StoreError)(f"{path}: {exc}")


_FREE_MIN = 2**20  # less free space than this is a full disk for a store (one page is 4 KiB)


def disk_full(path: Path, exc: sqlite3.Error | None = None) -> bool:
    """SQLITE_FULL, or an I/O error on a file system with (almost) no space left: SQLite says
    "disk I/O error" when it cannot grow its `-shm` index."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF if exc is not None else None
    if code == sqlite3.SQLITE_FULL:
        return True
    if exc is not None and code != sqlite3.SQLITE_IOERR:
        return False
    try:
        fs = os.statvfs(path.parent if path.parent.exists() else ".")
    except OSError:
        return False
    return fs.f_bavail * fs.f_frsize < _FREE_MIN


def _wal_holds_nothing(path: Path) -> bool:
    wal = path.with_name(path.name + "-wal")
    try:
        return wal.stat().st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False


def read_as_is(path: Path) -> sqlite3.Connection:
    """A connection reading the file as it is, with no lock, `-shm` or `-wal` (exact only when
    the `-wal` holds nothing)."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)


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
        if disk_full(path, exc):  # no room for the -shm: the tables are still there to read
            if _wal_holds_nothing(path):
                conn = read_as_is(path)
                try:
                    tables = {str(r[0]) for r in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table'")}
                finally:
                    conn.close()
                if own_tables <= tables:
                    return
            raise StoreFull(f"{path}: the disk is full ({exc}); {nothing}") from None
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
        try:
            with self._connect() as conn:
                # WAL is a property of the file: set once, every later connection uses it
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(f"{self.path}: cannot switch to WAL mode (got {mode})")
            # IMMEDIATE: two processes opening the same new file at once do not both create
            # tables
            with self.transaction(write=True) as tx:
                migrate(tx, migrations, self.name)
        except StoreFull:
            if not self._current(migrations):
                raise
            # a full disk, and a store already up to date: opened to be read (writes say so)

    def __repr__(self) -> str:
        return f"SqliteStore({self.name!r})"

    def _readable(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """`conn`, once it has opened the WAL index; when a full disk leaves no room for that
        index and the `-wal` holds nothing, a connection reading the file as it is instead."""
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.Error as exc:
            if not (disk_full(self.path, exc) and _wal_holds_nothing(self.path)):
                raise
        conn.close()
        fallback = read_as_is(self.path)
        fallback.row_factory = sqlite3.Row
        fallback.isolation_level = None
        return fallback

    def _current(self, migrations: Sequence[Migration]) -> bool:
        """Whether the file, read as it is, holds twice's tables at this schema version."""
        if not (self.path.exists() and _wal_holds_nothing(self.path)):
            return False
        try:
            conn = read_as_is(self.path)
            try:
                rows = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
                return int(rows.fetchone()[0]) == len(migrations)
            finally:
                conn.close()
        except sqlite3.Error:
            return False

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
            raise store_error(self.path, exc) from None
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            if begin == "BEGIN":
                conn = self._readable(conn)
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
