"""twice's own format: a normalised timeline saved as Parquet (what the web app exports).

It keeps every source's rows after normalisation, so an investigation whose original evidence has
expired (Stripe keeps events 30 days) can still be re-analysed offline.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pyarrow as pa

from twice.connectors.base import EARLIEST, LATEST, LoadResult, SourceError, SourceWarning
from twice.connectors.jsonfile import open_bytes
from twice.timeline import COLUMN_NAMES, KINDS, SchemaError, coerce, validate

name = "timeline"
PARQUET_MAGIC = b"PAR1"


def sniff(path: Path, head: bytes) -> bool:
    return head.startswith(PARQUET_MAGIC)


def to_bytes(timeline: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    timeline.to_parquet(buf, index=False)
    return buf.getvalue()


# what reading a damaged or foreign Parquet file raises (pyarrow's errors, pandas' conversions)
_UNREADABLE = (OSError, ValueError, TypeError, OverflowError, NotImplementedError, KeyError,
               IndexError, pa.ArrowException, SchemaError)


def parse_timeline(raw: bytes, origin: str) -> LoadResult:
    """A saved timeline -> its rows. Rows without a time, source or known kind are skipped with a
    warning naming the row; a file that is not a readable timeline is one SourceError."""
    try:
        frame = pd.read_parquet(io.BytesIO(raw))
        rows = coerce(frame)
    except _UNREADABLE as exc:
        reason = " ".join(str(exc).split())[:200]
        raise SourceError(origin, f"not a twice timeline ({type(exc).__name__}: {reason})") \
            from None
    missing = [c for c in COLUMN_NAMES if c not in frame.columns]
    if {"at", "source", "kind"} & set(missing):
        raise SourceError(origin, f"not a twice timeline (no column {', '.join(missing)})")
    bad = rows["at"].isna() | rows["source"].isna() | ~rows["kind"].isin(KINDS).fillna(False)
    warnings = [SourceWarning(f"{origin}:row {i}", "no time, source or known kind; skipped")
                for i in rows.index[bad.to_numpy(dtype=bool)]]
    # times outside 2000-2100 are garbage (and near pandas' edges overflow the engine)
    lo, hi = pd.Timestamp(EARLIEST), pd.Timestamp(LATEST)
    absurd = ~bad & ~(rows["at"].between(lo, hi) & rows["at_aligned"].between(lo, hi))
    warnings += [SourceWarning(f"{origin}:row {i}", f"time {str(rows['at'][i])} is outside "
                               "2000-2100; skipped") for i in rows.index[absurd.to_numpy(bool)]]
    late_end = rows["end"].notna() & ~rows["end"].between(lo, hi)
    warnings += [SourceWarning(f"{origin}:row {i}", f"end {str(rows['end'][i])} is outside "
                               "2000-2100; end left empty")
                 for i in rows.index[(late_end & ~bad & ~absurd).to_numpy(bool)]]
    rows.loc[late_end, "end"] = pd.NaT
    rows = rows[~(bad | absurd)].reset_index(drop=True)
    try:
        validate(rows)
    except SchemaError as exc:
        raise SourceError(origin, f"not a twice timeline ({exc})") from None
    return LoadResult(source=name, rows=rows, warnings=warnings)


def load(target: str | Path) -> LoadResult:
    return parse_timeline(open_bytes(target), str(target))
