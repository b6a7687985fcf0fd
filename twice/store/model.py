"""Saved investigations: snapshots of a timeline, with notes and verdict overrides.

A saved investigation is a SNAPSHOT: the normalised timeline (stored as Parquet bytes), the
warnings seen while loading it, and append-only notes and overrides, under an id that never
changes even when the sources it came from expire. Verdicts are recomputed from the timeline
when it is opened; the `Summary` (one row of the Incidents list) is computed once, at save time.

SQLite in the user's data dir by default (`twice.store.sqlite`); PostgreSQL for a team
(`twice.store.postgres`). Both apply the same numbered migrations at open.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import orjson
import pandas as pd

from twice.connectors.base import redact
from twice.engine import LAYER_ORDER, Analysis, analyze
from twice.timeline import SourceWarning, validate

__all__ = [
    "Note", "Override", "Summary", "Snapshot", "Store", "StoreError", "InvestigationExists",
    "InvestigationNotFound", "open_store", "default_store_path", "valid_id", "new_id",
    "effective_overrides",
]

ENV_VAR = "TWICE_STORE"
ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Timeline columns whose values a user may paste into the search box to find an investigation.
# what loading reported: connectors give SourceWarning, the brief's interface says dicts
WarningLike = Mapping[str, Any] | SourceWarning
SEARCH_COLUMNS = ("subject", "thread_id", "request_id", "tool_call_id", "object_id", "event_id",
                  "idempotency_key", "trace_id", "message_id")


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


@dataclass
class Snapshot:
    summary: Summary
    timeline: pd.DataFrame
    notes: list[Note]  # oldest first
    overrides: list[Override]  # oldest first; see effective_overrides
    warnings: list[dict[str, Any]]


class StoreError(Exception):
    """The store cannot do what was asked (unreachable, locked, timed out). Message is safe to
    show: it names the store with any password removed."""


class InvestigationNotFound(StoreError, LookupError):
    """A note or override was added to an investigation that does not exist (or a bad id)."""


class InvestigationExists(StoreError):
    """`create` was given an id that is already taken."""


class Store(Protocol):
    def create(self, title: str, timeline: pd.DataFrame, *, provider: str = "stripe",
               sources: Sequence[str] = (), warnings: Sequence[WarningLike] = (),
               tags: Sequence[str] = (), id: str | None = None,
               analysis: Analysis | None = None) -> str:
        """Save a snapshot; returns its id. `analysis`: `analyze(timeline)` if the caller has it
        already (saves recomputing it)."""
        ...

    def get(self, inv_id: str, *, timeline: bool = True) -> Snapshot | None:
        """The investigation, or None. `timeline=False`: all but the timeline (an empty frame in
        its place), for a caller that holds the timeline already (the web app caches it)."""
        ...

    def list(self, search: str = "", layer: str | None = None) -> list[Summary]: ...

    def add_note(self, inv_id: str, note: Note) -> None: ...

    def add_override(self, inv_id: str, override: Override) -> None: ...

    def delete(self, inv_id: str) -> None: ...


def valid_id(inv_id: object) -> bool:
    """Ids are checked before any query: a link with a mangled id is simply "not found"."""
    return isinstance(inv_id, str) and ID_PATTERN.fullmatch(inv_id) is not None


def new_id() -> str:
    return secrets.token_urlsafe(16)  # 128 random bits, 22 URL-safe characters


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
    if url is None:
        url = os.environ.get(ENV_VAR) or None
    if url is None:
        from twice.store.sqlite import SqliteStore
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
        from twice.store.sqlite import SqliteStore
        return SqliteStore(Path(path).expanduser())
    if re.match(r"[a-z][a-z0-9+.-]*://", url, re.I):
        raise StoreError(f"{redact(url)}: unsupported store; use a file path, sqlite:///path "
                         "or postgresql://...")
    from twice.store.sqlite import SqliteStore
    return SqliteStore(Path(url).expanduser())


def effective_overrides(overrides: Sequence[Override]) -> dict[tuple[str, str], Override]:
    """The override in effect per (group_id, duplicate): the latest one added."""
    return {(o.group_id, o.duplicate): o for o in overrides}


# --- helpers the backends share -----------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """Everything `create` writes, computed before the transaction opens."""

    summary: Summary
    layers: str  # every layer found, space-delimited (" a b "), for the layer filter
    search_text: str
    parquet: bytes
    warnings: list[dict[str, Any]]  # JSON-safe


def prepare(title: str, timeline: pd.DataFrame, *, provider: str, sources: Sequence[str],
            warnings: Sequence[WarningLike], tags: Sequence[str],
            inv_id: str | None, analysis: Analysis | None = None) -> Prepared:
    if inv_id is None:
        inv_id = new_id()
    elif not valid_id(inv_id):
        raise ValueError(f"invalid investigation id {inv_id!r}: use 1-64 of A-Z a-z 0-9 _ -")
    validate(timeline)
    if analysis is None:
        analysis = analyze(timeline)
    money: dict[str, int] = {}
    worst = []
    layers: set[str] = set()
    for group in analysis.groups:
        for currency, amount in group.money_at_risk().items():
            money[currency] = money.get(currency, 0) + amount
        if group.worst_layer is not None:
            worst.append(group.worst_layer)
        layers.update(str(d.layer.value) for d in group.duplicates)
    worst_layer = min(worst, key=LAYER_ORDER.index).value if worst else None
    found_sources = sorted(set(timeline["source"].dropna().astype(str)) | set(sources))
    clean_tags = list(dict.fromkeys(t.strip() for t in tags if t.strip()))
    summary = Summary(id=inv_id, title=title, created_at=datetime.now(UTC), provider=provider,
                      groups=len(analysis.groups), worst_layer=worst_layer,
                      money_at_risk=dict(sorted(money.items())), sources=found_sources,
                      tags=clean_tags)
    ids: set[str] = set()
    for column in SEARCH_COLUMNS:
        ids.update(timeline[column].dropna().astype(str))
    # without NUL: SQLite's LIKE stops at the first one, hiding every id after it
    search_text = "\n".join([title, *clean_tags, *sorted(ids)]).lower().replace("\x00", "")
    return Prepared(summary=summary, layers=f" {' '.join(sorted(layers))} ",
                    search_text=search_text,
                    parquet=timeline_to_parquet(timeline),
                    warnings=loads(dumps([_warning_dict(w) for w in warnings])))


def _warning_dict(warning: Any) -> dict[str, Any]:
    # the brief says dicts; connectors hand out SourceWarning dataclasses: take both
    if dataclasses.is_dataclass(warning) and not isinstance(warning, type):
        return dataclasses.asdict(warning)
    return dict(warning)


def timeline_to_parquet(timeline: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    timeline.to_parquet(buf, engine="pyarrow", index=False)
    return buf.getvalue()


def timeline_from_parquet(data: bytes) -> pd.DataFrame:
    frame = pd.read_parquet(io.BytesIO(data), engine="pyarrow")
    validate(frame)
    return frame


def dumps(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def loads(value: Any) -> Any:
    """JSON text (SQLite) or an already-decoded jsonb value (PostgreSQL)."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


def utc(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ValueError("note/override times must be timezone-aware (UTC)")
    return at.astimezone(UTC)


def search_terms(search: str) -> list[str]:
    """Every whitespace-separated word must match (case-insensitive substring)."""
    return search.lower().split()


def like_pattern(term: str) -> str:
    """A LIKE pattern matching `term` anywhere; ids are full of `_`, so escape it (with `\\`)."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def layer_pattern(layer: str) -> str:
    """A LIKE pattern matching one layer in `Prepared.layers`."""
    return like_pattern(f" {layer} ")


# the investigations columns `summary_from_row` reads, for a SELECT in either backend
SUMMARY_COLUMNS = ("id, title, created_at, provider, group_count AS groups, worst_layer, "
                   "money_at_risk, sources, tags")


def summary_from_row(row: Mapping[str, Any]) -> Summary:
    created = row["created_at"]
    if isinstance(created, str):
        created = datetime.fromisoformat(created)
    return Summary(id=row["id"], title=row["title"], created_at=created.astimezone(UTC),
                   provider=row["provider"], groups=int(row["groups"]),
                   worst_layer=row["worst_layer"], money_at_risk=loads(row["money_at_risk"]),
                   sources=loads(row["sources"]), tags=loads(row["tags"]))


def note_from_row(row: Mapping[str, Any]) -> Note:
    return Note(author=row["author"], text=row["text"], at=_time(row["at"]),
                group_id=row["group_id"], duplicate=row["duplicate"])


def override_from_row(row: Mapping[str, Any]) -> Override:
    return Override(group_id=row["group_id"], duplicate=row["duplicate"], layer=row["layer"],
                    reason=row["reason"], author=row["author"], at=_time(row["at"]),
                    confirmed=bool(row["confirmed"]))


def _time(value: Any) -> datetime:
    at = datetime.fromisoformat(value) if isinstance(value, str) else value
    return at.astimezone(UTC)
