"""Saved investigations (and sweeps): SQLite in the user's data dir by default, PostgreSQL for
a team.

- `model`: what is saved (notes, overrides, the summary, the snapshot); `errors`: what it raises;
- `prepare`: what saving computes before it writes; `analyses`: each investigation's analysis,
  kept as data; `location`: which store `open_store` opens;
- `sql`: the one SQL layer (every query, `Store.transaction()`), over `dialect` (where SQLite
  and PostgreSQL differ) and `schema` (the tables, written once);
- `sqlite`, `postgres`: connect and migrate; `sweeps`: a sweep's tables; `links`: the URL of
  every view of a saved investigation.
"""

from __future__ import annotations

from twice.store.errors import (
    InvestigationExists,
    InvestigationNotFound,
    StoreError,
    StoreFull,
    StoreReadOnly,
)
from twice.store.location import default_store_path, open_store
from twice.store.model import (
    DuplicateHit,
    DuplicateRow,
    Note,
    Override,
    Snapshot,
    Summary,
    WarningLike,
    effective_overrides,
    new_id,
    valid_id,
)
from twice.store.prepare import Prepared, prepare
from twice.store.sql import Store, Transaction

__all__ = [
    "DuplicateHit", "DuplicateRow", "InvestigationExists", "InvestigationNotFound", "Note",
    "Override", "Prepared", "Snapshot",
    "Store", "StoreError", "StoreFull", "StoreReadOnly", "Summary", "Transaction", "WarningLike",
    "default_store_path", "effective_overrides", "new_id", "open_store", "prepare", "valid_id",
]
