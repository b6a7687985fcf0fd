"""Checkpoint times: the `ts` a checkpoint carries, the time in its UUIDv6 id, and the window
of checkpoints to read. Pure Python (and numpy for whole columns), no LangGraph import."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from twice.connectors.base import EARLIEST, LATEST

# Times outside 2000-2100 (_parsing.EARLIEST/LATEST) are garbage, not checkpoints; near the
# edges of what pandas holds (1677-2262) the engine's arithmetic on them would overflow.
_MIN_NS, _MAX_NS = int(EARLIEST.timestamp()) * 10**9, int(LATEST.timestamp()) * 10**9
# 100 ns intervals between the Gregorian epoch (UUID time zero) and the Unix epoch.
_UUID_EPOCH_OFFSET = 0x01B21DD213814000


def uuid6_time_ns(checkpoint_id: str) -> int | None:
    """Unix nanoseconds embedded in a UUIDv6 checkpoint id (None if it is not a UUIDv6)."""
    try:
        u = uuid.UUID(checkpoint_id)
    except (ValueError, TypeError, AttributeError):
        return None
    if u.version != 6:
        return None
    ticks = (u.time_low << 28) | (u.time_mid << 12) | (u.time_hi_version & 0x0FFF)
    ns = (ticks - _UUID_EPOCH_OFFSET) * 100
    return ns if _MIN_NS <= ns <= _MAX_NS else None  # past 2100: not a real checkpoint


def uuid6_bound(at_ns: int, upper: bool) -> str:
    """The smallest (or largest) UUIDv6 text whose timestamp is `at_ns` (Unix ns).

    UUIDv6 puts the timestamp first, most significant bits first, so the text of the ids sorts
    in time order and a time window is an id range.
    """
    ticks = at_ns // 100 + _UUID_EPOCH_OFFSET
    value = ((ticks >> 12) & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x6 << 76 | (ticks & 0x0FFF) << 64
    value |= (0xBFFF if upper else 0x8000) << 48  # variant bits 10, then the clock sequence
    value |= 0xFFFF_FFFF_FFFF if upper else 0
    return str(uuid.UUID(int=value))


@dataclass(frozen=True)
class Window:
    """Which checkpoints to read: some threads (None: all), a time range (None: open)."""

    thread_ids: tuple[str, ...] | None = None
    since_ns: int | None = None
    until_ns: int | None = None

    # `ts` is taken a moment after the id is minted (and a run that only saves on exit keeps
    # an older id), so the id range is widened and rows are cut on `at` afterwards.
    MARGIN_NS = 60 * 1_000_000_000

    def id_low(self) -> str | None:
        return None if self.since_ns is None else uuid6_bound(self.since_ns - self.MARGIN_NS,
                                                              upper=False)

    def id_high(self) -> str | None:
        return None if self.until_ns is None else uuid6_bound(self.until_ns + self.MARGIN_NS,
                                                              upper=True)

    def contains(self, at_ns: int) -> bool:
        return (self.since_ns is None or at_ns >= self.since_ns) and (
            self.until_ns is None or at_ns <= self.until_ns)

    @property
    def everything(self) -> bool:
        """No thread or time limit: every checkpoint is read."""
        return self.thread_ids is None and self.since_ns is None and self.until_ns is None


def datetime_ns(dt: datetime) -> int:
    """Unix nanoseconds of an aware datetime (naive means UTC), without float rounding."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def parse_ts(ts: Any) -> int | None:
    """Unix nanoseconds of a checkpoint's ISO 8601 `ts` (None when missing or unreadable)."""
    if not isinstance(ts, str) or not ts:
        return None
    try:
        ns = datetime_ns(datetime.fromisoformat(ts))
    except (ValueError, OverflowError):
        return None
    return ns if _MIN_NS <= ns <= _MAX_NS else None


def ts_column_ns(texts: Sequence[str]) -> np.ndarray:
    """Unix nanoseconds of `ts` texts in LangGraph's own form (`2025-03-04T10:00:00.123456+00:00`,
    checked by the caller), read by numpy for the whole column: what `parse_ts` gives each."""
    chars = np.array(texts, dtype="U32").view(np.uint32).reshape(len(texts), 32)
    local = np.ascontiguousarray(chars[:, :26]).view("U26").ravel()  # without the +00:00
    return local.astype("datetime64[us]").astype(np.int64) * 1000


# ASCII code -> hex digit value (-1: not a lower-case hex digit)
_HEX = np.full(256, -1, dtype=np.int8)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.int8)
_TEXT = np.ones(36, dtype=bool)
_TEXT[[8, 13, 18, 23]] = False  # the hyphens
_TICKS_LOW = _MIN_NS // 100 + _UUID_EPOCH_OFFSET  # the UUID times of 2000 and 2100
_TICKS_HIGH = _MAX_NS // 100 + _UUID_EPOCH_OFFSET


def uuid6_column_ns(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """`uuid6_time_ns` of every id (ns, and where it is one). When every id is 36 ASCII
    characters (LangGraph's ids), the canonical lower-case ones are read by numpy for the whole
    column; every other id is read one by one."""
    n = len(ids)
    times = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    canonical = np.zeros(n, dtype=bool)
    joined = "".join(ids) if all(type(i) is str for i in ids) else ""
    if n and len(joined) == 36 * n and joined.isascii() \
            and (np.fromiter(map(len, ids), dtype=np.int64, count=n) == 36).all():
        chars = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(n, 36)
        digits = _HEX[chars]
        canonical = ((digits[:, _TEXT] >= 0).all(axis=1)
                     & (chars[:, ~_TEXT] == ord("-")).all(axis=1)
                     & (chars[:, 14] == ord("6")) & (digits[:, 19] >= 8) & (digits[:, 19] <= 11))
        d = digits[canonical].astype(np.int64)
        powers = 16 ** np.arange(7, -1, -1, dtype=np.int64)
        ticks = ((d[:, 0:8] @ powers) << 28) | ((d[:, 9:13] @ powers[4:]) << 12) \
            | (d[:, 15:18] @ powers[5:])
        ok = (ticks >= _TICKS_LOW) & (ticks <= _TICKS_HIGH)
        where = np.flatnonzero(canonical)[ok]
        times[where] = (ticks[ok] - _UUID_EPOCH_OFFSET) * 100
        valid[where] = True
    for i in np.flatnonzero(~canonical).tolist():
        ns = uuid6_time_ns(ids[i])
        if ns is not None:
            times[i], valid[i] = ns, True
    return times, valid
