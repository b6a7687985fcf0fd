"""The investigation store in PostgreSQL, for a team sharing links.

The same tables as `twice.store.sqlite` (BYTEA for the Parquet, jsonb for the small lists).
A connection per call (Streamlit serves sessions from threads), parameterised queries only,
a `statement_timeout` on every connection, and the DSN's password never in an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pandas as pd
import psycopg
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb, set_json_dumps
from psycopg.types.string import StrDumperUnknown

from twice.connectors.base import redact
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

Migration = Callable[[psycopg.Connection[Any]], None]
# serialises migrations of concurrent openers (any constant; "twice" in ASCII)
_MIGRATION_LOCK = 0x7477696365


def _v1(conn: psycopg.Connection[Any]) -> None:
    for statement in (
        """CREATE TABLE investigations (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            title TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            provider TEXT NOT NULL,
            group_count INTEGER NOT NULL,
            worst_layer TEXT,
            layers TEXT NOT NULL,
            money_at_risk JSONB NOT NULL,
            sources JSONB NOT NULL,
            tags JSONB NOT NULL,
            warnings JSONB NOT NULL,
            search_text TEXT NOT NULL
        )""",
        "CREATE INDEX investigations_created ON investigations (created_at DESC, seq DESC)",
        """CREATE TABLE timelines (
            investigation_id TEXT PRIMARY KEY
                REFERENCES investigations (id) ON DELETE CASCADE,
            parquet BYTEA NOT NULL
        )""",
        """CREATE TABLE notes (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            investigation_id TEXT NOT NULL REFERENCES investigations (id) ON DELETE CASCADE,
            author TEXT NOT NULL,
            text TEXT NOT NULL,
            at TIMESTAMPTZ NOT NULL,
            group_id TEXT,
            duplicate TEXT
        )""",
        "CREATE INDEX notes_investigation ON notes (investigation_id, seq)",
        """CREATE TABLE overrides (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            investigation_id TEXT NOT NULL REFERENCES investigations (id) ON DELETE CASCADE,
            group_id TEXT NOT NULL,
            duplicate TEXT NOT NULL,
            layer TEXT NOT NULL,
            reason TEXT NOT NULL,
            author TEXT NOT NULL,
            at TIMESTAMPTZ NOT NULL,
            confirmed BOOLEAN NOT NULL
        )""",
        "CREATE INDEX overrides_investigation ON overrides (investigation_id, seq)",
    ):
        conn.execute(statement)


def _v2(conn: psycopg.Connection[Any]) -> None:
    """Sweeps (twice.sweep.run); the twin of twice.store.sqlite._v2."""
    for statement in (
        """CREATE TABLE sweeps (
            id TEXT PRIMARY KEY,
            created_at TIMESTAMPTZ NOT NULL,
            finished_at TIMESTAMPTZ,
            params JSONB NOT NULL,
            chunks_total INTEGER NOT NULL,
            warnings JSONB NOT NULL
        )""",
        """CREATE TABLE sweep_chunks (
            sweep_id TEXT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
            chunk INTEGER NOT NULL,
            start_at TIMESTAMPTZ NOT NULL,
            end_at TIMESTAMPTZ NOT NULL,
            group_count INTEGER NOT NULL,
            done_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (sweep_id, chunk)
        )""",
        """CREATE TABLE sweep_groups (
            sweep_id TEXT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
            group_id TEXT NOT NULL,
            chunk INTEGER NOT NULL,
            investigation_id TEXT NOT NULL,
            first_at TIMESTAMPTZ NOT NULL,
            last_at TIMESTAMPTZ NOT NULL,
            layer TEXT,
            confidence DOUBLE PRECISION,
            protected BOOLEAN NOT NULL,
            money_at_risk JSONB NOT NULL,
            customer TEXT,
            tool_name TEXT,
            thread_id TEXT,
            attempts INTEGER NOT NULL,
            PRIMARY KEY (sweep_id, group_id)
        )""",
        "CREATE INDEX sweep_groups_first ON sweep_groups (sweep_id, first_at)",
    ):
        conn.execute(statement)


# Applied in order at open, like twice.store.sqlite.MIGRATIONS (keep the two in step).
MIGRATIONS: list[Migration] = [_v1, _v2]



class _NulSafeStr(StrDumperUnknown):
    def dump(self, obj: str) -> Any:
        return super().dump(obj.replace("\x00", "\ufffd"))


def _no_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_no_nul(k): _no_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_no_nul(v) for v in value]
    return value


def _json_dumps_nul_safe(value: Any) -> str:
    return json.dumps(_no_nul(value))


def insert_investigation(conn: psycopg.Connection[Any], p: Prepared, *, if_new: bool = False
                         ) -> bool:
    """Write a prepared investigation (its row and its timeline) in the caller's transaction
    (a connection from `PostgresStore._connect`: its dumpers keep NUL out). An id that is taken
    raises InvestigationExists; with `if_new` nothing is written (False)."""
    s = p.summary
    try:
        with conn.transaction():  # a savepoint: a taken id is reported as such
            cur = conn.execute(
                "INSERT INTO investigations (id, title, created_at, provider, group_count, "
                "worst_layer, layers, money_at_risk, sources, tags, warnings, search_text) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                + (" ON CONFLICT (id) DO NOTHING" if if_new else ""),
                (s.id, s.title, s.created_at, s.provider, s.groups, s.worst_layer, p.layers,
                 Jsonb(s.money_at_risk), Jsonb(s.sources), Jsonb(s.tags), Jsonb(p.warnings),
                 p.search_text))
    except errors.UniqueViolation:
        raise InvestigationExists(f"an investigation with id {s.id!r} exists") from None
    if cur.rowcount == 0:
        return False
    conn.execute("INSERT INTO timelines (investigation_id, parquet) VALUES (%s, %s)",
                 (s.id, p.parquet))
    return True


class PostgresStore:
    def __init__(self, dsn: str, *, statement_timeout_ms: int = 60_000,
                 connect_timeout_s: int = 10,
                 migrations: Sequence[Migration] = MIGRATIONS) -> None:
        self.name = redact(dsn)
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"{self.name}: not a valid PostgreSQL DSN ({redact(str(exc))})") \
                from None
        options = f"{params.get('options') or ''} -c statement_timeout={int(statement_timeout_ms)}"
        params["options"] = options.strip()
        params.setdefault("connect_timeout", connect_timeout_s)
        self._conninfo = make_conninfo("", **params)
        with self._connect() as conn:
            migrate(conn, migrations, self.name)

    def __repr__(self) -> str:
        return f"PostgresStore({self.name!r})"

    @contextmanager
    def _connect(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one call, in one transaction committed when the block ends."""
        try:
            conn = psycopg.connect(self._conninfo, row_factory=dict_row)
        except psycopg.Error as exc:
            raise StoreError(f"{self.name}: cannot connect ({_reason(exc)})") from None
        # PostgreSQL text and jsonb cannot hold NUL, which evidence can (a JSON "\u0000"):
        # stored as U+FFFD instead of the whole investigation failing to save
        conn.adapters.register_dumper(str, _NulSafeStr)
        set_json_dumps(_json_dumps_nul_safe, context=conn)
        try:
            with conn, conn.transaction():
                yield conn
        except errors.QueryCanceled:
            raise StoreError(f"{self.name}: query timed out (statement_timeout)") from None
        except psycopg.Error as exc:
            raise StoreError(f"{self.name}: {_reason(exc)}") from None

    def create(self, title: str, timeline: pd.DataFrame, *, provider: str = "stripe",
               sources: Sequence[str] = (), warnings: Sequence[WarningLike] = (),
               tags: Sequence[str] = (), id: str | None = None,
               analysis: Analysis | None = None) -> str:
        p = prepare(title, timeline, provider=provider, sources=sources, warnings=warnings,
                    tags=tags, inv_id=id, analysis=analysis)
        with self._connect() as conn:
            insert_investigation(conn, p)
        return p.summary.id

    def get(self, inv_id: str, *, timeline: bool = True) -> Snapshot | None:
        if not valid_id(inv_id):
            return None
        with self._connect() as conn:
            # REPEATABLE READ would be stricter; notes are append-only, so a note added between
            # these queries only makes the snapshot a little fresher
            parquet = "parquet" if timeline else "NULL AS parquet"
            row = conn.execute(
                f"SELECT {SUMMARY_COLUMNS}, warnings, {parquet} FROM investigations "
                "JOIN timelines ON timelines.investigation_id = investigations.id "
                "WHERE id = %s", (inv_id,)).fetchone()
            if row is None:
                return None
            notes = conn.execute(
                "SELECT * FROM notes WHERE investigation_id = %s ORDER BY seq",
                (inv_id,)).fetchall()
            overrides = conn.execute(
                "SELECT * FROM overrides WHERE investigation_id = %s ORDER BY seq",
                (inv_id,)).fetchall()
        return Snapshot(summary=summary_from_row(row),
                        timeline=timeline_from_parquet(bytes(row["parquet"])) if timeline
                        else empty_timeline(),
                        notes=[note_from_row(r) for r in notes],
                        overrides=[override_from_row(r) for r in overrides],
                        warnings=loads(row["warnings"]))

    def list(self, search: str = "", layer: str | None = None) -> list[Summary]:
        where: list[str] = []
        params: list[str] = []
        for term in search_terms(search):
            where.append("search_text LIKE %s ESCAPE '\\'")
            params.append(like_pattern(term))
        if layer:
            where.append("layers LIKE %s ESCAPE '\\'")
            params.append(layer_pattern(str(layer)))
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._connect() as conn:
            rows = conn.execute(f"SELECT {SUMMARY_COLUMNS} FROM investigations {clause} "
                                "ORDER BY created_at DESC, seq DESC", params).fetchall()
        return [summary_from_row(r) for r in rows]

    def add_note(self, inv_id: str, note: Note) -> None:
        self._append(inv_id, "INSERT INTO notes (investigation_id, author, text, at, group_id, "
                     "duplicate) VALUES (%s, %s, %s, %s, %s, %s)",
                     (note.author, note.text, utc(note.at), note.group_id, note.duplicate))

    def add_override(self, inv_id: str, override: Override) -> None:
        o = override
        self._append(inv_id, "INSERT INTO overrides (investigation_id, group_id, duplicate, "
                     "layer, reason, author, at, confirmed) "
                     "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                     (o.group_id, o.duplicate, str(o.layer), o.reason, o.author, utc(o.at),
                      bool(o.confirmed)))

    def _append(self, inv_id: str, sql: str, values: tuple[Any, ...]) -> None:
        # one INSERT: concurrent writers each add their row, nobody rewrites a list
        if not valid_id(inv_id):
            raise InvestigationNotFound(f"no investigation {inv_id!r}")
        with self._connect() as conn:
            try:
                with conn.transaction():
                    conn.execute(sql, (inv_id, *values))
            except errors.ForeignKeyViolation:
                raise InvestigationNotFound(f"no investigation {inv_id!r}") from None

    def delete(self, inv_id: str) -> None:
        if not valid_id(inv_id):
            return
        with self._connect() as conn:
            conn.execute("DELETE FROM investigations WHERE id = %s", (inv_id,))

    def schema_version(self) -> int:
        with self._connect() as conn:
            return _current_version(conn)


def migrate(conn: psycopg.Connection[Any], migrations: Sequence[Migration], name: str) -> None:
    """Bring the schema up to len(migrations) in the caller's transaction; an advisory lock
    makes a second process opening the same new database wait, then find the work done."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                 "version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
    current = _current_version(conn)
    if current > len(migrations):
        raise StoreError(f"{name}: written by a newer twice (schema version {current}, this "
                         f"one knows {len(migrations)}); upgrade twice")
    for version in range(current + 1, len(migrations) + 1):
        migrations[version - 1](conn)
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))


def _current_version(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT coalesce(max(version), 0) AS v FROM schema_version").fetchone()
    return int(row["v"]) if row else 0


def _reason(exc: psycopg.Error) -> str:
    # libpq messages name host and user, not the password; redact anyway in case a DSN is echoed
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return redact(text)
