"""Every view of a saved investigation is a URL: the view's state to and from a query string.
The web app reads it; the sweep and the command line write it (the links they print).

Reading is tolerant (a link edited by hand, or from an older version, opens the nearest valid
view instead of failing); writing emits only what differs from the defaults. A ViewState holds
ids, a tab, a time window and a clock choice: nothing secret can end up in a link.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import urlencode

import pandas as pd

from twice.formats import iso, utc

TABS = ("incidents", "timeline", "gaps", "verdict", "notes", "export")
CLOCKS = ("aligned", "raw")
ID_PATTERN = re.compile(r"[A-Za-z0-9_:.#-]{1,128}")
# ISO-8601 only: pandas would also accept words like "now", which a link must not mean.
_ISO_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?(Z|[+-]\d{2}(:?\d{2})?)?", re.ASCII)


@dataclass(frozen=True)
class DuplicateKey:
    """Which duplicate a view shows: "<group_id>:<second attempt id>" in a URL (a group id has
    no ":"; an attempt id may)."""

    group: str
    second: str

    @classmethod
    def parse(cls, key: str) -> DuplicateKey:
        group, _, second = key.partition(":")
        return cls(group, second)

    def __str__(self) -> str:
        return f"{self.group}:{self.second}"


@dataclass(frozen=True)
class ViewState:
    inv: str | None = None  # investigation id
    group: str | None = None  # group id (logical call)
    dup: str | None = None  # duplicate key, "<group_id>:<second attempt id>" (duplicates_frame)
    tab: str = "incidents"
    t0: pd.Timestamp | None = None  # timeline window, UTC
    t1: pd.Timestamp | None = None
    clock: str = "aligned"  # or "raw"

    def __post_init__(self) -> None:
        # times are always UTC-aware, so a state survives its own link unchanged
        for name in ("t0", "t1"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, utc(value))

    def at_duplicate(self, key: str | None, **changes: Any) -> ViewState:
        """This view on another duplicate (`key` as in `dup`; its group follows it)."""
        group = DuplicateKey.parse(key).group if key else None
        return replace(self, dup=key, group=group, **changes)


def _one(params: Mapping[str, str | list[str]], name: str) -> str | None:
    value = params.get(name)
    if isinstance(value, list | tuple):
        value = value[-1] if value else None  # a repeated parameter: the last one wins
    return value if isinstance(value, str) else None


def _id(value: str | None) -> str | None:
    return value if value is not None and ID_PATTERN.fullmatch(value) else None


def _time(value: str | None) -> pd.Timestamp | None:
    if value is None or not _ISO_TIME.fullmatch(value.strip()):
        return None
    try:
        t = pd.Timestamp(value.strip())
    except (ValueError, OverflowError, TypeError):
        return None
    if t is pd.NaT:
        return None
    return utc(t)


def from_query(params: Mapping[str, str | list[str]]) -> ViewState:
    """The view a query string asks for; anything unknown or invalid falls back to the default."""
    tab = _one(params, "tab")
    clock = _one(params, "clock")
    t0, t1 = _time(_one(params, "t0")), _time(_one(params, "t1"))
    if t0 is None or t1 is None or t0 > t1:
        t0 = t1 = None  # half a window, or a reversed one, is no window
    return ViewState(
        inv=_id(_one(params, "inv")),
        group=_id(_one(params, "group")),
        dup=_id(_one(params, "dup")),
        tab=tab if tab in TABS else "incidents",
        t0=t0,
        t1=t1,
        clock=clock if clock in CLOCKS else "aligned",
    )


def to_query(state: ViewState) -> dict[str, str]:
    """The query parameters for `state`: only the fields that differ from the defaults."""
    default = ViewState()
    out: dict[str, str] = {}
    for f in fields(ViewState):
        value = getattr(state, f.name)
        if value is None or value == getattr(default, f.name):
            continue
        out[f.name] = iso(value) if isinstance(value, pd.Timestamp) else str(value)
    return out


def link(base_url: str, state: ViewState) -> str:
    """A shareable link to `state` (base_url "" gives a relative "?..." link)."""
    query = urlencode(to_query(state))
    return f"{base_url}{'&' if '?' in base_url else '?'}{query}"
