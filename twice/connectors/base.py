"""The small interface every evidence source implements (README.md: adding a source).

A connector is a module with a `name`, `sniff(path, head)` (does this file look like mine?), a
pure `parse_*` function that turns already-read payloads into timeline rows (tests feed recorded
payloads to it), and `load(target, **options) -> LoadResult` that does the IO. Expected bad
input is data: a malformed record becomes a `SourceWarning` and loading goes on. A source that
cannot be read at all raises `SourceError` naming the source and the reason. Every message
goes through `redact` (twice.connectors.redaction): no credential in an error or a warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from twice.connectors.redaction import credentials, redact
from twice.timeline import SourceWarning, empty_timeline

__all__ = ["EARLIEST", "INT64_MAX", "INT64_MIN", "LATEST", "Connector", "LoadResult",
           "SourceError", "SourceWarning", "UnknownConnectorError", "credentials", "fits_int64",
           "redact"]

# The timeline's integer columns are Int64: a value beyond them is a bad record, not a row.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Times outside this window are unit mistakes (ms read as s) or garbage, not real events (and
# near the edges of what pandas holds, 1677-2262, the engine's arithmetic on them overflows).
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)


MAX_WARNINGS = 1000


class Warnings(list[SourceWarning]):
    """One source's warnings, at most `limit` of them listed: past that, one last line counts
    the rest, so a file of ten million bad records costs a thousand warnings, not ten million."""

    def __init__(self, items: Iterable[SourceWarning] = (), limit: int = MAX_WARNINGS) -> None:
        super().__init__()
        self.limit = limit
        self.more = 0
        self.extend(items)

    def append(self, warning: SourceWarning) -> None:
        if len(self) < self.limit:
            super().append(warning)
            return
        self.more += 1
        said = (f"{self.more:,} more warning(s) like these not listed (the first "
                f"{self.limit:,} are)")
        if self.more == 1:
            super().append(SourceWarning(warning.source, said))
        else:
            self[-1] = SourceWarning(self[-1].source, said)

    def extend(self, warnings: Iterable[SourceWarning]) -> None:
        for warning in warnings:
            self.append(warning)

    def __reduce__(self) -> Any:  # across a process boundary: as it is
        return (_rebuilt, (list(self), self.limit, self.more))


def _rebuilt(items: list[SourceWarning], limit: int, more: int) -> Warnings:
    found = Warnings(limit=limit)
    list.extend(found, items)
    found.more = more
    return found


@dataclass
class LoadResult:
    source: str  # connector name
    rows: pd.DataFrame = field(default_factory=empty_timeline)
    warnings: list[SourceWarning] = field(default_factory=list)


class SourceError(Exception):
    """A source cannot be read at all. The message names the source and the reason."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason

    def __reduce__(self) -> tuple[type[SourceError], tuple[str, str]]:
        # rebuilt from (source, reason) when it crosses a process boundary
        return (SourceError, (self.source, self.reason))


def fits_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


class UnknownConnectorError(KeyError):
    """No connector of that name, or no connector recognises a file."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown connector"


class Connector(Protocol):
    """What the registry calls. A connector module implements it with module-level names."""

    name: str  # what the registry and `--<name>` flags call it

    def sniff(self, path: Path, head: bytes) -> bool:
        """Whether `path`, whose first bytes are `head` (up to 64 KiB), is in this format."""
        ...

    def load(self, target: str | Path) -> LoadResult:
        """Read `target` into timeline rows. A connector may take options of its own as
        keywords (a column mapping, an extra span attribute); the registry passes them on."""
        ...
