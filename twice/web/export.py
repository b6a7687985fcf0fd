"""An investigation as a re-loadable incident folder (the Export tab's zip; no Streamlit)."""

from __future__ import annotations

import dataclasses
import io
import zipfile

import orjson

from twice.connectors import manifest
from twice.connectors.provider import timeline_file
from twice.engine import Analysis
from twice.report import offset_dicts, to_contract
from twice.store import Snapshot

LIVE_ERRORS = "live investigation"  # the source named by a saved partial run's errors
FAILED_PREFIX = "Partial: "  # how such an error is worded among the warnings


def incident_zip(snap: Snapshot, analysis: Analysis) -> bytes:
    """The investigation as a re-loadable incident folder: the normalised timeline (twice's own
    Parquet format, which outlives the provider's 30-day event retention), the analysis, the
    notes, a README and the manifest `twice investigate --out` writes too (what failed, so
    `twice analyze` of the folder says it is partial)."""
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
        z.writestr(f"{folder}/{manifest.NAME}", folder_manifest(snap, analysis))
    return buf.getvalue()


def failed_sources(snap: Snapshot) -> list[str]:
    """The errors of the sources a live investigation could not read, as it saved them."""
    return [str(w.get("detail", "")).removeprefix(FAILED_PREFIX) for w in snap.warnings
            if w.get("source") == LIVE_ERRORS]


def folder_manifest(snap: Snapshot, analysis: Analysis) -> bytes:
    """The exported folder's manifest. The store keeps no request window: the window given is
    the span of the saved evidence (its first and last record)."""
    s = snap.summary
    errors = failed_sources(snap)
    sources = [manifest.SourceEntry(name, f"saved investigation {s.id}", True,
                                    ["timeline.parquet"]) for name in s.sources]
    if errors:
        sources.append(manifest.SourceEntry(LIVE_ERRORS, s.title, False, [], errors))
    times = snap.timeline["at"].dropna() if "at" in snap.timeline else None
    since, until = ((times.min().to_pydatetime(), times.max().to_pydatetime())
                    if times is not None and len(times) else (None, None))
    return manifest.document(
        manifest.Manifest(bool(errors) or "partial" in s.tags, errors, sources),
        made_by="twice web export", subject=None, since=since, until=until,
        clock_offsets=offset_dicts(analysis))
