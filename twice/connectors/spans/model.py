"""One span, whatever format it came in: the record both span readers (OTLP, Jaeger) produce.

The readers only normalise structure (ids, times, kind, status, attribute values, exception
events); what a span *means* for the timeline is decided once, in
`twice.connectors.spans.interpret`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NamedTuple


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


MIN_NS = 10**17  # 1973-03-03: an earlier span time is in the wrong unit (s, ms or us), not real
# 2100-01-01 (_parsing.LATEST): a later span time is garbage, and near pandas' last nanosecond
# (2262) the engine's own arithmetic on it (a tolerance, a window) would overflow
LATEST_NS = 4_102_444_800 * 10**9
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
