"""The twice web app: `twice web` (or `streamlit run twice/web/main.py`).

A page reads the URL state, calls the core, renders. Every view is reproducible from its URL
(investigation, group, duplicate, tab, time window, clock), and links never carry secrets.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import streamlit as st

from twice.connectors import registry
from twice.engine import Analysis, analyze
from twice.store import (
    InvestigationExists,
    InvestigationNotFound,
    Note,
    Store,
    StoreError,
    open_store,
)
from twice.store.links import ViewState, from_query, to_query
from twice.web import auth
from twice.web import views as views

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


@st.cache_resource
def get_store() -> Store:
    store = open_store()
    _import_samples(store)
    return store


def _import_samples(store: Store) -> None:
    """The bundled sample incidents, under stable ids so the README's links work everywhere."""
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
        store.add_note(inv_id, Note(author="twice lab", at=datetime.now(UTC),
                                    text=f"What really happened: {truth['description']}"))


@st.cache_resource(max_entries=32)
def get_analysis(inv_id: str, _store: Store) -> Analysis:
    """The investigation's analysis, cached by id: a snapshot's timeline never changes, so it is
    read from the store and analysed once, not on every click (its notes and overrides, which
    do change, are read on every run)."""
    snapshot = _store.get(inv_id)
    if snapshot is None:  # deleted since the caller looked (an exception is not cached)
        raise InvestigationNotFound(f"investigation {inv_id!r} not found")
    return analyze(snapshot.timeline)


def go(state: ViewState) -> None:
    """Move to another view: the URL is the state."""
    st.query_params.from_dict(to_query(state))
    st.rerun()


def main() -> None:
    st.set_page_config(page_title="twice", page_icon="⧉", layout="wide")
    if not auth.gate():  # served to a team: sign-in or the shared token first (twice/web/auth.py)
        return
    state = from_query(st.query_params.to_dict())
    try:
        store = get_store()
    except StoreError as exc:
        st.error(f"The investigation store cannot be opened: {views.md_text(str(exc))}")
        return
    with st.sidebar:
        views.sidebar(store, state, go)
        auth.sign_out_button()
        if st.button("Sweeps", width="stretch"):  # the sweeps page (twice/web/sweeps.py)
            st.query_params.from_dict({"sweep": "all"})
            st.rerun()
    if "sweep" in st.query_params:
        from twice.web.sweeps import page as sweep_page

        sweep_page(store, st.query_params.to_dict())
        return
    if "drill" in st.query_params:  # training drills: twice/web/drills.py
        from twice.web.drills import page

        page(st.query_params.to_dict())
        return
    if state.inv is None:
        views.incidents(store, state, go)
        return
    snapshot = store.get(state.inv, timeline=False)  # the timeline is in the cached analysis
    try:
        analysis = get_analysis(state.inv, store) if snapshot is not None else None
    except InvestigationNotFound:
        analysis = None
    if snapshot is None or analysis is None:
        st.error(f"Investigation `{state.inv}` was not found. It may have been deleted, or the "
                 "link was mistyped.")
        if st.button("Back to incidents"):
            go(ViewState())
        return
    views.investigation(store, snapshot, analysis, state, go)


main()
