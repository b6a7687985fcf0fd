"""Sweeps in the investigation store: the sweep, its finished chunks, the duplicates it found.

The tables are the store's schema version 2 (`SWEEPS` in twice.store.schema), read and written
through the store's transactions (`Store.transaction`), like every other table.
Finished chunks are committed in ONE transaction (their groups, the investigations those are
saved as, and their "done" rows together), so a sweep killed at any moment resumes from a
consistent state: a chunk is either done with all its groups and investigations, or not done.
Every row is inserted with ON CONFLICT DO NOTHING, so redoing a chunk never duplicates a row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from twice.store.dialect import loads
from twice.store.model import valid_id
from twice.store.prepare import Prepared
from twice.store.sql import Store, insert_investigation, read_time


@dataclass(frozen=True)
class SweepGroup:
    """One duplicate group a sweep found; also saved as the investigation `investigation_id`."""

    group_id: str
    chunk: int
    investigation_id: str
    first_at: datetime  # UTC, raw clock of the first attempt
    last_at: datetime
    layer: str | None  # the group's worst layer
    confidence: float | None  # confidence of the duplicate that names that layer
    protected: bool  # every repeat was absorbed by an idempotency key (no second effect)
    money_at_risk: dict[str, int]  # minor units per currency
    customer: str | None
    tool_name: str | None
    thread_id: str | None
    attempts: int


@dataclass(frozen=True)
class SweepRecord:
    id: str
    created_at: datetime
    finished_at: datetime | None
    params: dict[str, Any]  # sources (redacted), since, until, chunk_s, overlap_s, options
    chunks_total: int
    chunks_done: int
    group_count: int
    warnings: list[dict[str, Any]]

    @property
    def finished(self) -> bool:
        return self.finished_at is not None


def start_sweep(store: Store, sweep_id: str, params: Mapping[str, Any], chunks_total: int,
                warnings: Sequence[Mapping[str, Any]]) -> bool:
    """Record a new sweep; False when a sweep with this id exists already (a resume)."""
    with store.transaction(write=True) as tx:
        if tx.execute("SELECT 1 AS x FROM sweeps WHERE id = ?", [sweep_id]):
            return False
        tx.execute("INSERT INTO sweeps (id, created_at, finished_at, params, chunks_total, "
                   "warnings) VALUES (?, ?, NULL, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                   [sweep_id, datetime.now(UTC), dict(params), chunks_total,
                    [dict(w) for w in warnings]])
    return True


def done_chunks(store: Store, sweep_id: str) -> set[int]:
    with store.transaction() as tx:
        rows = tx.execute("SELECT chunk FROM sweep_chunks WHERE sweep_id = ?", [sweep_id])
    return {int(r["chunk"]) for r in rows}


@dataclass(frozen=True)
class ChunkDone:
    """A finished chunk: its window and the groups it owns."""

    chunk: int
    start: datetime
    end: datetime
    groups: Sequence[SweepGroup]


def commit_chunks(store: Store, sweep_id: str, chunks: Sequence[ChunkDone],
                  investigations: Sequence[Prepared] = ()) -> None:
    """Finished chunks, their groups, the investigations those groups are saved as, and the
    chunks' "done" marks, in ONE transaction: a killed sweep leaves either all of it or none.

    An investigation is the row `Store.create` writes (twice.store.prepare computes it); one that
    exists already (saved by an earlier run of the same sweep) is kept as it is."""
    with store.transaction(write=True) as tx:
        for p in investigations:
            insert_investigation(tx, p, if_new=True)
        for c in chunks:
            for g in c.groups:
                tx.execute(
                    "INSERT INTO sweep_groups (sweep_id, group_id, chunk, investigation_id, "
                    "first_at, last_at, layer, confidence, protected, money_at_risk, customer, "
                    "tool_name, thread_id, attempts) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (sweep_id, group_id) DO NOTHING",
                    [sweep_id, g.group_id, g.chunk, g.investigation_id, g.first_at, g.last_at,
                     g.layer, g.confidence, g.protected, dict(g.money_at_risk), g.customer,
                     g.tool_name, g.thread_id, g.attempts])
            tx.execute("INSERT INTO sweep_chunks (sweep_id, chunk, start_at, end_at, "
                       "group_count, done_at) VALUES (?, ?, ?, ?, ?, ?) "
                       "ON CONFLICT (sweep_id, chunk) DO NOTHING",
                       [sweep_id, c.chunk, c.start, c.end, len(c.groups), datetime.now(UTC)])


def finish_sweep(store: Store, sweep_id: str) -> None:
    with store.transaction(write=True) as tx:
        tx.execute("UPDATE sweeps SET finished_at = ? WHERE id = ? AND finished_at IS NULL",
                   [datetime.now(UTC), sweep_id])


_RECORD_SQL = (
    "SELECT id, created_at, finished_at, params, chunks_total, warnings, "
    "(SELECT count(*) FROM sweep_chunks c WHERE c.sweep_id = s.id) AS chunks_done, "
    "(SELECT count(*) FROM sweep_groups g WHERE g.sweep_id = s.id) AS group_count "
    "FROM sweeps s")


def _record(row: Mapping[str, Any]) -> SweepRecord:
    return SweepRecord(
        id=row["id"], created_at=read_time(row["created_at"]),
        finished_at=read_time(row["finished_at"]) if row["finished_at"] is not None else None,
        params=loads(row["params"]), chunks_total=int(row["chunks_total"]),
        chunks_done=int(row["chunks_done"]), group_count=int(row["group_count"]),
        warnings=loads(row["warnings"]))


def get_sweep(store: Store, sweep_id: str) -> SweepRecord | None:
    if not valid_id(sweep_id):
        return None
    with store.transaction() as tx:
        rows = tx.execute(f"{_RECORD_SQL} WHERE id = ?", [sweep_id])
    return _record(rows[0]) if rows else None


def list_sweeps(store: Store) -> list[SweepRecord]:
    """Newest first."""
    with store.transaction() as tx:
        rows = tx.execute(f"{_RECORD_SQL} ORDER BY created_at DESC, id")
    return [_record(r) for r in rows]


def sweep_groups(store: Store, sweep_id: str) -> list[SweepGroup]:
    """Oldest first."""
    if not valid_id(sweep_id):
        return []
    with store.transaction() as tx:
        rows = tx.execute("SELECT * FROM sweep_groups WHERE sweep_id = ? "
                          "ORDER BY first_at, group_id", [sweep_id])
    return [SweepGroup(
        group_id=r["group_id"], chunk=int(r["chunk"]), investigation_id=r["investigation_id"],
        first_at=read_time(r["first_at"]), last_at=read_time(r["last_at"]), layer=r["layer"],
        confidence=None if r["confidence"] is None else float(r["confidence"]),
        protected=bool(r["protected"]), money_at_risk=loads(r["money_at_risk"]),
        customer=r["customer"], tool_name=r["tool_name"], thread_id=r["thread_id"],
        attempts=int(r["attempts"])) for r in rows]


__all__ = ["SweepGroup", "SweepRecord", "ChunkDone", "start_sweep", "done_chunks",
           "commit_chunks", "finish_sweep", "get_sweep", "list_sweeps", "sweep_groups"]
