"""The one SQL layer: every query the store runs, written once with `?` placeholders, on a
`Transaction` that a backend (`twice.store.sqlite`, `twice.store.postgres`) opens. The backends
only connect and migrate; what differs between the databases is in `twice.store.dialect`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from twice.engine import Analysis, Options
from twice.store.analyses import SavedAnalysis, decode, engine_fingerprint
from twice.store.dialect import Dialect, loads
from twice.store.errors import InvestigationExists, InvestigationNotFound, StoreError
from twice.store.model import (
    OWNER_MAX,
    STATUSES,
    DuplicateHit,
    DuplicateRow,
    Note,
    Override,
    Snapshot,
    Summary,
    WarningLike,
    valid_id,
)
from twice.store.prepare import (
    Prepared,
    amount_term,
    keepable,
    prepare,
    timeline_from_parquet,
)
from twice.store.schema import SCHEMA_VERSION_TABLE, Migration
from twice.timeline import empty_timeline


class Transaction:
    """One transaction: `execute` takes `?` placeholders and plain Python values (datetimes,
    dicts and lists as JSON, booleans) and returns the rows as dicts."""

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        self.conn = conn  # the driver's connection (a migration runs its DDL on it)
        self.dialect = dialect

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(self.dialect.sql(sql), [self.dialect.write(v) for v in params])
        if cur.description is None:
            return []
        return [dict(r) for r in cur.fetchall()]

    def write(self, sql: str, params: Sequence[Any] = ()) -> int:
        """A statement that changes rows; returns how many it changed."""
        cur = self.conn.execute(self.dialect.sql(sql), [self.dialect.write(v) for v in params])
        return int(cur.rowcount)

    def savepoint(self) -> AbstractContextManager[None]:
        """A nested transaction: a failed statement inside it leaves the outer one usable."""
        return self.dialect.savepoint(self.conn)


# the investigations columns `summary_from_row` reads, and its duplicates' count and refunds
# (`known`: how many were looked at, 0 for a row saved before version 4)
SUMMARY_COLUMNS = (
    "id, title, created_at, provider, group_count AS groups, worst_layer, money_at_risk, "
    "sources, tags, first_at, last_at, status, owner, "
    "(SELECT count(*) FROM duplicates dd WHERE dd.investigation_id = investigations.id) "
    "AS dup_count, (SELECT count(dd.refunded) FROM duplicates dd "
    "WHERE dd.investigation_id = investigations.id) AS refund_known, "
    "(SELECT coalesce(sum(CASE WHEN dd.refunded THEN 1 ELSE 0 END), 0) FROM duplicates dd "
    "WHERE dd.investigation_id = investigations.id) AS refund_count")
# how `list` may order the investigations
ORDERS = {
    "saved": "created_at DESC, seq DESC",
    "incident": "(first_at IS NULL), first_at DESC, seq DESC",  # newest incident first
    "incident_oldest": "(first_at IS NULL), first_at ASC, seq ASC",
}


class Store(ABC):
    """Saved investigations in a SQL database. A connection per call (Streamlit serves
    sessions from threads); `transaction()` is the way in for other tables too (sweeps)."""

    name: str  # shown in messages, without any password

    @abstractmethod
    def transaction(self, write: bool = False) -> AbstractContextManager[Transaction]:
        """A transaction committed when the block ends (rolled back if it raises); `write`
        takes the database's write lock at once (SQLite), so two writers queue."""

    def create(self, title: str, timeline: pd.DataFrame, *, provider: str = "stripe",
               sources: Sequence[str] = (), warnings: Sequence[WarningLike] = (),
               tags: Sequence[str] = (), id: str | None = None,
               analysis: Analysis | None = None, options: Options | None = None) -> str:
        """Save a snapshot; returns its id. `options`: the engine's (kept with it: reopened, it
        is analysed with them again); `analysis`: `analyze(timeline, options=options)` if the
        caller has it already (saves recomputing it)."""
        p = prepare(title, timeline, provider=provider, sources=sources, warnings=warnings,
                    tags=tags, inv_id=id, analysis=analysis, options=options)
        if analysis is not None:  # the whole analysis of this timeline: kept for its page
            p = replace(p, analysis=keepable(analysis, timeline, options or Options()))
        with self.transaction(write=True) as tx:
            insert_investigation(tx, p)
        return p.summary.id

    def get(self, inv_id: str, *, timeline: bool = True) -> Snapshot | None:
        """The investigation, or None. `timeline=False`: all but the timeline (an empty frame in
        its place), for a caller that holds the timeline already (the web app caches it)."""
        if not valid_id(inv_id):
            return None
        with self.transaction() as tx:  # one read snapshot for the three queries
            parquet = "parquet" if timeline else "NULL AS parquet"
            rows = tx.execute(
                f"SELECT {SUMMARY_COLUMNS}, warnings, options, {parquet} FROM investigations "
                "JOIN timelines ON timelines.investigation_id = investigations.id "
                "WHERE id = ?", [inv_id])
            if not rows:
                return None
            notes = tx.execute("SELECT * FROM notes WHERE investigation_id = ? ORDER BY seq",
                               [inv_id])
            overrides = tx.execute(
                "SELECT * FROM overrides WHERE investigation_id = ? ORDER BY seq", [inv_id])
        row = rows[0]
        return Snapshot(summary=summary_from_row(row),
                        timeline=timeline_from_parquet(bytes(row["parquet"])) if timeline
                        else empty_timeline(),
                        notes=[note_from_row(r) for r in notes],
                        overrides=[override_from_row(r) for r in overrides],
                        warnings=loads(row["warnings"]),
                        options=Options.from_dict(loads(row["options"])
                                                  if row["options"] is not None else None))

    def analysis(self, snapshot: Snapshot) -> Analysis | None:
        """The investigation's analysis as kept (`twice.store.analyses`): the one its page
        shows, without running the engine. None when none is kept, or it was made by other
        code or with other options, or cannot be read: the caller analyses the snapshot and
        may keep that (`keep_analysis`)."""
        inv_id = snapshot.summary.id
        with self.transaction() as tx:
            rows = tx.execute("SELECT * FROM analyses WHERE investigation_id = ? AND engine = ?",
                              [inv_id, engine_fingerprint()])
        if not rows:
            return None
        return decode(rows[0], snapshot)

    def keep_analysis(self, snapshot: Snapshot, analysis: Analysis) -> bool:
        """Keep `analysis`, made of `snapshot` as it was read, in place of any kept before;
        False when the investigation was deleted meanwhile (nothing is kept)."""
        saved = keepable(analysis, snapshot.timeline, snapshot.options)
        if saved is None:
            return False
        with self.transaction(write=True) as tx:
            try:
                with tx.savepoint():
                    write_analysis(tx, snapshot.summary.id, saved)
            except tx.dialect.foreign_key_violation:
                return False
        return True

    def search_duplicates(self, search: str, limit: int = 50) -> list[DuplicateHit]:
        """The duplicates whose two attempts hold every word of `search` (a customer, an
        amount as "49.00" or "4900", a charge, PaymentIntent, request or tool call id, the tool's
        name), newest investigation first. An amount matches whole ("900" is not "4900")."""
        where: list[str] = []
        params: list[Any] = []
        for term in search.lower().split():
            amount = amount_term(term)
            where.append("d.search_text LIKE ? ESCAPE '\\'")
            params.append(like_pattern(term) if amount is None
                          else "%\n" + like_pattern(amount)[1:-1] + "\n%")
        if not where:
            return []
        return self._hits(" AND ".join(where), params, "investigations.created_at DESC, "
                          "investigations.seq DESC, d.at DESC, d.dup_key", limit)

    def customer_duplicates(self, customer: str, limit: int = 500) -> list[DuplicateHit]:
        """Every saved duplicate that charged this customer (the id exactly), newest first."""
        return self._hits("d.customer = ?", [customer],
                          "d.at DESC, investigations.created_at DESC, d.dup_key", limit)

    def _hits(self, where: str, params: Sequence[Any], order: str, limit: int
              ) -> list[DuplicateHit]:
        with self.transaction() as tx:
            rows = tx.execute(
                f"SELECT {SUMMARY_COLUMNS}, d.dup_key, d.group_id, d.layer, d.gap_seconds, "
                "d.at, d.customer, d.amount, d.currency, d.refunded, d.tool_name FROM duplicates d "
                "JOIN investigations ON investigations.id = d.investigation_id "
                f"WHERE {where} ORDER BY {order} LIMIT ?", [*params, int(limit)])
        return [DuplicateHit(summary_from_row(r), duplicate_from_row(r)) for r in rows]

    def duplicates(self, inv_id: str) -> list[DuplicateRow]:
        """An investigation's duplicates as saved with it (its verdicts then), oldest first."""
        if not valid_id(inv_id):
            return []
        with self.transaction() as tx:
            rows = tx.execute(
                "SELECT dup_key, group_id, layer, gap_seconds, at, customer, amount, currency, "
                "refunded, tool_name FROM duplicates WHERE investigation_id = ? "
                "ORDER BY at, dup_key",
                [inv_id])
        return [duplicate_from_row(r) for r in rows]

    def list(self, search: str = "", layer: str | None = None, *, status: str | None = None,
             order: str = "saved") -> list[Summary]:
        """Every word of `search` must be in the title, a tag or an id; `status` one of
        STATUSES; `order` one of ORDERS (newest saved first by default)."""
        where: list[str] = []
        params: list[str] = []
        for term in search.lower().split():
            where.append("search_text LIKE ? ESCAPE '\\'")
            params.append(like_pattern(term))
        if layer:
            where.append("layers LIKE ? ESCAPE '\\'")
            params.append(like_pattern(f" {layer} "))  # one layer of `Prepared.layers`
        if status:
            where.append("status = ?")
            params.append(status)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self.transaction() as tx:
            rows = tx.execute(f"SELECT {SUMMARY_COLUMNS} FROM investigations {clause} "
                              f"ORDER BY {ORDERS[order]}", params)
        return [summary_from_row(r) for r in rows]

    def set_workflow(self, inv_id: str, *, status: str, owner: str | None) -> None:
        """Set the incident's status (one of STATUSES) and owner (None or blank: nobody)."""
        if status not in STATUSES:
            raise ValueError(f"status {status!r}: use one of {', '.join(STATUSES)}")
        owner = (owner or "").strip()[:OWNER_MAX] or None
        if not valid_id(inv_id):
            raise InvestigationNotFound(f"no investigation {inv_id!r}")
        with self.transaction(write=True) as tx:
            if not tx.write("UPDATE investigations SET status = ?, owner = ? WHERE id = ?",
                            [status, owner, inv_id]):
                raise InvestigationNotFound(f"no investigation {inv_id!r}")

    def add_note(self, inv_id: str, note: Note) -> None:
        self._append(inv_id, "INSERT INTO notes (investigation_id, author, text, at, group_id, "
                     "duplicate) VALUES (?, ?, ?, ?, ?, ?)",
                     [note.author, note.text, utc(note.at), note.group_id, note.duplicate])

    def add_override(self, inv_id: str, override: Override) -> None:
        o = override
        self._append(inv_id, "INSERT INTO overrides (investigation_id, group_id, duplicate, "
                     "layer, reason, author, at, confirmed) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     [o.group_id, o.duplicate, str(o.layer), o.reason, o.author, utc(o.at),
                      bool(o.confirmed)])

    def _append(self, inv_id: str, sql: str, values: Sequence[Any]) -> None:
        # one INSERT: concurrent writers each add their row, nobody rewrites a list
        if not valid_id(inv_id):
            raise InvestigationNotFound(f"no investigation {inv_id!r}")
        with self.transaction(write=True) as tx:
            try:
                with tx.savepoint():
                    tx.execute(sql, [inv_id, *values])
            except tx.dialect.foreign_key_violation:
                raise InvestigationNotFound(f"no investigation {inv_id!r}") from None

    def delete(self, inv_id: str) -> None:
        if not valid_id(inv_id):
            return
        with self.transaction(write=True) as tx:
            tx.execute("DELETE FROM investigations WHERE id = ?", [inv_id])

    def schema_version(self) -> int:
        with self.transaction() as tx:
            return current_version(tx)


def insert_investigation(tx: Transaction, p: Prepared, *, if_new: bool = False) -> bool:
    """Write a prepared investigation (its row and its timeline) in the caller's transaction.
    An id that is taken raises InvestigationExists; with `if_new` nothing is written (False)."""
    s = p.summary
    try:
        with tx.savepoint():  # a taken id is reported as such, the transaction stays usable
            inserted = tx.write(
                "INSERT INTO investigations (id, title, created_at, provider, group_count, "
                "worst_layer, layers, money_at_risk, sources, tags, warnings, search_text, "
                "options, first_at, last_at, status, owner) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                + (" ON CONFLICT (id) DO NOTHING" if if_new else ""),
                [s.id, s.title, s.created_at, s.provider, s.groups, s.worst_layer, p.layers,
                 s.money_at_risk, s.sources, s.tags, p.warnings, p.search_text, p.options,
                 s.first_at, s.last_at, s.status, s.owner])
    except tx.dialect.unique_violation:
        raise InvestigationExists(f"an investigation with id {s.id!r} exists") from None
    if not inserted:
        return False
    tx.execute("INSERT INTO timelines (investigation_id, parquet) VALUES (?, ?)",
               [s.id, p.parquet])
    if p.analysis is not None:
        write_analysis(tx, s.id, p.analysis)
    for d, text in p.duplicates:
        tx.execute("INSERT INTO duplicates (investigation_id, dup_key, group_id, layer, "
                   "gap_seconds, at, customer, amount, currency, search_text, refunded, "
                   "tool_name) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [s.id, d.dup_key, d.group_id, d.layer, d.gap_seconds, d.at, d.customer,
                    d.amount, d.currency, text, d.refunded, d.tool])
    return True


def write_analysis(tx: Transaction, inv_id: str, saved: SavedAnalysis) -> None:
    """Keep an investigation's analysis, in place of any kept before."""
    tx.execute("INSERT INTO analyses (investigation_id, engine, body, attempts, repeated, "
               "aligned) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (investigation_id) DO UPDATE "
               "SET engine = excluded.engine, body = excluded.body, "
               "attempts = excluded.attempts, repeated = excluded.repeated, "
               "aligned = excluded.aligned",
               [inv_id, saved.engine, saved.body, saved.attempts, saved.repeated,
                saved.aligned])


def migrate(tx: Transaction, migrations: Sequence[Migration], name: str) -> None:
    """Bring the schema up to len(migrations) in the caller's transaction (which the backend
    holds exclusively: a second process opening the same new store waits, then finds the work
    done)."""
    tx.conn.execute(tx.dialect.ddl(SCHEMA_VERSION_TABLE))
    current = current_version(tx)
    if current > len(migrations):
        raise StoreError(f"{name}: written by a newer twice (schema version {current}, this "
                         f"one knows {len(migrations)}); upgrade twice")
    for version in range(current + 1, len(migrations) + 1):
        migrations[version - 1](tx.conn)
        tx.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                   [version, datetime.now(UTC)])


def current_version(tx: Transaction) -> int:
    rows = tx.execute("SELECT coalesce(max(version), 0) AS v FROM schema_version")
    return int(rows[0]["v"]) if rows else 0


def utc(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ValueError("note/override times must be timezone-aware (UTC)")
    return at.astimezone(UTC)


def like_pattern(term: str) -> str:
    """A LIKE pattern matching `term` anywhere; ids are full of `_`, so escape it (with `\\`)."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def read_time(value: Any) -> datetime:
    """A time column: ISO text (SQLite) or a datetime (PostgreSQL), in UTC."""
    at = datetime.fromisoformat(value) if isinstance(value, str) else value
    return at.astimezone(UTC)


def summary_from_row(row: Mapping[str, Any]) -> Summary:
    duplicates = int(row["dup_count"])
    known = int(row["refund_known"]) == duplicates  # all looked at (none: 0 of 0 refunded)
    return Summary(id=row["id"], title=row["title"], created_at=read_time(row["created_at"]),
                   provider=row["provider"], groups=int(row["groups"]),
                   worst_layer=row["worst_layer"], money_at_risk=loads(row["money_at_risk"]),
                   sources=loads(row["sources"]), tags=loads(row["tags"]),
                   first_at=None if row["first_at"] is None else read_time(row["first_at"]),
                   last_at=None if row["last_at"] is None else read_time(row["last_at"]),
                   status=row["status"], owner=row["owner"], duplicates=duplicates,
                   refunded=int(row["refund_count"]) if known else None)


def duplicate_from_row(row: Mapping[str, Any]) -> DuplicateRow:
    return DuplicateRow(dup_key=row["dup_key"], group_id=row["group_id"], layer=row["layer"],
                        gap_seconds=float(row["gap_seconds"]),
                        at=None if row["at"] is None else read_time(row["at"]),
                        customer=row["customer"],
                        amount=None if row["amount"] is None else int(row["amount"]),
                        currency=row["currency"],
                        refunded=None if row["refunded"] is None else bool(row["refunded"]),
                        tool=row["tool_name"])


def note_from_row(row: Mapping[str, Any]) -> Note:
    return Note(author=row["author"], text=row["text"], at=read_time(row["at"]),
                group_id=row["group_id"], duplicate=row["duplicate"])


def override_from_row(row: Mapping[str, Any]) -> Override:
    return Override(group_id=row["group_id"], duplicate=row["duplicate"], layer=row["layer"],
                    reason=row["reason"], author=row["author"], at=read_time(row["at"]),
                    confirmed=bool(row["confirmed"]))

