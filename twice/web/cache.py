"""What the app keeps across reruns and sessions: the store (the bundled samples imported into
it once) and each investigation's analysis."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import streamlit as st

from twice.connectors import registry
from twice.engine import Analysis
from twice.failure import AnalysisFailure, analyze_or_keep
from twice.store import (
    InvestigationExists,
    InvestigationNotFound,
    Note,
    Snapshot,
    Store,
    StoreReadOnly,
    open_store,
)
from twice.timeline import SourceWarning

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


@st.cache_resource
def get_store() -> Store:
    store = open_store()
    _import_samples(store)
    return store


def _import_samples(store: Store) -> None:
    """The bundled sample incidents, under stable ids so the README's links work everywhere."""
    if not SAMPLES.is_dir():  # installed without the repository's sample_data/
        return
    for folder in sorted(p for p in SAMPLES.iterdir() if (p / "truth.json").exists()):
        inv_id = "sample-" + folder.name.replace("_", "-")
        if store.get(inv_id) is not None:
            continue
        truth = json.loads((folder / "truth.json").read_text())
        found, _ = registry.scan_folder(folder)
        loaded = registry.load_all([(n, p, {}) for n, p in found])
        title = f"Sample: {folder.name.replace('_', ' ')}"
        try:
            store.create(title, loaded.rows, sources=sorted({n for n, _ in found}),
                         warnings=loaded.warnings, tags=["sample", truth["layer"]], id=inv_id)
        except InvestigationExists:  # another process imported it first
            continue
        except StoreReadOnly:  # a read-only store still shows what it holds
            return
        store.add_note(inv_id, Note(author="twice lab", at=datetime.now(UTC),
                                    text=f"What really happened: {truth['description']}"))


@st.cache_resource(max_entries=32)
def get_analysis(inv_id: str, _store: Store) -> tuple[Analysis, AnalysisFailure | None]:
    """The investigation's analysis, cached by id: a snapshot's timeline never changes, so it is
    read from the store and analysed once, not on every click (its notes and overrides, which
    do change, are read on every run). An analysis that fails gives the timeline without
    groups and the failure (`twice.failure`): the page says it and keeps what loaded."""
    snapshot = _store.get(inv_id)
    if snapshot is None:  # deleted since the caller looked (an exception is not cached)
        raise InvestigationNotFound(f"investigation {inv_id!r} not found")
    return analysis_of(snapshot)


def analysis_of(snapshot: Snapshot) -> tuple[Analysis, AnalysisFailure | None]:
    """A saved investigation analysed as it was saved: with its options (a sweep's link opens
    the verdict the sweep reported) and the warnings loading reported (the page, the JSON
    export and the HTML report show them)."""
    warnings = [SourceWarning(source=str(w.get("source", "")), detail=str(w.get("detail", "")))
                for w in snapshot.warnings]
    return analyze_or_keep(snapshot.timeline, warnings, snapshot.options)
