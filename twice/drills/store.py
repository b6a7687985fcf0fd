"""Drill scores per trainee, in their own SQLite file beside the investigation store.

`drills.sqlite3` next to `investigations.sqlite3` in the user's data dir; `TWICE_DRILL_STORE`
names another file. Attempts are only ever appended (one row per answer), so two trainees, or
two tabs of one, answering at once lose nothing; progress is computed from the rows. One
connection per call, WAL so readers never wait for a writer, `busy_timeout` so writers queue.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from twice.store import StoreError, default_store_path
from twice.store.sqlite import refuse_foreign_file, store_error

ENV_VAR = "TWICE_DRILL_STORE"
MAX_SCORE = 2  # one point for the layer, one for the fix
_LEVEL = re.compile(r"L(\d+)-")

# one tuple of statements per schema version, applied in order at open
MIGRATIONS: tuple[tuple[str, ...], ...] = ((
    """CREATE TABLE attempts (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        trainee TEXT NOT NULL,
        drill_id TEXT NOT NULL,
        level INTEGER NOT NULL,
        layer_answer TEXT NOT NULL,
        fix_answer TEXT NOT NULL,
        score INTEGER NOT NULL CHECK (score BETWEEN 0 AND 2),
        at TEXT NOT NULL                    -- ISO 8601 UTC
    )""",
    "CREATE INDEX attempts_trainee ON attempts (trainee, seq)",
),)


@dataclass(frozen=True)
class Attempt:
    trainee: str
    drill_id: str
    level: int
    layer_answer: str
    fix_answer: str
    score: int
    at: datetime


class LevelProgress(NamedTuple):
    attempted: int  # distinct drills answered at this level
    best: int  # the sum of the best score on each of them ...
    possible: int  # ... out of this

    @property
    def text(self) -> str:
        return f"{self.attempted} drills, {self.best}/{self.possible}"


def default_path() -> Path:
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else default_store_path().with_name("drills.sqlite3")


class DrillStore:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        refuse_foreign_file(self.path, frozenset({"schema_version", "attempts"}),
                            "a twice drill scores file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as conn:
                self._wal(conn)
                self._migrate(conn)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{self.path}: {exc}") from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection for one call; SQLite's errors come out as StoreError (StoreReadOnly for
        a file that cannot be written)."""
        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from None
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 30000")
            yield conn
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from None
        finally:
            conn.close()

    @staticmethod
    def _wal(conn: sqlite3.Connection) -> None:
        # Switching a new file to WAL can answer "database is locked" at once, without the busy
        # handler, while another process opens the same new file: wait and try again.
        for attempt in range(100):
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 99:
                    raise
                time.sleep(0.1)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")  # two processes opening at once migrate once
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            current = int(row[0] or 0)
            for version, statements in enumerate(MIGRATIONS, start=1):
                if version > current:
                    for statement in statements:
                        conn.execute(statement)
                    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def record(self, trainee: str, drill_id: str, layer_answer: str, fix_answer: str,
               score: int, at: datetime | None = None) -> None:
        m = _LEVEL.match(drill_id)
        if m is None:
            raise ValueError(f"not a drill id: {drill_id!r}")
        if not 0 <= score <= MAX_SCORE:
            raise ValueError(f"score {score} is not in 0..{MAX_SCORE}")
        when = (at or datetime.now(UTC)).astimezone(UTC)
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO attempts (trainee, drill_id, level, layer_answer, fix_answer, "
                "score, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (trainee.strip() or "anonymous", drill_id, int(m[1]), layer_answer, fix_answer,
                 int(score), when.isoformat()))

    def history(self, trainee: str) -> list[Attempt]:
        """The trainee's answers, newest first."""
        with self._connect() as conn:
            rows = conn.execute("SELECT * FROM attempts WHERE trainee = ? ORDER BY seq DESC",
                                (trainee,)).fetchall()
        return [Attempt(r["trainee"], r["drill_id"], int(r["level"]), r["layer_answer"],
                        r["fix_answer"], int(r["score"]), datetime.fromisoformat(r["at"]))
                for r in rows]

    def progress(self, trainee: str) -> dict[int, LevelProgress]:
        """Per level: drills attempted, and the best score on each summed over the possible."""
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT level, count(*) AS drills, sum(best) AS best FROM ("
                "  SELECT level, drill_id, max(score) AS best FROM attempts WHERE trainee = ?"
                "  GROUP BY level, drill_id) GROUP BY level ORDER BY level",
                (trainee,)).fetchall()
        return {int(r["level"]): LevelProgress(int(r["drills"]), int(r["best"]),
                                               MAX_SCORE * int(r["drills"])) for r in rows}
