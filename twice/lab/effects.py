"""A durable record of the agent's own effects: the fix for a resume past the key retention.

An idempotency key protects a re-execution only while the provider keeps it (Stripe prunes keys
after at least 24 h). A run resumed later (a human approval over a weekend) re-runs its tool call
with the same derived key, and the provider treats it as new. The fix keeps the agent's own
record: before a create, the tool looks its derived key up in `agent_effects`; after the provider
answers, it records the object it created. The table lives in the checkpointer's own database
(the SqliteSaver file, or the PostgresSaver database), so it is as durable as the checkpoints.

The window between the provider's commit and the insert is still covered by the key (seconds,
well within its retention); only resumes after the retention need the record.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

TABLE = "agent_effects"
_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    "idempotency_key TEXT PRIMARY KEY, thread_id TEXT NOT NULL, tool_call_id TEXT NOT NULL, "
    "object_id TEXT NOT NULL, status TEXT NOT NULL, recorded_at TEXT NOT NULL)"
)


@dataclass(frozen=True)
class Effect:
    idempotency_key: str
    thread_id: str
    tool_call_id: str
    object_id: str
    status: str
    recorded_at: str


class EffectLedger:
    """`agent_effects` in the checkpointer's database (SQLite connection or psycopg one)."""

    def __init__(self, checkpointer: BaseCheckpointSaver[Any]) -> None:
        conn = getattr(checkpointer, "conn", None)
        if conn is None:
            raise TypeError(f"{type(checkpointer).__name__} has no connection to keep effects in")
        self._conn: Any = conn
        self._sqlite = isinstance(conn, sqlite3.Connection)
        self._lock: Any = getattr(checkpointer, "lock", None) or threading.Lock()
        self._execute(_CREATE)

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if not self._sqlite:
            sql = sql.replace("?", "%s")
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute(sql, params)
                rows = list(cur.fetchall()) if cur.description else []
            finally:
                cur.close()
            if self._sqlite:
                self._conn.commit()
            elif not getattr(self._conn, "autocommit", True):
                self._conn.commit()
        return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]

    def find(self, idempotency_key: str) -> Effect | None:
        rows = self._execute(
            f"SELECT idempotency_key, thread_id, tool_call_id, object_id, status, recorded_at "
            f"FROM {TABLE} WHERE idempotency_key = ?",
            (idempotency_key,),
        )
        return Effect(*(str(v) for v in rows[0])) if rows else None

    def record(self, effect: Effect) -> None:
        self._execute(
            f"INSERT INTO {TABLE} (idempotency_key, thread_id, tool_call_id, object_id, status, "
            "recorded_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING",
            (
                effect.idempotency_key,
                effect.thread_id,
                effect.tool_call_id,
                effect.object_id,
                effect.status,
                effect.recorded_at,
            ),
        )

    def all(self) -> list[Effect]:
        rows = self._execute(
            f"SELECT idempotency_key, thread_id, tool_call_id, object_id, status, recorded_at "
            f"FROM {TABLE} ORDER BY recorded_at"
        )
        return [Effect(*(str(v) for v in row)) for row in rows]
