"""Where SQLite and PostgreSQL differ, in one place: column types, placeholders, how a Python
value is written, which error means a taken id or a missing parent, and savepoints.

Everything else (the queries, the schema, the migrations) is written once (`twice.store.sql`,
`twice.store.schema`) against these.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import orjson

from twice.formats import iso


@dataclass(frozen=True)
class Dialect:
    name: str
    types: Mapping[str, str]  # DDL type per kind of column: serial, time, json, bytes, ...
    placeholder: str  # what stands for a parameter (queries are written with "?")
    write: Callable[[Any], Any]  # a Python value as the driver takes it
    unique_violation: type[Exception]
    foreign_key_violation: type[Exception]
    savepoint: Callable[[Any], AbstractContextManager[None]]  # on a connection in a transaction

    def ddl(self, template: str) -> str:
        return template.format_map(self.types)

    def sql(self, query: str) -> str:
        return query if self.placeholder == "?" else query.replace("?", self.placeholder)


def _sqlite_value(value: Any) -> Any:
    # times as ISO text in UTC with microseconds (sorts as text), JSON as text, booleans as 0/1
    if isinstance(value, datetime):
        return iso(value, "microseconds", zulu=False)
    if isinstance(value, dict | list):
        return dumps(value)
    if isinstance(value, bool):
        return int(value)
    return value


@contextmanager
def _sqlite_savepoint(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("SAVEPOINT twice")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK TO twice")
        conn.execute("RELEASE twice")
        raise
    conn.execute("RELEASE twice")


SQLITE = Dialect(
    name="sqlite",
    types={"serial": "INTEGER PRIMARY KEY AUTOINCREMENT", "time": "TEXT", "json": "TEXT",
           "bytes": "BLOB", "bool": "INTEGER", "float": "REAL", "bigint": "INTEGER"},
    placeholder="?",
    write=_sqlite_value,
    unique_violation=sqlite3.IntegrityError,
    foreign_key_violation=sqlite3.IntegrityError,
    savepoint=_sqlite_savepoint,
)


@cache
def postgres() -> Dialect:
    """PostgreSQL's dialect (psycopg is imported only when a PostgreSQL store is opened)."""
    from psycopg import errors
    from psycopg.types.json import Jsonb

    def value(v: Any) -> Any:
        return Jsonb(v) if isinstance(v, dict | list) else v

    return Dialect(
        name="postgresql",
        types={"serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
               "time": "TIMESTAMPTZ", "json": "JSONB", "bytes": "BYTEA", "bool": "BOOLEAN",
               "float": "DOUBLE PRECISION", "bigint": "BIGINT"},
        placeholder="%s",
        write=value,
        unique_violation=errors.UniqueViolation,
        foreign_key_violation=errors.ForeignKeyViolation,
        savepoint=lambda conn: conn.transaction(),
    )


def dumps(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def loads(value: Any) -> Any:
    """JSON text (SQLite) or an already-decoded jsonb value (PostgreSQL)."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value
