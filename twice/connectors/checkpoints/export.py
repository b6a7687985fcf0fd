"""Save checkpoints fetched from a PostgresSaver database as a SqliteSaver file.

An investigation pulled from a live database must be re-runnable offline and attachable to a
postmortem, in a format `twice analyze` reads. LangGraph's own savers do the copy: PostgresSaver
reads (in a read-only session) and SqliteSaver writes, both with the strict serializer, so the
file is exactly what SqliteSaver would have written for those threads.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from psycopg.rows import dict_row

from twice.connectors.base import SourceError, redact
from twice.connectors.checkpoints.decode import strict_serializer


def export_threads(dsn: str, thread_ids: Iterable[str], path: Path,
                   statement_timeout_s: float = 60.0) -> int:
    """Copy every checkpoint and pending write of `thread_ids` into a SqliteSaver file at
    `path`; returns the number of checkpoints copied."""
    serde = strict_serializer()
    options = (f"-c default_transaction_read_only=on "
               f"-c statement_timeout={max(1, int(statement_timeout_s * 1000))}")
    try:
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                             options=options, connect_timeout=10) as pg:
            source = PostgresSaver(pg, serde=serde)  # type: ignore[arg-type]
            with sqlite3.connect(path, check_same_thread=False) as lite:
                target = SqliteSaver(lite, serde=serde)
                return sum(_copy_thread(source, target, t) for t in sorted(set(thread_ids)))
    except psycopg.Error as exc:
        raise SourceError(redact(dsn), f"cannot export checkpoints: {type(exc).__name__}: "
                                       f"{redact(str(exc)).splitlines()[0]}") from None


def _copy_thread(source: PostgresSaver, target: SqliteSaver, thread_id: str) -> int:
    copied = 0
    # oldest first, so every parent exists before its children
    for item in reversed(list(source.list({"configurable": {"thread_id": thread_id}}))):
        conf = item.config["configurable"]
        parent: dict[str, Any] = {"configurable": {
            "thread_id": thread_id, "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "checkpoint_id": (item.parent_config or {}).get("configurable", {}).get(
                "checkpoint_id")}}
        target.put(parent, item.checkpoint, item.metadata,  # type: ignore[arg-type]
                   item.checkpoint.get("channel_versions", {}))
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in item.pending_writes or []:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            target.put_writes(item.config, writes, task_id)
        copied += 1
    return copied
