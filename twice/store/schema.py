"""The store's tables, written once for both databases (`{time}`, `{json}`, ... are the
dialect's column types, `twice.store.dialect`).

Schema version N is VERSIONS[:N] applied, in order, at open. Version 7 will be one more tuple
appended here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from twice.store.dialect import Dialect

Migration = Callable[[Any], None]  # run on the connection, inside the migrating transaction

SCHEMA_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    applied_at {time} NOT NULL
)"""

INVESTIGATIONS = (
    """CREATE TABLE investigations (
        seq {serial},
        id TEXT NOT NULL UNIQUE,
        title TEXT NOT NULL,
        created_at {time} NOT NULL,        -- SQLite: ISO 8601 UTC, microseconds: sorts as text
        provider TEXT NOT NULL,
        group_count INTEGER NOT NULL,
        worst_layer TEXT,
        layers TEXT NOT NULL,              -- " step_retry sdk_retry ": the layer filter
        money_at_risk {json} NOT NULL,     -- {{"usd": 900}}
        sources {json} NOT NULL,           -- list
        tags {json} NOT NULL,              -- list
        warnings {json} NOT NULL,          -- list of {{"source", "detail"}}
        search_text TEXT NOT NULL          -- lower-case title, tags, ids in the timeline
    )""",
    "CREATE INDEX investigations_created ON investigations (created_at DESC, seq DESC)",
    # the Parquet blob apart, so listing never reads it
    """CREATE TABLE timelines (
        investigation_id TEXT PRIMARY KEY
            REFERENCES investigations (id) ON DELETE CASCADE,
        parquet {bytes} NOT NULL
    )""",
    """CREATE TABLE notes (
        seq {serial},
        investigation_id TEXT NOT NULL REFERENCES investigations (id) ON DELETE CASCADE,
        author TEXT NOT NULL,
        text TEXT NOT NULL,
        at {time} NOT NULL,
        group_id TEXT,
        duplicate TEXT
    )""",
    "CREATE INDEX notes_investigation ON notes (investigation_id, seq)",
    """CREATE TABLE overrides (
        seq {serial},
        investigation_id TEXT NOT NULL REFERENCES investigations (id) ON DELETE CASCADE,
        group_id TEXT NOT NULL,
        duplicate TEXT NOT NULL,
        layer TEXT NOT NULL,
        reason TEXT NOT NULL,
        author TEXT NOT NULL,
        at {time} NOT NULL,
        confirmed {bool} NOT NULL
    )""",
    "CREATE INDEX overrides_investigation ON overrides (investigation_id, seq)",
)

# Sweeps (twice.sweep): a sweep, its finished chunks, and the duplicate groups it found (each
# also saved as an investigation, under `investigation_id`).
SWEEPS = (
    """CREATE TABLE sweeps (
        id TEXT PRIMARY KEY,
        created_at {time} NOT NULL,
        finished_at {time},
        params {json} NOT NULL,            -- sources (redacted), window, chunk, options
        chunks_total INTEGER NOT NULL,
        warnings {json} NOT NULL           -- list of {{"source", "detail"}}
    )""",
    """CREATE TABLE sweep_chunks (
        sweep_id TEXT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
        chunk INTEGER NOT NULL,
        start_at {time} NOT NULL,
        end_at {time} NOT NULL,
        group_count INTEGER NOT NULL,
        done_at {time} NOT NULL,
        PRIMARY KEY (sweep_id, chunk)
    )""",
    """CREATE TABLE sweep_groups (
        sweep_id TEXT NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
        group_id TEXT NOT NULL,
        chunk INTEGER NOT NULL,
        investigation_id TEXT NOT NULL,
        first_at {time} NOT NULL,
        last_at {time} NOT NULL,
        layer TEXT,
        confidence {float},
        protected {bool} NOT NULL,
        money_at_risk {json} NOT NULL,     -- {{"usd": 900}}
        customer TEXT,
        tool_name TEXT,
        thread_id TEXT,
        attempts INTEGER NOT NULL,
        PRIMARY KEY (sweep_id, group_id)
    )""",
    "CREATE INDEX sweep_groups_first ON sweep_groups (sweep_id, first_at)",
)

# Version 3: the engine options an investigation was analysed with (bands, grouping window,
# clock tolerance, key retention), so its links reopen the same verdict; a row saved before has
# NULL, read as the defaults (twice.engine.Options.from_dict). And one row per duplicate, with
# the ids, customer and amount of its two attempts, so a search lands on the duplicate asked
# about (an investigation saved before has none: its hits open the investigation).
VERSION_3 = (
    "ALTER TABLE investigations ADD COLUMN options {json}",
    """CREATE TABLE duplicates (
        investigation_id TEXT NOT NULL REFERENCES investigations (id) ON DELETE CASCADE,
        dup_key TEXT NOT NULL,             -- "<group_id>:<second attempt id>" (links' dup=)
        group_id TEXT NOT NULL,
        layer TEXT NOT NULL,
        gap_seconds {float} NOT NULL,
        at {time},                         -- the second attempt's
        customer TEXT,
        amount {bigint},                   -- minor units
        currency TEXT,
        search_text TEXT NOT NULL,         -- lower-case tokens, one a line
        PRIMARY KEY (investigation_id, dup_key)
    )""",
)

# Version 4: the incident workflow. The incident's own time range (its duplicates' attempts,
# not the save time), a status (open/resolved) and an owner the user sets, and per duplicate
# whether the provider's events show its payment refunded. A row saved before has no time
# range and an unknown refund (NULL), and is open with no owner.
VERSION_4 = (
    "ALTER TABLE investigations ADD COLUMN first_at {time}",
    "ALTER TABLE investigations ADD COLUMN last_at {time}",
    "ALTER TABLE investigations ADD COLUMN status TEXT NOT NULL DEFAULT 'open'",
    "ALTER TABLE investigations ADD COLUMN owner TEXT",
    "ALTER TABLE duplicates ADD COLUMN refunded {bool}",
    "CREATE INDEX investigations_first ON investigations (first_at DESC, seq DESC)",
)

# Version 5: per duplicate, the tool its call ran (the engine's `Group.tool_name`), so a search
# names it in words (issue 20: customer · amount · tool · layer · gap). A row saved before has
# NULL, and is named without a tool.
VERSION_5 = (
    "ALTER TABLE duplicates ADD COLUMN tool_name TEXT",
)

# Version 6: each investigation's analysis, kept as data (`twice.store.analyses`) under the
# fingerprint of the code that made it, so a page that has not opened it yet does not run the
# engine again. An investigation saved before has none: its first page analyses it and keeps
# the analysis here.
VERSION_6 = (
    """CREATE TABLE analyses (
        investigation_id TEXT PRIMARY KEY
            REFERENCES investigations (id) ON DELETE CASCADE,
        engine TEXT NOT NULL,              -- the code's fingerprint (engine_fingerprint)
        body TEXT NOT NULL,                -- JSON: options, groups, clock offsets
        attempts {bytes} NOT NULL,         -- Parquet
        repeated {bytes} NOT NULL,         -- Parquet: the groups' attempts
        aligned {bytes} NOT NULL           -- Parquet: the timeline's at_aligned - at
    )""",
)

VERSIONS: tuple[tuple[str, ...], ...] = (INVESTIGATIONS, SWEEPS, VERSION_3, VERSION_4,
                                         VERSION_5, VERSION_6)
# What marks a database as twice's store: the first migration creates both in one transaction,
# so a store has both, or is new. A database with other tables and not these is not opened.
OWN_TABLES = frozenset({"schema_version", "investigations"})


def migrations(dialect: Dialect, versions: Sequence[Sequence[str]] = VERSIONS
               ) -> list[Migration]:
    """One function per schema version, creating its tables in `dialect`."""
    def migration(statements: Sequence[str]) -> Migration:
        def apply(conn: Any) -> None:
            for statement in statements:
                conn.execute(dialect.ddl(statement))
        return apply

    return [migration(statements) for statements in versions]
