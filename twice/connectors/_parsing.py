"""Parsing helpers the connectors share: what a record's text, amount, time and ids mean, and
`Skip`, which a parser raises for a record that cannot become a row (its caller turns it into a
warning naming the record and goes on).

Private to twice.connectors: a connector imports these from here, never from another connector.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

import pandas as pd

from twice.connectors.base import EARLIEST, INT64_MAX, LATEST, fits_int64

# Metadata keys teams stamp on provider objects to tie an effect to the agent's call.
THREAD_KEYS = ("thread_id", "langgraph_thread_id", "agent_thread_id")
TOOL_CALL_KEYS = ("tool_call_id",)

# Times outside EARLIEST..LATEST (2000-2100, from base) are unit mistakes or garbage.

DETAIL_MAX = 200
_EARLIEST_S, _LATEST_S = EARLIEST.timestamp(), LATEST.timestamp()
_MAX_DIGITS = 4000  # int() refuses strings of more than 4300 digits


class Skip(ValueError):
    """A record that cannot become a row; the message says why."""


def short(text: Any, limit: int = DETAIL_MAX) -> str | None:
    """One line of at most `limit` characters, or None for empty values."""
    if text is None:
        return None
    line = " ".join(str(text).split())
    if not line:
        return None
    return line if len(line) <= limit else line[: limit - 1] + "…"


def text_or_none(value: Any) -> str | None:
    if isinstance(value, str):  # the usual case, answered first
        return value.strip() or None
    if value is None or isinstance(value, (dict, list)):
        return None
    text = str(value).strip()
    return text or None


def minor_units(value: Any) -> int:
    """An amount in minor units; raises ValueError for anything that is not a whole number."""
    if isinstance(value, bool):
        raise ValueError(f"amount {value!r} is not a whole number")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isascii() \
            and value.strip().lstrip("-").isdigit():
        digits = value.strip()
        number = int(digits) if len(digits) <= 20 else INT64_MAX + 1  # int() stops at 4300
    else:
        raise ValueError(f"amount {short(repr(value), 40)} is not a whole number")
    if not fits_int64(number):
        raise ValueError(f"amount {short(repr(value), 40)} is beyond 64-bit integers")
    return number


def unix_seconds(value: Any) -> pd.Timestamp:
    """A Stripe `created` (unix seconds) as a UTC timestamp; raises Skip when absurd."""
    return pd.Timestamp(unix_ns(value) // 1000, unit="us", tz="UTC")


def unix_ns(value: Any) -> int:
    """A Stripe `created` (unix seconds) as ns since the epoch, to the microsecond; raises Skip
    when absurd."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Skip(f"created {short(repr(value), 40)} is not unix seconds")
    if not _EARLIEST_S <= value <= _LATEST_S:  # also false for NaN
        raise Skip(f"created {value} is not a plausible time (unix seconds)")
    return int(round(value * 1_000_000)) * 1000


def ids_from_metadata(metadata: Any) -> dict[str, str]:
    """thread_id / tool_call_id stamped into provider metadata, when present."""
    out: dict[str, str] = {}
    if not is_object(metadata) or not metadata:
        return out
    for column, keys in (("thread_id", THREAD_KEYS), ("tool_call_id", TOOL_CALL_KEYS)):
        for key in keys:
            value = text_or_none(metadata.get(key))
            if value:
                out[column] = value
                break
    return out


def is_object(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """A JSON object (any Mapping). Parsed JSON holds plain dicts and scalars: those are told
    apart first, as asking the Mapping ABC costs ten times more."""
    if isinstance(value, dict):
        return True
    if value is None or isinstance(value, (str, int, float, list)):
        return False
    return isinstance(value, Mapping)


def as_int(value: Any) -> int | None:
    """An integer given as int, integral float or decimal string; None for anything else
    (a string of more digits than Python converts, ~4300, is anything else too)."""
    if type(value) is str:  # first: OTLP JSON writes 64-bit ints as strings
        if value.isdigit() and value.isascii():  # the usual case: plain ASCII digits
            return int(value) if len(value) <= _MAX_DIGITS else None
        text = value.strip()
        digits = text[1:] if text[:1] in ("+", "-") else text
        # isdecimal, not isdigit: "²" is a digit int() refuses
        if digits.isdecimal() and len(digits) <= _MAX_DIGITS:
            return int(text)
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):  # a str subclass
        return as_int(str(value))
    return None


# --- trace and span ids, span times: as OTLP, Jaeger and the trace backends write them

MAX_NS = 2**63 - 1  # pandas' datetime64[ns] range ends here (year 2262)
_HEX = re.compile(r"[0-9a-fA-F]+")
_LOWER_HEX_DIGITS = "0123456789abcdef"


def _normalise_id(value: Any, n_bytes: int) -> str | None:
    """Lower-case hex of a trace/span id given as hex (maybe short: Jaeger drops leading zeros)
    or as base64 of the raw bytes (some OTLP JSON writers); None when unusable or all zeros."""
    if not isinstance(value, str) or not value:
        return None
    width = 2 * n_bytes
    if len(value) == width and not value.strip(_LOWER_HEX_DIGITS):
        text = value  # already in the canonical form (the usual case): nothing to convert
    elif len(value) <= width and _HEX.fullmatch(value):
        text = value.lower().rjust(width, "0")
    else:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(raw) != n_bytes:
            return None
        text = raw.hex()
    return None if text.strip("0") == "" else text


def trace_id_hex(value: Any) -> str | None:
    return _normalise_id(value, 16)


def span_id_hex(value: Any) -> str | None:
    return _normalise_id(value, 8)


def epoch_ns(value: Any, scale: int = 1) -> int | None:
    """Nanoseconds since the epoch from a count of (1/scale)-ns units; None if unusable."""
    number: int | None
    if type(value) is str and value.isdigit() and value.isascii() and len(value) <= 19:
        number = int(value)  # the usual case: OTLP's decimal string of ns
    else:
        number = as_int(value)
    if number is None or number <= 0:
        return None
    ns = number * scale
    return ns if ns <= MAX_NS else None
