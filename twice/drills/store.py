"""Drill answers per trainee, and cohorts, in their own SQLite file beside the investigations.

`drills.sqlite3` next to `investigations.sqlite3` in the user's data dir; `TWICE_DRILL_STORE`
names another file. Answers are only ever appended (one row per try, failed tries included),
so two trainees, or two tabs of one, answering at once lose nothing; progress, confusion,
reviews and a cohort's results are computed from the rows. One connection per call, WAL so
readers never wait for a writer, `busy_timeout` so writers queue.

A trainee is named by a normalised name (`trainee_name`: Alice and ` alice ` are one trainee);
the web app uses the signed-in user's e-mail where there is one. A cohort is a team lead's
list of trainees and the drill set assigned to them.
"""

from __future__ import annotations

import csv
import io
import os
import random
import re
import sqlite3
import time
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from twice.drills.curriculum import CASE_LAYERS, CURRICULUM, Drill, drill_of_case, parse_id
from twice.drills.grading import MAX_RESPONSE, MAX_SCORE, Grade
from twice.store import StoreError, default_store_path
from twice.store.sqlite import refuse_foreign_file, store_error

ENV_VAR = "TWICE_DRILL_STORE"
NAME_CHARS = 64
_LEVEL = re.compile(r"L(\d+)-")

# one tuple of statements per schema version, applied in order at open
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
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
    ),
    (
        # every try with what it was graded on; version 1's rows come along (their layer and
        # sources unknown), their names normalised as trainee_name does for plain ASCII
        """CREATE TABLE answers (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            trainee TEXT NOT NULL,
            drill_id TEXT NOT NULL,
            level INTEGER NOT NULL,
            true_layer TEXT NOT NULL,           -- '' for answers kept from version 1
            layer_answer TEXT NOT NULL,
            fix_answer TEXT NOT NULL,
            opened TEXT NOT NULL,               -- the sources asked for, in order, comma-separated
            confidence INTEGER,                 -- 1 guessing .. 4 certain, before the answer
            decide_s REAL,                      -- seconds from the page to the answer
            layer_ok INTEGER NOT NULL,
            fix_ok INTEGER NOT NULL,
            evidence_ok INTEGER NOT NULL,
            response_ok INTEGER,                -- right response answers, 0..3
            score INTEGER NOT NULL CHECK (score BETWEEN 0 AND 3),
            cohort TEXT,
            at TEXT NOT NULL                    -- ISO 8601 UTC
        )""",
        "INSERT INTO answers (trainee, drill_id, level, true_layer, layer_answer, fix_answer, "
        "opened, layer_ok, fix_ok, evidence_ok, score, at) SELECT lower(trim(trainee)), "
        "drill_id, level, '', layer_answer, fix_answer, '', 0, 0, 0, score, at FROM attempts "
        "ORDER BY seq",
        "CREATE INDEX answers_trainee ON answers (trainee, seq)",
        """CREATE TABLE cohorts (
            name TEXT PRIMARY KEY,
            created_at TEXT NOT NULL
        )""",
        """CREATE TABLE cohort_members (
            cohort TEXT NOT NULL REFERENCES cohorts (name),
            trainee TEXT NOT NULL,
            PRIMARY KEY (cohort, trainee)
        )""",
        """CREATE TABLE assignments (
            cohort TEXT NOT NULL REFERENCES cohorts (name),
            position INTEGER NOT NULL,
            drill_id TEXT NOT NULL,
            PRIMARY KEY (cohort, position)
        )""",
    ),
)


def trainee_name(text: str) -> str:
    """A trainee's name as kept: Unicode-normalised, spaces collapsed, case folded. ValueError
    for an empty name, one with control characters, or one longer than NAME_CHARS."""
    name = " ".join(unicodedata.normalize("NFKC", text).split()).casefold()
    if not name:
        raise ValueError("a trainee needs a name")
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in name):
        raise ValueError("a trainee's name cannot hold control or format characters")
    if len(name) > NAME_CHARS:
        raise ValueError(f"a trainee's name has at most {NAME_CHARS} characters")
    return name


@dataclass(frozen=True)
class Attempt:
    """One try of a drill."""

    trainee: str
    drill_id: str
    level: int
    true_layer: str  # '' when not known (an answer kept from version 1)
    layer_answer: str
    fix_answer: str
    opened: tuple[str, ...]
    confidence: int | None
    decide_s: float | None
    layer_ok: bool
    fix_ok: bool
    evidence_ok: bool
    response_ok: int | None
    score: int
    cohort: str | None
    at: datetime


@dataclass(frozen=True)
class LevelProgress:
    drills: int  # distinct drills tried at this level
    tries: int  # answers given, failed ones included
    first_points: int  # the first try's score on each drill, summed ...
    first_possible: int  # ... out of this
    right_layer: int  # tries that named the right layer

    @property
    def text(self) -> str:
        return (f"{self.drills} drills, {self.tries} tries; first tries "
                f"{self.first_points}/{self.first_possible}; right layer "
                f"{self.right_layer}/{self.tries}")


def default_path() -> Path:
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else default_store_path().with_name("drills.sqlite3")


def _attempt(r: sqlite3.Row) -> Attempt:
    return Attempt(r["trainee"], r["drill_id"], int(r["level"]), r["true_layer"],
                   r["layer_answer"], r["fix_answer"], tuple(filter(None, r["opened"].split(","))),
                   r["confidence"], r["decide_s"], bool(r["layer_ok"]), bool(r["fix_ok"]),
                   bool(r["evidence_ok"]), r["response_ok"], int(r["score"]), r["cohort"],
                   datetime.fromisoformat(r["at"]))


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

    # -- answers --------------------------------------------------------------------------
    def record(self, trainee: str, drill: Drill, grade: Grade, *, cohort: str | None = None,
               at: datetime | None = None) -> None:
        """Keep one graded try of `drill` by `trainee`."""
        a = grade.answer
        when = (at or datetime.now(UTC)).astimezone(UTC)
        response = grade.response_score if grade.response else None
        if not 0 <= grade.score <= MAX_SCORE or not 0 <= (response or 0) <= MAX_RESPONSE:
            raise ValueError(f"score {grade.score} is not in 0..{MAX_SCORE}")
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO answers (trainee, drill_id, level, true_layer, layer_answer, "
                "fix_answer, opened, confidence, decide_s, layer_ok, fix_ok, evidence_ok, "
                "response_ok, score, cohort, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "?, ?, ?, ?)",
                (trainee_name(trainee), drill.id, drill.level, grade.key.true_layer, a.layer,
                 a.fix, ",".join(a.opened), a.confidence, a.decide_s, int(grade.layer_ok),
                 int(grade.fix_ok), int(grade.evidence_ok), response, grade.score, cohort,
                 when.isoformat()))

    def history(self, trainee: str) -> list[Attempt]:
        """The trainee's tries, newest first (failed ones too)."""
        with self._connect() as conn:
            rows = conn.execute("SELECT * FROM answers WHERE trainee = ? ORDER BY seq DESC",
                                (trainee_name(trainee),)).fetchall()
        return [_attempt(r) for r in rows]

    def progress(self, trainee: str) -> dict[int, LevelProgress]:
        """Per level: drills and tries, the first try's score on each drill, right layers."""
        tries = list(reversed(self.history(trainee)))
        out: dict[int, LevelProgress] = {}
        for level in sorted({t.level for t in tries}):
            mine = [t for t in tries if t.level == level]
            first: dict[str, Attempt] = {}
            for t in mine:
                first.setdefault(t.drill_id, t)
            out[level] = LevelProgress(len(first), len(mine),
                                       sum(t.score for t in first.values()),
                                       MAX_SCORE * len(first), sum(t.layer_ok for t in mine))
        return out

    def confusion(self, trainee: str) -> dict[str, Counter[str]]:
        """Per true layer: how often each layer was answered (the diagonal is right)."""
        out: dict[str, Counter[str]] = {}
        for t in self.history(trainee):
            if t.true_layer:
                out.setdefault(t.true_layer, Counter())[t.layer_answer] += 1
        return out

    def due(self, trainee: str) -> list[str]:
        """The layers to practise again, most due first: spaced repetition by streaks.

        A layer's streak is how many of its newest tries in a row were right; a miss resets it.
        A layer is due once as many other tries came after its last one as 2**streak - 1, so a
        miss comes back on the next drill, a layer right once after one more, then three, ..."""
        tries = list(reversed(self.history(trainee)))
        last: dict[str, int] = {}
        streak: dict[str, int] = {}
        for i, t in enumerate(tries):
            if not t.true_layer:
                continue
            last[t.true_layer] = i
            streak[t.true_layer] = streak.get(t.true_layer, 0) + 1 if t.layer_ok else 0
        now = len(tries)
        due = [(streak[layer], last[layer], layer) for layer in last
               if now - 1 - last[layer] >= 2 ** streak[layer] - 1 and streak[layer] < 3]
        return [layer for _, _, layer in sorted(due)]

    def review_drill(self, trainee: str, rng: random.Random | None = None) -> Drill | None:
        """A new drill of the most due layer, at the highest level the trainee missed it on
        (None when nothing is due). The drill's case is drawn among the level's cases of that
        layer; its id, as every drill's, says nothing of it."""
        due = self.due(trainee)
        if not due:
            return None
        layer = due[0]
        missed = [t.level for t in self.history(trainee) if t.true_layer == layer]
        rng = rng or random.SystemRandom()
        for level in sorted(set(missed), reverse=True) + sorted(CURRICULUM):
            cases = [c.name for c in CURRICULUM[level].cases if CASE_LAYERS[c.scenario] == layer]
            if cases:
                return drill_of_case(level, rng.choice(cases), rng)
        return None

    # -- cohorts --------------------------------------------------------------------------
    def create_cohort(self, name: str, members: Iterable[str], drill_ids: Iterable[str],
                      at: datetime | None = None) -> None:
        """A cohort of trainees with a drill set assigned (replacing one of the same name)."""
        name = " ".join(name.split())
        if not name or len(name) > NAME_CHARS:
            raise ValueError(f"a cohort needs a name of 1 to {NAME_CHARS} characters")
        people = list(dict.fromkeys(trainee_name(m) for m in members))
        drills = list(dict.fromkeys(parse_id(d).id for d in drill_ids))
        if not people or not drills:
            raise ValueError("a cohort needs at least one trainee and one drill")
        when = (at or datetime.now(UTC)).astimezone(UTC).isoformat()
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM cohort_members WHERE cohort = ?", (name,))
                conn.execute("DELETE FROM assignments WHERE cohort = ?", (name,))
                conn.execute("INSERT OR REPLACE INTO cohorts (name, created_at) VALUES (?, ?)",
                             (name, when))
                conn.executemany("INSERT INTO cohort_members (cohort, trainee) VALUES (?, ?)",
                                 [(name, p) for p in people])
                conn.executemany("INSERT INTO assignments (cohort, position, drill_id) VALUES "
                                 "(?, ?, ?)", [(name, i, d) for i, d in enumerate(drills)])
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def cohorts(self) -> list[str]:
        with self._connect() as conn:
            return [r[0] for r in conn.execute("SELECT name FROM cohorts ORDER BY name")]

    def cohort(self, name: str) -> tuple[list[str], list[str]]:
        """(members, drill ids) of a cohort; KeyError when there is none of that name."""
        with self._connect() as conn:
            if conn.execute("SELECT 1 FROM cohorts WHERE name = ?", (name,)).fetchone() is None:
                raise KeyError(name)
            members = [r[0] for r in conn.execute(
                "SELECT trainee FROM cohort_members WHERE cohort = ? ORDER BY trainee", (name,))]
            drills = [r[0] for r in conn.execute(
                "SELECT drill_id FROM assignments WHERE cohort = ? ORDER BY position", (name,))]
        return members, drills

    def assigned(self, trainee: str) -> list[tuple[str, list[str]]]:
        """The cohorts the trainee is in, each with its drill set."""
        with self._connect() as conn:
            names = [r[0] for r in conn.execute(
                "SELECT cohort FROM cohort_members WHERE trainee = ? ORDER BY cohort",
                (trainee_name(trainee),))]
        return [(n, self.cohort(n)[1]) for n in names]

    def cohort_results(self, name: str) -> list[dict[str, Any]]:
        """One row per member and assigned drill: tries, the first and the last try's score
        and answer, the true layer (empty while nobody answered it)."""
        members, drills = self.cohort(name)
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT * FROM answers WHERE trainee IN (SELECT trainee FROM cohort_members "
                "WHERE cohort = ?) AND drill_id IN (SELECT drill_id FROM assignments WHERE "
                "cohort = ?) ORDER BY seq", (name, name)).fetchall()
        tries: dict[tuple[str, str], list[Attempt]] = {}
        for r in rows:
            a = _attempt(r)
            tries.setdefault((a.trainee, a.drill_id), []).append(a)
        layer_of = {a.drill_id: a.true_layer for ts in tries.values() for a in ts}
        out = []
        for m in members:
            for d in drills:
                ts = tries.get((m, d), [])
                out.append({
                    "trainee": m, "drill": d, "level": parse_id(d).level,
                    "layer": layer_of.get(d, ""), "tries": len(ts),
                    "first_score": ts[0].score if ts else None,
                    "first_answer": ts[0].layer_answer if ts else "",
                    "last_score": ts[-1].score if ts else None,
                    "last_answer": ts[-1].layer_answer if ts else "",
                    "right_layer_first": ts[0].layer_ok if ts else None,
                    "confidence_first": ts[0].confidence if ts else None,
                    "decide_s_first": ts[0].decide_s if ts else None,
                })
        return out

    def cohort_by_layer(self, name: str) -> list[dict[str, Any]]:
        """Per true layer: the cohort's first tries, how many named it right, and what the
        wrong ones answered instead."""
        rows = [r for r in self.cohort_results(name) if r["tries"]]
        out = []
        for layer in sorted({r["layer"] for r in rows if r["layer"]}):
            mine = [r for r in rows if r["layer"] == layer]
            wrong = Counter(r["first_answer"] for r in mine if not r["right_layer_first"])
            out.append({"layer": layer, "first_tries": len(mine),
                        "right_first": sum(bool(r["right_layer_first"]) for r in mine),
                        "answered_instead": ", ".join(f"{k} ({v})" for k, v in
                                                      wrong.most_common())})
        return out


RESULT_COLUMNS = ("trainee", "drill", "level", "layer", "tries", "first_score", "first_answer",
                  "last_score", "last_answer", "right_layer_first", "confidence_first",
                  "decide_s_first")


def _csv_cell(value: Any) -> Any:
    # a name a spreadsheet would read as a formula is written as text
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


def results_csv(rows: list[dict[str, Any]]) -> str:
    """A cohort's results as CSV (one row per member and drill)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=RESULT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_cell(row[k]) for k in RESULT_COLUMNS})
    return buf.getvalue()
