"""Which store: `$TWICE_STORE`, a URL or path given, or the SQLite file in the user's data dir.
Opening one applies its migrations."""

from __future__ import annotations

import os
import re
from pathlib import Path

from twice.connectors.base import redact
from twice.store.errors import StoreError
from twice.store.sql import Store

ENV_VAR = "TWICE_STORE"


def default_store_path() -> Path:
    """$XDG_DATA_HOME/twice/investigations.sqlite3, ~/.local/share/... when unset (or relative,
    which the XDG spec says to ignore)."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "twice" / "investigations.sqlite3"


def open_store(url: str | None = None) -> Store:
    """None -> $TWICE_STORE, else SQLite at `default_store_path()`; "sqlite:///path" (as
    SQLAlchemy spells it: four slashes for an absolute path) or a plain path -> SQLite;
    "postgresql://..." -> PostgreSQL. Migrations are applied here."""
    from twice.store.sqlite import SqliteStore

    if url is None:
        url = os.environ.get(ENV_VAR) or None
    if url is None:
        return SqliteStore(default_store_path())
    if url.startswith(("postgresql://", "postgres://")):
        from twice.store.postgres import PostgresStore
        return PostgresStore(url)
    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ""
        if not path:
            raise StoreError(f"{redact(url)}: expected sqlite:///relative/path or "
                             "sqlite:////absolute/path (an in-memory store would not keep "
                             "anything)")
        return SqliteStore(Path(path).expanduser())
    if re.match(r"[a-z][a-z0-9+.-]*://", url, re.I):
        raise StoreError(f"{redact(url)}: unsupported store; use a file path, sqlite:///path "
                         "or postgresql://...")
    return SqliteStore(Path(url).expanduser())
