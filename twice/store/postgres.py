"""The investigation store in PostgreSQL, for a team sharing links.

This module only connects and migrates (the queries are `twice.store.sql`'s, the column types
`twice.store.dialect`'s: BYTEA for the Parquet, jsonb for the small lists). A connection per
call (Streamlit serves sessions from threads), parameterised queries only, a
`statement_timeout` on every connection, and the DSN's password never in an error.

The store's tables go in the connection's current schema (the first of its search_path, usually
`public`). A schema that holds other tables but not twice's (another application's, the agent's
checkpoints) is refused before anything is created in it: give twice a database of its own, or
a schema (`CREATE SCHEMA twice`, then `?options=-csearch_path%3Dtwice` on the DSN). An empty
schema becomes a new store; one with twice's tables among others is twice's and is opened.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import set_json_dumps
from psycopg.types.string import StrDumperUnknown

from twice.connectors.base import redact
from twice.store.dialect import postgres
from twice.store.errors import StoreError, StoreReadOnly
from twice.store.schema import OWN_TABLES, Migration, migrations
from twice.store.sql import Store, Transaction, migrate

# Applied in order at open; schema version N = MIGRATIONS[:N] applied (twice.store.schema).
MIGRATIONS: list[Migration] = migrations(postgres())
# serialises migrations of concurrent openers (any constant; "twice" in ASCII)
_MIGRATION_LOCK = 0x7477696365


class _NulSafeStr(StrDumperUnknown):
    def dump(self, obj: str) -> Any:
        return super().dump(obj.replace("\x00", "\ufffd"))


# "\u0000" in JSON text not preceded by another backslash (an even run of them is escaped ones)
_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def _json_dumps_nul_safe(value: Any) -> str:
    # json.dumps writes NUL (in a key or a value) as the escape jsonb refuses: U+FFFD instead
    return _NUL_ESCAPE.sub(r"\1\\ufffd", json.dumps(value))


class PostgresStore(Store):
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
        with self.transaction(write=True) as tx:
            # a second process opening the same new database waits, then finds the work done
            tx.execute("SELECT pg_advisory_xact_lock(?)", [_MIGRATION_LOCK])
            _refuse_foreign_schema(tx, self.name)
            migrate(tx, migrations, self.name)

    def __repr__(self) -> str:
        return f"PostgresStore({self.name!r})"

    @contextmanager
    def transaction(self, write: bool = False) -> Iterator[Transaction]:
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
                yield Transaction(conn, postgres())
        except errors.QueryCanceled:
            raise StoreError(f"{self.name}: query timed out (statement_timeout)") from None
        except (errors.ReadOnlySqlTransaction, errors.InsufficientPrivilege) as exc:
            raise StoreReadOnly(f"{self.name}: {_reason(exc)}") from None
        except psycopg.Error as exc:
            raise StoreError(f"{self.name}: {_reason(exc)}") from None


def _refuse_foreign_schema(tx: Transaction, name: str) -> None:
    rows = tx.execute("SELECT current_schema() AS schema, coalesce(array_agg(tablename::text "
                      "ORDER BY tablename), '{}') AS tables FROM pg_tables "
                      "WHERE schemaname = current_schema()")
    schema, tables = rows[0]["schema"], set(rows[0]["tables"])
    if schema is None or not tables or OWN_TABLES <= tables:
        return
    shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    raise StoreError(f"{name}: not a twice investigation store: schema {schema} holds other "
                     f"tables ({shown}); nothing was created in it. Give twice a database of its "
                     "own, or a schema (CREATE SCHEMA twice; then add "
                     "?options=-csearch_path%3Dtwice to the DSN)")


def _reason(exc: psycopg.Error) -> str:
    # libpq messages name host and user, not the password; redact anyway in case a DSN is echoed
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return redact(text)
