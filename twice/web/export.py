"""An investigation as a re-loadable incident folder (the Export tab's zip; no Streamlit)."""

from __future__ import annotations

import dataclasses
import io
import zipfile

import orjson

from twice.connectors.provider import timeline_file
from twice.engine import Analysis
from twice.report import to_contract
from twice.store import Snapshot


def incident_zip(snap: Snapshot, analysis: Analysis) -> bytes:
    """The investigation as a re-loadable incident folder: the normalised timeline (twice's own
    Parquet format, which outlives the provider's 30-day event retention), the analysis, the
    notes and a README."""
    s = snap.summary
    folder = f"twice-{s.id}"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{folder}/timeline.parquet", timeline_file.to_bytes(snap.timeline))
        z.writestr(f"{folder}/analysis.json",
                   orjson.dumps(to_contract(analysis), option=orjson.OPT_INDENT_2))
        z.writestr(f"{folder}/notes.json", orjson.dumps(
            {"notes": [dataclasses.asdict(n) for n in snap.notes],
             "overrides": [dataclasses.asdict(o) for o in snap.overrides]},
            option=orjson.OPT_INDENT_2))
        z.writestr(f"{folder}/README.md",
                   f"# {s.title}\n\nExported from twice (investigation `{s.id}`). Re-run with "
                   f"`twice analyze {folder}/`: it reads timeline.parquet.\n")
    return buf.getvalue()
