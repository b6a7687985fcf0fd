"""Every view of a saved investigation is a URL: the view's state to and from a query string.
The web app reads it; the sweep and the command line write it (the links they print).

Reading is tolerant (a link edited by hand, or from an older version, opens the nearest valid
view instead of failing); writing emits only what differs from the defaults. A ViewState holds
ids, a tab, a time window and a clock choice: nothing secret can end up in a link.

A group or duplicate key holds ids from the evidence (request ids, tool call ids), which may be
any text. One made of `[A-Za-z0-9_:.#-]`, at most 128 characters, is written as it is (so links
stay readable, and links written before keep opening); any other is written as `~` and the
base64url of its UTF-8 (`~` is not in that set, so the two forms never meet).
"""

from __future__ import annotations

import base64
import binascii
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
ENCODED = "~"  # marks an id written as base64url (ids outside ID_PATTERN)
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
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
    """An investigation id: always plain (twice makes them)."""
    return value if value is not None and ID_PATTERN.fullmatch(value) else None


def encode_id(value: str) -> str:
    """An id as a link writes it: as it is when it fits ID_PATTERN, else `~` + base64url."""
    if ID_PATTERN.fullmatch(value):
        return value
    raw = value.encode("utf-8", errors="surrogatepass")
    return ENCODED + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_id(value: str | None) -> str | None:
    """The id a link's parameter names, plain or encoded; None when it is neither."""
    if value is None:
        return None
    if not value.startswith(ENCODED):
        return _id(value)
    body = value[len(ENCODED):]
    if not _BASE64URL.fullmatch(body):
        return None
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        text = raw.decode("utf-8", errors="surrogatepass")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    # one text, one link: a plain-able id written encoded (by hand) is not another form of it
    return text if text and encode_id(text) == value else None


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
        group=decode_id(_one(params, "group")),
        dup=decode_id(_one(params, "dup")),
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
        if isinstance(value, pd.Timestamp):
            out[f.name] = iso(value)
        elif f.name in ("group", "dup"):
            out[f.name] = encode_id(value)
        else:
            out[f.name] = str(value)
    return out


def link(base_url: str, state: ViewState) -> str:
    """A shareable link to `state` (base_url "" gives a relative "?..." link)."""
    query = urlencode(to_query(state))
    return f"{base_url}{'&' if '?' in base_url else '?'}{query}"
