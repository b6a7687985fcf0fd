"""One span, whatever format it came in: the record both span readers (OTLP, Jaeger) produce.

The readers only normalise structure (ids, times, kind, status, attribute values, exception
events); what a span *means* for the timeline is decided once, in
`twice.connectors.spans.interpret`.
"""

from __future__ import annotations

import base64
import binascii
import re
from enum import StrEnum
from typing import Any, NamedTuple

from twice.connectors._parsing import as_int


class SpanKind(StrEnum):
    """OTLP's ints / enum names and Jaeger's `span.kind` tag map onto these."""

    CLIENT = "client"
    SERVER = "server"
    INTERNAL = "internal"
    PRODUCER = "producer"
    CONSUMER = "consumer"
    UNKNOWN = "unknown"


class SpanStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    UNSET = "unset"


_MAX_NS = 2**63 - 1  # pandas' datetime64[ns] range ends here (year 2262)
MIN_NS = 10**17  # 1973-03-03: an earlier span time is in the wrong unit (s, ms or us), not real
INT64 = range(-(2**63), 2**63)  # OTLP's intValue, Jaeger's int64 tags


class SpanRecord(NamedTuple):
    """One span. A named tuple, not a dataclass: a file's every span makes one, and a tuple is
    made several times faster."""

    origin: str  # file and line the span came from
    trace_id: str  # 32 lower-case hex
    span_id: str  # 16 lower-case hex
    parent_span_id: str | None
    name: str | None
    kind: SpanKind
    start_ns: int
    end_ns: int | None
    attributes: dict[str, Any]
    resource: dict[str, Any]  # resource / Jaeger process tags
    status: SpanStatus = SpanStatus.UNSET
    status_message: str | None = None
    exceptions: list[tuple[str | None, str | None]] = []  # (type, message); never mutated


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
    return ns if ns <= _MAX_NS else None
