"""An investigation's analysis kept as data beside its timeline, so a server that has not opened
the investigation yet shows its verdict without running the engine again (issue 24: a
200k-row investigation's first visit).

It is written as Parquet (the attempts, the repeated calls' attempts, the aligned times) and
JSON (the groups with their duplicates and findings, the clock offsets). It is never pickled:
a team's store is written by everyone who saves to it, and what it holds is read as data and
checked, never run.

An analysis is kept under the fingerprint of the code that made it (`engine_fingerprint`: every
module of the twice package, and the pandas, NumPy and pyarrow it ran on) and the options it
was made with. One made by other code or with other options is not used: the investigation is
analysed again, and the new analysis replaces it. One that cannot be read as written (damaged,
or written by hand) is not used either (`decode` returns None, and says why in the log).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from twice.engine import Analysis, Group, Options, attempt_records
from twice.findings import Finding
from twice.layers import Band, Layer
from twice.link import ClockOffset
from twice.store.model import Snapshot
from twice.verdict import Alternative, Attempt, Duplicate

FORMAT = 1  # what `encode` writes; another is not read
_LOG = logging.getLogger("twice.store.analyses")


@dataclass(frozen=True)
class SavedAnalysis:
    """One row of the `analyses` table."""

    engine: str  # `engine_fingerprint()` of the code that made it
    body: str  # JSON: options, groups, clock offsets, the frames' column types
    attempts: bytes  # Parquet: Analysis.attempts
    repeated: bytes  # Parquet: the repeated calls' attempts (the groups' `rows`)
    aligned: bytes  # Parquet: each timeline row's `at_aligned - at`


@cache
def engine_fingerprint() -> str:
    """What decides an analysis besides its input: the source of every module of the twice
    package and the versions of the libraries the engine computes with."""
    import numpy
    import pyarrow

    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    try:
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    except OSError:  # a module that cannot be read: this process reuses no analysis kept
        digest.update(secrets.token_bytes(16))
    for module in (pd, numpy, pyarrow):
        digest.update(f"{module.__name__} {module.__version__}\0".encode())
    return digest.hexdigest()


def encode(analysis: Analysis, options: Options) -> SavedAnalysis:
    """The analysis as the store keeps it (made with `options`, by `analyze`: its groups'
    attempts are rows of one frame)."""
    repeated = analysis.groups[0].rows if analysis.groups else analysis.attempts.iloc[:0]
    if any(g.rows is not repeated for g in analysis.groups):
        raise ValueError("the groups' attempts are rows of several frames: not one analysis")
    body = {
        "format": FORMAT,
        "options": options.to_dict(),
        "dtypes": {"attempts": _dtypes(analysis.attempts), "repeated": _dtypes(repeated)},
        "groups": [_group(g) for g in analysis.groups],
        "offsets": [asdict(o) for o in analysis.offsets],
    }
    return SavedAnalysis(
        engine=engine_fingerprint(), body=json.dumps(body, default=_number),
        attempts=_parquet(analysis.attempts), repeated=_parquet(repeated),
        aligned=_parquet(pd.DataFrame({"shift": (analysis.timeline["at_aligned"]
                                                 - analysis.timeline["at"]).to_numpy()}),
                         index=False))


def decode(row: Mapping[str, Any], snapshot: Snapshot) -> Analysis | None:
    """The analysis a row of `analyses` made by this code holds (the store selects it by
    `engine_fingerprint()`), for the snapshot it was kept for, read with its timeline; None
    when it was made with other options or cannot be read as `encode` writes it (the caller
    analyses again)."""
    timeline, options, inv_id = snapshot.timeline, snapshot.options, snapshot.summary.id
    try:
        body = json.loads(row["body"])
        if body.get("format") != FORMAT or body.get("options") != options.to_dict():
            return None
        attempts = _frame(row["attempts"], body["dtypes"]["attempts"])
        repeated = _frame(row["repeated"], body["dtypes"]["repeated"])
        aligned = _aligned(row["aligned"], timeline)
        records = attempt_records(repeated)
        groups = [_group_from(g, repeated, records) for g in body["groups"]]
        offsets = [ClockOffset(**o) for o in body["offsets"]]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError,
            OSError) as exc:  # (pyarrow's errors are ValueError and OSError)
        # the reason as a quoted string: it can quote what the row holds, and a log is read
        # in a terminal
        _LOG.warning("investigation %r: its saved analysis is not used (%s: %r); analysing it "
                     "again", inv_id, type(exc).__name__, str(exc))
        return None
    return Analysis(groups=groups, attempts=attempts, timeline=aligned, offsets=offsets,
                    warnings=snapshot.source_warnings())


def _number(value: Any) -> Any:
    # NumPy's numbers, which json does not take (its floats it does: they are Python floats)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not kept in a saved analysis")


def _dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return {str(c): str(t) for c, t in frame.dtypes.items()}


def _parquet(frame: pd.DataFrame, index: bool = True) -> bytes:
    out = io.BytesIO()
    frame.to_parquet(out, engine="pyarrow", index=index, compression="zstd")
    return out.getvalue()


def _frame(data: bytes, dtypes: Mapping[str, str]) -> pd.DataFrame:
    """A frame `_parquet` wrote, with the column types it had: text as Python objects with
    None for missing, as the engine hands them out."""
    frame = pd.read_parquet(io.BytesIO(bytes(data)), engine="pyarrow")
    if list(frame.columns) != list(dtypes):
        raise ValueError(f"columns {list(frame.columns)} are not {list(dtypes)}")
    for column, dtype in dtypes.items():
        if dtype == "object":
            values = frame[column].astype(object).to_numpy(copy=True)
            values[pd.isna(values)] = None
            frame[column] = pd.Series(values, index=frame.index, dtype=object)
        elif str(frame[column].dtype) != dtype:
            wanted: Any = pd.api.types.pandas_dtype(dtype)
            frame[column] = frame[column].astype(wanted)
    return frame


def _aligned(data: bytes, timeline: pd.DataFrame) -> pd.DataFrame:
    """The timeline with the aligned times the analysis gave it, row by row (kept as each
    row's shift from its own time: a few distinct values, where the times are all
    different)."""
    shift = pd.read_parquet(io.BytesIO(bytes(data)), engine="pyarrow")["shift"]
    if len(shift) != len(timeline) or shift.dtype.kind != "m":
        raise ValueError("the aligned times are not the timeline's rows")
    at_aligned = timeline["at"] + shift.to_numpy()
    return timeline.assign(at_aligned=at_aligned.astype(timeline["at_aligned"].dtype))


def _group(group: Group) -> dict[str, Any]:
    return {
        "group_id": group.group_id, "tool_name": group.tool_name,
        "thread_id": group.thread_id, "tool_call_ids": list(group.tool_call_ids),
        "start": group.positions.start, "stop": group.positions.stop,
        "duplicates": [{**asdict(d), "band": d.band.value, "layer": d.layer.value,
                        "alternatives": [{"layer": a.layer.value, "why": a.why}
                                         for a in d.alternatives]}
                       for d in group.duplicates],
        "findings": [asdict(f) for f in group.findings],
    }


def _group_from(saved: Mapping[str, Any], repeated: pd.DataFrame,
                records: list[Attempt]) -> Group:
    start, stop = int(saved["start"]), int(saved["stop"])
    if not 0 <= start < stop <= len(records):
        raise ValueError(f"group {saved['group_id']!r}: rows {start}:{stop} of "
                         f"{len(records)}")
    duplicates = [
        Duplicate(first=str(d["first"]), second=str(d["second"]),
                  gap_seconds=float(d["gap_seconds"]), band=Band(d["band"]),
                  layer=Layer(d["layer"]), confidence=float(d["confidence"]),
                  protected=bool(d["protected"]), evidence=tuple(map(str, d["evidence"])),
                  fix=str(d["fix"]),
                  alternatives=tuple(Alternative(layer=Layer(a["layer"]), why=str(a["why"]))
                                     for a in d["alternatives"]))
        for d in saved["duplicates"]]
    return Group(group_id=str(saved["group_id"]), tool_name=saved["tool_name"],
                 thread_id=saved["thread_id"], tool_call_ids=list(saved["tool_call_ids"]),
                 rows=repeated, positions=slice(start, stop), duplicates=duplicates,
                 findings=[Finding(**f) for f in saved["findings"]],
                 records=records[start:stop])
