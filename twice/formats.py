"""How twice writes times, money and evidence text: one home for every part (connectors, store,
sweep, cli, web, lab), so a time reads the same everywhere, an amount is never divided by 100 when
its currency has no cents, and text from the evidence never acts on whoever reads it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

import pandas as pd

__all__ = ["TOOL_SHOWN", "amount_text", "is_missing", "iso", "log_visibly",
           "minor_unit_exponent", "money", "one_line", "utc", "visible"]

# Amounts are integers in the currency's minor unit (Stripe, PayPal and Adyen agree on the unit,
# ISO 4217's exponent). Currencies without a minor unit, as Stripe lists them: 500 JPY is 500.
ZERO_DECIMAL = frozenset({"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf",
                          "ugx", "vnd", "vuv", "xaf", "xof", "xpf"})
# ... and those with thousandths: 1500 KWD is 1.500
THREE_DECIMAL = frozenset({"bhd", "jod", "kwd", "omr", "tnd"})
TimeSpec = Literal["auto", "hours", "minutes", "seconds", "milliseconds", "microseconds",
                   "nanoseconds"]


def utc(value: Any) -> pd.Timestamp:
    """A time as a UTC timestamp; one without a zone is taken as UTC (as every export here)."""
    t = pd.Timestamp(value)
    return t.tz_localize("UTC") if t.tz is None else t.tz_convert("UTC")


def iso(value: Any, timespec: TimeSpec = "auto", *, zulu: bool = True) -> str:
    """ISO 8601 in UTC, `...Z` (or `...+00:00` with zulu=False); `value` is a datetime, a
    timestamp or a number of unix seconds. `timespec` as for `datetime.isoformat`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = datetime.fromtimestamp(float(value), UTC)
    # a datetime stays one (any year; a pandas Timestamp keeps its nanoseconds)
    at = value if isinstance(value, datetime) else utc(value)
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    text = at.isoformat(timespec=timespec)
    return text.replace("+00:00", "Z") if zulu else text


def minor_unit_exponent(currency: str) -> int:
    """How many decimals an amount in `currency`'s minor unit has (2 unless listed above)."""
    code = currency.lower()
    return 0 if code in ZERO_DECIMAL else 3 if code in THREE_DECIMAL else 2


def money(amounts: Mapping[str, int], empty: str = "—") -> str:
    """Minor-unit amounts per currency, e.g. {"usd": 4900, "jpy": 500} -> "49.00 USD, 500 JPY"."""
    parts = []
    for currency, amount in amounts.items():
        places = minor_unit_exponent(currency)
        # Decimal: exact for any int64 amount (a float would round past 2**53)
        parts.append(f"{Decimal(amount).scaleb(-places):,.{places}f} {currency.upper()}")
    return ", ".join(parts) or empty


def is_missing(value: object) -> bool:
    """None, NaN, pd.NA or NaT: a cell the evidence left empty."""
    return value is None or value is pd.NA or value is pd.NaT or (
        isinstance(value, float) and value != value)


def amount_text(amount: object, currency: object) -> str | None:
    """One amount in minor units as people read it ("49.00 USD"; "?" for a currency not said);
    None when there is no amount (None, NaN, pd.NA)."""
    if is_missing(amount):
        return None
    code = "" if is_missing(currency) else str(currency)
    return money({code or "?": int(amount)})  # type: ignore[call-overload]


# A tool's name from the evidence can be any length; a duplicate's label or title keeps it to
# one glance.
TOOL_SHOWN = 32


def one_line(text: str, limit: int) -> str:
    """`text` on one line (each run of whitespace, line breaks too, one space), at most `limit`
    characters: a longer one is cut and ends in an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1].rstrip() + "…"


# C0 and C1 controls (ESC, NUL, DEL, the 8-bit CSI 0x9b: what terminals obey) and the bidi
# controls that reorder the text after them. Tab and newline are text, and stay.
INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                        "\u2066-\u2069]")


# lone surrogates: how Python keeps the bytes of a file name that are not UTF-8 (U+DC80-DCFF
# for the bytes 0x80-0xff), and what no UTF-8 output can carry
_SURROGATE = re.compile("[\ud800-\udfff]")


def visible(text: str) -> str:
    """Text from the evidence or a user, safe to show anywhere (terminal, page, chart): each
    control and bidi character is written as its code point, `<U+001B>`, `<U+202E>`, so it is
    seen, never obeyed; a byte of a file name that is not UTF-8 as `\\xff`. Data (the JSON
    contract, exports) keeps the text as it was."""
    shown = INVISIBLE.sub(lambda m: f"<U+{ord(m[0]):04X}>", text)
    return _SURROGATE.sub(_surrogate, shown) if _SURROGATE.search(shown) else shown


def _surrogate(m: re.Match[str]) -> str:
    point = ord(m[0])
    return f"\\x{point - 0xDC00:02x}" if 0xDC80 <= point <= 0xDCFF else f"<U+{point:04X}>"


class _VisibleRecord(logging.LogRecord):
    """A log record whose message and traceback name their control characters: what libraries
    log (LangGraph names the module a checkpoint blob gives) is evidence too."""

    def getMessage(self) -> str:  # noqa: N802 - logging's name
        return visible(super().getMessage())


def log_visibly() -> None:
    """Every log record made from now on, by any library, shows control and bidi characters by
    name (`visible`), on stderr and in `twice web`'s log as in twice's own output."""
    if logging.getLogRecordFactory() is not _visible_record:
        logging.setLogRecordFactory(_visible_record)


def _visible_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _VisibleRecord(*args, **kwargs)
    if record.exc_info and record.exc_info[0] is not None:
        record.exc_text = visible(logging.Formatter().formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = visible(record.stack_info)
    return record
