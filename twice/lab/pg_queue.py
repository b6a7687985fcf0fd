"""A work queue for agent runs in PostgreSQL: one table, a visibility timeout, SKIP LOCKED.

The queue many teams build instead of SQS when PostgreSQL is already there (the pattern behind
pgmq, graphile-worker, Oban): a receive claims the oldest visible message with
`SELECT ... FOR UPDATE SKIP LOCKED`, pushes its `visible_at` forward by the visibility timeout and
counts the receive; a worker that finishes deletes the row; a worker that dies does not, so once
`visible_at` passes another worker receives it again with `receive_count` 2.

Time comes from the process clock (`datetime.now`, which the lab's virtual clock moves), passed
as a parameter: the database server's own `now()` does not know about the virtual clock.

Each receive that returned a message is appended to a JSON lines file in the consumer-log shape
the SQS path writes, one message per line: `{"received_at", "worker", "queue", "message":
{"MessageId", "ReceiptHandle", "MD5OfBody", "Body", "Attributes": {"ApproximateReceiveCount",
"ApproximateFirstReceiveTimestamp", "SentTimestamp"}}}`. The queue is named
`postgresql:<table>/<queue>`: never the DSN, which may carry a password.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

TABLE = "lab_run_queue"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    message_id        text PRIMARY KEY,
    run_id            text NOT NULL,
    queue             text NOT NULL,
    body              text NOT NULL,
    sent_at           timestamptz NOT NULL,
    visible_at        timestamptz NOT NULL,
    receive_count     integer NOT NULL DEFAULT 0,
    first_received_at timestamptz,
    receipt_handle    text
);
CREATE INDEX IF NOT EXISTS {TABLE}_visible ON {TABLE} (run_id, queue, visible_at, sent_at);
"""
_RECEIVE = f"""
UPDATE {TABLE} AS q
SET visible_at = %(now)s + %(timeout)s,
    receive_count = q.receive_count + 1,
    first_received_at = coalesce(q.first_received_at, %(now)s),
    receipt_handle = %(handle)s
WHERE q.message_id = (
    SELECT message_id FROM {TABLE}
    WHERE run_id = %(run)s AND queue = %(queue)s AND visible_at <= %(now)s
    ORDER BY sent_at, message_id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING q.message_id, q.body, q.sent_at, q.receive_count, q.first_received_at
"""


def _ms(stamp: datetime) -> str:
    return str(round(stamp.timestamp() * 1000))


class PgRunQueue:
    """`RunQueue`'s interface (send, receive, delete) on a PostgreSQL table."""

    system = "postgresql"

    def __init__(
        self, dsn: str, log_path: Path, *, queue: str, visibility_timeout: int = 360
    ) -> None:
        self.dsn = dsn
        self.log_path = log_path
        self.queue = queue
        self.name = f"postgresql:{TABLE}/{queue}"
        self.visibility_timeout = visibility_timeout
        self.run_id = uuid.uuid4().hex  # several lab runs may share one database
        self._conn: psycopg.Connection[Any] | None = None

    def __enter__(self) -> PgRunQueue:
        self._conn = psycopg.connect(self.dsn, autocommit=True)
        self._conn.execute(_SCHEMA)
        self.log_path.write_text("", encoding="utf-8")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._conn is not None:
            self._conn.execute(f"DELETE FROM {TABLE} WHERE run_id = %s", (self.run_id,))
            self._conn.close()
            self._conn = None

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            raise RuntimeError("PgRunQueue is not open")
        return self._conn

    def send(self, thread_id: str, text: str) -> str:
        body = json.dumps({"thread_id": thread_id, "input": text})
        message_id = str(uuid.uuid4())
        now = datetime.now(UTC)
        self.conn.execute(
            f"INSERT INTO {TABLE} (message_id, run_id, queue, body, sent_at, visible_at) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (message_id, self.run_id, self.queue, body, now, now),
        )
        return message_id

    def receive(self, worker: str) -> dict[str, Any] | None:
        """Claim the oldest visible message (one short poll); logged when there is one."""
        now = datetime.now(UTC)
        handle = uuid.uuid4().hex
        with self.conn.transaction():
            row = self.conn.execute(
                _RECEIVE,
                {
                    "now": now,
                    "timeout": timedelta(seconds=self.visibility_timeout),
                    "handle": handle,
                    "run": self.run_id,
                    "queue": self.queue,
                },
            ).fetchone()
        if row is None:
            return None
        message_id, body, sent_at, count, first = row
        message: dict[str, Any] = {
            "MessageId": message_id,
            "ReceiptHandle": handle,
            "MD5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
            "Body": body,
            "Attributes": {
                "ApproximateReceiveCount": str(count),
                "ApproximateFirstReceiveTimestamp": _ms(first),
                "SentTimestamp": _ms(sent_at),
            },
        }
        record = {
            "received_at": now.isoformat(timespec="microseconds"),
            "worker": worker,
            "queue": self.name,
            "message": message,
        }
        with self.log_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
        return message

    def delete(self, message: dict[str, Any]) -> None:
        """Delete a message this receive still holds (a stale receipt handle deletes nothing)."""
        self.conn.execute(
            f"DELETE FROM {TABLE} WHERE message_id = %s AND receipt_handle = %s",
            (message["MessageId"], message["ReceiptHandle"]),
        )
