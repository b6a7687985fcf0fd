"""Saved investigations (and sweeps): SQLite by default, PostgreSQL for a team."""

from __future__ import annotations

from twice.store.model import (
    InvestigationExists,
    InvestigationNotFound,
    Note,
    Override,
    Prepared,
    Snapshot,
    Store,
    StoreError,
    Summary,
    WarningLike,
    default_store_path,
    dumps,
    effective_overrides,
    loads,
    new_id,
    open_store,
    prepare,
    valid_id,
)

__all__ = [
    "InvestigationExists", "InvestigationNotFound", "Note", "Override", "Prepared", "Snapshot",
    "Store", "StoreError", "Summary", "WarningLike", "default_store_path", "dumps",
    "effective_overrides", "loads", "new_id", "open_store", "prepare", "valid_id",
]
