"""Saved investigations: snapshots of a timeline, with notes and verdict overrides.

A saved investigation is a SNAPSHOT: the normalised timeline (stored as Parquet bytes), the
warnings seen while loading it, and append-only notes and overrides, under an id that never
changes even when the sources it came from expire. Its analysis is kept beside it
(`twice.store.analyses`) for the code that made it; other code analyses the timeline again
when it is opened. The `Summary` (one row of the Incidents list) is computed once, at save
time.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from twice.engine import Options
from twice.timeline import SourceWarning

ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
STATUSES = ("open", "resolved")  # an incident's status, as the user sets it
OWNER_MAX = 200  # characters of an owner's name
# what loading reported: connectors give SourceWarning, the brief's interface says dicts
WarningLike = Mapping[str, Any] | SourceWarning


@dataclass(frozen=True)
class Note:
    author: str
    text: str
    at: datetime  # UTC
    group_id: str | None = None
    duplicate: str | None = None  # "first>second" attempt ids


@dataclass(frozen=True)
class Override:
    """The investigator confirms (confirmed=True: agrees with twice) or overrides a verdict."""

    group_id: str
    duplicate: str
    layer: str
    reason: str
    author: str
    at: datetime  # UTC
    confirmed: bool


@dataclass(frozen=True)
class Summary:
    """One row of the Incidents list."""

    id: str
    title: str
    created_at: datetime  # UTC
    provider: str
    groups: int
    worst_layer: str | None
    money_at_risk: dict[str, int]
    sources: list[str]
    tags: list[str]
    # the incident's own time: its duplicates' attempts (the whole timeline when it has none);
    # None for one saved before twice kept it
    first_at: datetime | None = None
    last_at: datetime | None = None
    status: str = "open"  # STATUSES
    owner: str | None = None
    duplicates: int = 0
    refunded: int | None = None  # how many duplicates were refunded; None: not known


@dataclass(frozen=True)
class DuplicateRow:
    """One duplicate of a saved investigation, as a search finds it: which one (its key is the
    link's `dup=`), its verdict's layer and gap, whose money it took and by which tool."""

    dup_key: str
    group_id: str
    layer: str
    gap_seconds: float
    at: datetime | None  # the second attempt's time, UTC
    customer: str | None
    amount: int | None  # minor units
    currency: str | None
    # the provider's events show one of its two attempts' payments refunded (`charge.refunded`);
    # None: saved before twice looked
    refunded: bool | None = None
    # the tool its call ran, as the evidence names it; None: the evidence names none
    # (provider-only), or saved before twice kept it
    tool: str | None = None


@dataclass(frozen=True)
class DuplicateHit:
    """A duplicate a search found, with the investigation that holds it."""

    investigation: Summary
    duplicate: DuplicateRow


@dataclass
class Snapshot:
    summary: Summary
    timeline: pd.DataFrame
    notes: list[Note]  # oldest first
    overrides: list[Override]  # oldest first; see effective_overrides
    warnings: list[dict[str, Any]]
    # what it was analysed with when saved (the defaults for one saved before they were kept)
    options: Options = field(default_factory=Options)

    def source_warnings(self) -> list[SourceWarning]:
        """The warnings loading reported, as the engine takes them."""
        return source_warnings(self.warnings)


def source_warnings(warnings: Iterable[Mapping[str, Any]]) -> list[SourceWarning]:
    """Saved warnings (dicts: a store row, an upload's loading report) as `SourceWarning`s."""
    return [SourceWarning(source=str(w.get("source", "")), detail=str(w.get("detail", "")))
            for w in warnings]


def valid_id(inv_id: object) -> bool:
    """Ids are checked before any query: a link with a mangled id is simply "not found"."""
    return isinstance(inv_id, str) and ID_PATTERN.fullmatch(inv_id) is not None


def new_id() -> str:
    return secrets.token_urlsafe(16)  # 128 random bits, 22 URL-safe characters


def effective_overrides(overrides: Sequence[Override]) -> dict[tuple[str, str], Override]:
    """The override in effect per (group_id, duplicate): the latest one added."""
    return {(o.group_id, o.duplicate): o for o in overrides}
