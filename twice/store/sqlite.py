"""The investigation store in one SQLite file (the default: the user's data dir).

One connection per call, so Streamlit's session threads never share one; WAL so readers do not
wait for a writer; `busy_timeout` so two writers queue instead of failing; foreign keys on so a
note cannot outlive its investigation.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from twice.engine import Analysis
from twice.store.model import (
    SUMMARY_COLUMNS,
    InvestigationExists,
    InvestigationNotFound,
    Note,
    Override,
    Prepared,
    Snapshot,
    StoreError,
    Summary,
    WarningLike,
    dumps,
    layer_pattern,
    like_pattern,
    loads,
    note_from_row,
    override_from_row,
    prepare,
    search_terms,
    summary_from_row,
    timeline_from_parquet,
    utc,
    valid_id,
)
from twice.timeline import empty_timeline

Migration = Callable[[sqlite3.Connection], None]


def _v1(conn: sqlite3.Connection) -> None:
    for statement in (
        """CREATE TABLE investigations (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            title TEXT NOT NULL,
            created_at TEXT NOT NULL,          -- ISO 8601 UTC, microseconds: sorts as text
            provider TEXT NOT NULL,
            group_count INTEGER NOT NULL,
            worst_layer TEXT,
            layers TEXT NOT NULL,              -- " step_retry sdk_retry ": the layer filter
            money_at_risk TEXT NOT NULL,       -- JSON {"usd": 900}
            sources TEXT NOT NULL,             -- JSON list
            tags TEXT NOT NULL,                -- JSON list
            warnings TEXT NOT NULL,            -- JSON list of {"source", "detail"}
            search_text TEXT NOT NULL          -- lower-case title, tags, ids in the timeline
        )""",
        "CREATE INDEX investigations_created ON investigations (created_at DESC, seq DESC)",
        # the Parquet blob apart, so listing never reads it
        """CREATE TABLE timelines (
            investigation_id TEXT PRIMARY KEY
                REFERENCES investigations (id) ON DELETE CASCADE,
            parquet BLOB NOT NULL
        )""",
        """CREATE TABLE notes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            investigation_id TEXT NOT NULL REFERENCES investigations (id) ON DELETE CASCADE,
            author TEXT NOT NULL,
            text TEXT NOT NULL,
            at TEXT NOT NULL,
            group_id TEXT,
            duplicate TEXT
        )""",
        "CREATE INDEX notes_investigation ON notes (investigation_id, seq)",
        """CREATE TABLE overrides (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            investigation_id TEXT NOT NULL REFERENCES investigations (id) ON DELETE CASCADE,
            group_id TEXT NOT NULL,
            duplicate TEXT NOT NULL,
            layer TEXT NOT NULL,
            reason TEXT NOT NULL,
            author TEXT NOT NULL,
            at TEXT NOT NULL,
            confirmed INTEGER NOT NULL
        )""",
        "CREATE INDEX overrides_investigation ON overrides (investigation_id, seq)",
    ):
        conn.execute(statement)


def _v2(conn: sqlite3.Connection) -> None:
    """Sweeps (twice.sweep.run): a sweep, its finished chunks, and the duplicate groups it found
    (each also saved as an investigation, under `investigation_id`)."""
    for statement in (
        """CREATE TABLE sweeps (
            id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL,
            finished_at TEXT,
            params TEXT NOT NULL,              -- JSON: sources (redacted), window, chunk, options
            chunks_total INTEGER NOT NULL,
            warnings TEXT NOT NULL             -- JSON list of {"source", "detail"}
        )""",
        """CREATE TABLE sweep_chunks (
            sweep_id TEXT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
            chunk INTEGER NOT NULL,
            start_at TEXT NOT NULL,
            end_at TEXT NOT NULL,
            group_count INTEGER NOT NULL,
            done_at TEXT NOT NULL,
            PRIMARY KEY (sweep_id, chunk)
        )""",
        """CREATE TABLE sweep_groups (
            sweep_id TEXT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
            group_id TEXT NOT NULL,
            chunk INTEGER NOT NULL,
            investigation_id TEXT NOT NULL,
            first_at TEXT NOT NULL,
            last_at TEXT NOT NULL,
            layer TEXT,
            confidence REAL,
            protected INTEGER NOT NULL,
            money_at_risk TEXT NOT NULL,       -- JSON {"usd": 900}
            customer TEXT,
            tool_name TEXT,
            thread_id TEXT,
            attempts INTEGER NOT NULL,
            PRIMARY KEY (sweep_id, group_id)
        )""",
        "CREATE INDEX sweep_groups_first ON sweep_groups (sweep_id, first_at)",
    ):
        conn.execute(statement)


# Applied in order at open; schema version N = MIGRATIONS[:N] applied. Version 3 is one more
# function appended here (and its twin in twice.store.postgres).
MIGRATIONS: list[Migration] = [_v1, _v2]



def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def insert_investigation(conn: sqlite3.Connection, p: Prepared, *, if_new: bool = False
                         ) -> bool:
    """Write a prepared investigation (its row and its timeline) in the caller's transaction.
    An id that is taken raises InvestigationExists; with `if_new` nothing is written (False)."""
    s = p.summary
    try:
        cur = conn.execute(
            "INSERT INTO investigations (id, title, created_at, provider, group_count, "
            "worst_layer, layers, money_at_risk, sources, tags, warnings, search_text) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            + (" ON CONFLICT (id) DO NOTHING" if if_new else ""),
            (s.id, s.title, _iso(s.created_at), s.provider, s.groups, s.worst_layer,
             p.layers, dumps(s.money_at_risk), dumps(s.sources), dumps(s.tags),
             dumps(p.warnings), p.search_text))
    except sqlite3.IntegrityError:
        raise InvestigationExists(f"an investigation with id {s.id!r} exists") from None
    if cur.rowcount == 0:
        return False
    conn.execute("INSERT INTO timelines (investigation_id, parquet) VALUES (?, ?)",
                 (s.id, p.parquet))
    return True


class SqliteStore:
    def __init__(self, path: str | Path, *, busy_timeout_s: float = 10.0,
                 migrations: Sequence[Migration] = MIGRATIONS) -> None:
        self.path = Path(path)
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
            migrate(conn, migrations, str(self.path))

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

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

    def create(self, title: str, timeline: pd.DataFrame, *, provider: str = "stripe",
               sources: Sequence[str] = (), warnings: Sequence[WarningLike] = (),
               tags: Sequence[str] = (), id: str | None = None,
               analysis: Analysis | None = None) -> str:
        p = prepare(title, timeline, provider=provider, sources=sources, warnings=warnings,
                    tags=tags, inv_id=id, analysis=analysis)
        with self._connect("BEGIN IMMEDIATE") as conn:
            insert_investigation(conn, p)
        return p.summary.id

    def get(self, inv_id: str, *, timeline: bool = True) -> Snapshot | None:
        if not valid_id(inv_id):
            return None
        with self._connect("BEGIN") as conn:  # one read snapshot for all four queries
            parquet = "parquet" if timeline else "NULL AS parquet"
            row = conn.execute(
                f"SELECT {SUMMARY_COLUMNS}, warnings, {parquet} FROM investigations "
                "JOIN timelines ON timelines.investigation_id = investigations.id "
                "WHERE id = ?", (inv_id,)).fetchone()
            if row is None:
                return None
            notes = conn.execute("SELECT * FROM notes WHERE investigation_id = ? ORDER BY seq",
                                 (inv_id,)).fetchall()
            overrides = conn.execute(
                "SELECT * FROM overrides WHERE investigation_id = ? ORDER BY seq",
                (inv_id,)).fetchall()
        return Snapshot(summary=summary_from_row(dict(row)),
                        timeline=timeline_from_parquet(row["parquet"]) if timeline
                        else empty_timeline(),
                        notes=[note_from_row(dict(r)) for r in notes],
                        overrides=[override_from_row(dict(r)) for r in overrides],
                        warnings=loads(row["warnings"]))

    def list(self, search: str = "", layer: str | None = None) -> list[Summary]:
        where: list[str] = []
        params: list[str] = []
        for term in search_terms(search):
            where.append("search_text LIKE ? ESCAPE '\\'")
            params.append(like_pattern(term))
        if layer:
            where.append("layers LIKE ? ESCAPE '\\'")
            params.append(layer_pattern(str(layer)))
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._connect() as conn:
            rows = conn.execute(f"SELECT {SUMMARY_COLUMNS} FROM investigations {clause} "
                                "ORDER BY created_at DESC, seq DESC", params).fetchall()
        return [summary_from_row(dict(r)) for r in rows]

    def add_note(self, inv_id: str, note: Note) -> None:
        self._append(inv_id, "INSERT INTO notes (investigation_id, author, text, at, group_id, "
                     "duplicate) VALUES (?, ?, ?, ?, ?, ?)",
                     (note.author, note.text, _iso(utc(note.at)), note.group_id, note.duplicate))

    def add_override(self, inv_id: str, override: Override) -> None:
        o = override
        self._append(inv_id, "INSERT INTO overrides (investigation_id, group_id, duplicate, "
                     "layer, reason, author, at, confirmed) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (o.group_id, o.duplicate, str(o.layer), o.reason, o.author,
                      _iso(utc(o.at)), int(o.confirmed)))

    def _append(self, inv_id: str, sql: str, values: tuple[Any, ...]) -> None:
        # one INSERT: concurrent writers each add their row, nobody rewrites a list
        if not valid_id(inv_id):
            raise InvestigationNotFound(f"no investigation {inv_id!r}")
        with self._connect("BEGIN IMMEDIATE") as conn:
            try:
                conn.execute(sql, (inv_id, *values))
            except sqlite3.IntegrityError:
                raise InvestigationNotFound(f"no investigation {inv_id!r}") from None

    def delete(self, inv_id: str) -> None:
        if not valid_id(inv_id):
            return
        with self._connect("BEGIN IMMEDIATE") as conn:
            conn.execute("DELETE FROM investigations WHERE id = ?", (inv_id,))

    def schema_version(self) -> int:
        with self._connect() as conn:
            return _current_version(conn)


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration], name: str) -> None:
    """Bring the schema up to len(migrations), one transaction (IMMEDIATE: two processes opening
    the same new file at once do not both create the tables)."""
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                 "version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
    current = _current_version(conn)
    if current > len(migrations):
        raise StoreError(f"{name}: written by a newer twice (schema version {current}, this "
                         f"one knows {len(migrations)}); upgrade twice")
    for version in range(current + 1, len(migrations) + 1):
        migrations[version - 1](conn)
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                     (version, _iso(datetime.now(UTC))))
    conn.execute("COMMIT")


def _current_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0])
