"""What the app keeps across reruns and sessions: the store (the bundled samples imported into
it once, in the background) and each investigation's analysis."""

from __future__ import annotations

import streamlit as st

from twice.engine import Analysis
from twice.failure import AnalysisFailure, analyze_or_keep
from twice.store import InvestigationNotFound, Snapshot, Store, open_store
from twice.timeline import SourceWarning
from twice.web.samples import SampleImport


@st.cache_resource
def get_store() -> Store:
    """The store, opened once per process; the bundled samples it lacks are imported in the
    background (`sample_import`), so no page waits for them."""
    store = open_store()
    _sample_import(store)
    return store


@st.cache_resource
def _sample_import(_store: Store) -> SampleImport:
    return SampleImport(_store).start()


def sample_import() -> SampleImport:
    """The import of the bundled samples into this process's store (done, or under way)."""
    return _sample_import(get_store())


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
