"""twice's own format: a normalised timeline saved as Parquet (what the web app exports).

It keeps every source's rows after normalisation, so an investigation whose original evidence has
expired (Stripe keeps events 30 days) can still be re-analysed offline.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from connectors.base import LoadResult, SourceError
from connectors.jsonfile import open_bytes
from twice.timeline import SchemaError, coerce, validate

name = "timeline"
PARQUET_MAGIC = b"PAR1"


def sniff(path: Path, head: bytes) -> bool:
    return head.startswith(PARQUET_MAGIC)


def to_bytes(timeline: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    timeline.to_parquet(buf, index=False)
    return buf.getvalue()


def parse_timeline(raw: bytes, origin: str) -> LoadResult:
    try:
        frame = pd.read_parquet(io.BytesIO(raw))
        rows = coerce(frame)
        validate(rows)
    except (OSError, ValueError, SchemaError) as exc:
        raise SourceError(origin, f"not a twice timeline ({type(exc).__name__}: {exc})") from None
    return LoadResult(source=name, rows=rows)


def load(target: str | Path) -> LoadResult:
    return parse_timeline(open_bytes(target), str(target))
