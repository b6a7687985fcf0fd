"""One investigation (`?inv=ID`): its duplicates, a tab per view of them, and the link that
reproduces the view (`&group=&dup=&tab=&t0=&t1=&clock=`)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from twice.formats import money, visible
from twice.layers import LAYERS, Layer
from twice.store import InvestigationNotFound, Snapshot, Store, StoreError
from twice.store.links import ViewState, from_query, link
from twice.store.model import STATUSES
from twice.verdict import fmt_gap
from twice.web.cache import Analysed, get_analysis, get_store, is_analysed, sample_import
from twice.web.export import LIVE_ERRORS
from twice.web.nav import base_url, go, show
from twice.web.problems import store_problem
from twice.web.tabs import TABS, Investigation
from twice.web.text import duplicate_words, md_text, plural, shown_frame, tool_words

WARNINGS_SHOWN = 20


def render() -> None:
    state = from_query(st.query_params.to_dict())
    store = get_store()
    snapshot = store.get(state.inv, timeline=False) if state.inv else None
    if snapshot is None and state.inv and sample_import().is_pending(state.inv):
        # a new store's first visit: this bundled sample is still being analysed and saved
        with st.spinner("Analysing the bundled samples…"):
            sample_import().wait()
        snapshot = store.get(state.inv, timeline=False)
    analysed = _analysed(store, snapshot, state) if snapshot is not None else None
    if snapshot is None or analysed is None:
        st.error(f"Investigation `{state.inv}` was not found. It may have been deleted, or the "
                 "link was mistyped.")
        if st.button("Back to incidents"):
            go(ViewState())
        return
    analysis, failure = analysed
    inv = Investigation(store=store, snap=snapshot, analysis=analysis, state=state,
                        failure=failure)
    _header(inv)
    _pick_duplicate(inv)
    tabs = list(TABS)
    tab = state.tab if state.tab in tabs else "verdict"
    # keyed by the tab the URL names: the picker always shows the URL's tab (a link, the
    # browser's back button); a click changes the URL in its callback, and that run draws it
    picker = f"view:{tab}"
    st.radio("View", tabs, index=tabs.index(tab), horizontal=True, key=picker,
             format_func=lambda t: TABS[t][0], label_visibility="collapsed",
             on_change=lambda: show(dataclasses.replace(
                 state, tab=str(st.session_state[picker]))))
    TABS[tab][1](inv)
    st.divider()
    st.markdown("**Link to this view** (no secrets in it):")
    st.code(link(base_url(), state.at_duplicate(inv.key, tab=tab)), language=None)


def _analysed(store: Store, snapshot: Snapshot, state: ViewState) -> Analysed | None:
    """The investigation's analysis (None: deleted meanwhile). The first time this server
    shows it, the store's own account of it stands in the page while it is analysed."""
    inv_id = snapshot.summary.id
    try:
        if is_analysed(inv_id):
            return get_analysis(inv_id, store)
        preview = st.empty()
        with preview.container():
            _preview(store, snapshot, state)
            with st.spinner("Reading and analysing the saved evidence…"):
                analysed = get_analysis(inv_id, store)
        preview.empty()
        return analysed
    except InvestigationNotFound:
        return None


def _preview(store: Store, snapshot: Snapshot, state: ViewState) -> None:
    """The investigation as the store saved it (its title, the verdict its duplicate was saved
    with), shown while its timeline is read and analysed, which takes seconds on a large one:
    a shared link says what it is about at once."""
    s = snapshot.summary
    st.title(md_text(s.title))
    dups = store.duplicates(s.id)
    wanted = next((d for d in dups if d.dup_key == state.dup), None) or next(
        (d for d in dups if d.group_id == state.group), None)
    if wanted is None and dups:  # the newest call, its first duplicate (as the page opens)
        newest = max(dups, key=lambda d: (d.at is not None, d.at or 0)).group_id
        wanted = next(d for d in dups if d.group_id == newest)
    known = {x.value: x for x in Layer}
    if wanted is not None and wanted.layer in known and (state.tab or "verdict") == "verdict":
        layer = known[wanted.layer]  # (a layer a later twice no longer has is not shown)
        st.header(f"{layer.value}: {LAYERS[layer].plain}", anchor="verdict")
        st.caption(f"{duplicate_words(wanted, layer=False)} · the verdict as saved "
                   f"{s.created_at:%Y-%m-%d %H:%M} UTC; the evidence is being read")


def _header(inv: Investigation) -> None:
    s = inv.snap.summary
    st.title(md_text(s.title))
    st.caption(f"{md_text(s.provider)} · {plural(len(inv.analysis.groups), 'duplicate group')} · "
               f"worst layer {s.worst_layer or '—'} · money at risk "
               f"{md_text(money(s.money_at_risk))} · saved "
               f"{s.created_at:%Y-%m-%d %H:%M} UTC · id `{s.id}`")
    _workflow(inv)
    for warning in inv.snap.warnings:
        if warning.get("source") == LIVE_ERRORS:
            st.warning(md_text(str(warning.get("detail", ""))))
    _warnings(inv)
    if inv.failure is not None:
        rows = len(inv.analysis.timeline)
        st.error(f"{md_text(inv.failure.describe())}.  \nWhat loaded is kept and saved "
                 f"({rows:,} rows from {md_text(', '.join(s.sources) or 'no source')}): the "
                 "Timeline tab shows it, Export downloads it. No verdict could be made.")


def _workflow(inv: Investigation) -> None:
    """The incident's status and owner, as the team sets them (shown in the incidents list)."""
    s = inv.snap.summary
    owner = f"owner {md_text(s.owner)}" if s.owner else "no owner"
    with st.expander(f"Status: {s.status} · {owner}"):
        with st.form("workflow"):
            left, right = st.columns(2)
            status = left.selectbox("Status", STATUSES, index=STATUSES.index(s.status)
                                    if s.status in STATUSES else 0)
            name = right.text_input("Owner", value=s.owner or "", max_chars=200)
            if not st.form_submit_button("Save status"):
                return
        try:
            inv.store.set_workflow(s.id, status=status, owner=name)
        except InvestigationNotFound:
            st.error("The status was not saved: the investigation was deleted.")
            return
        except StoreError as exc:
            st.error(store_problem(exc, "The status was not saved") + " Try again later.")
            return
        go(inv.state)


def _warnings(inv: Investigation) -> None:
    """What loading and analysis skipped or doubted, as the command line prints it."""
    warnings = inv.analysis.warnings
    if not warnings:
        return
    with st.expander(f"Warnings ({len(warnings)}): what loading and analysis skipped or "
                     "doubted"):
        for w in warnings[:WARNINGS_SHOWN]:
            st.markdown(f"- **{md_text(w.source)}**: {md_text(w.detail)}")
        if len(warnings) <= WARNINGS_SHOWN:
            return  # every one is listed: no grid
        st.caption(f"… and {len(warnings) - WARNINGS_SHOWN:,} more: all of them in the table "
                   "below and in the JSON export.")
        # drawn when asked: Streamlit's grid is 1.2 MB of script that a new browser would
        # fetch and parse before a shared link's page settles, for a table most never open
        if st.toggle(f"Show all {len(warnings):,} as a table",
                     key=f"warnings_table:{inv.inv_id}"):
            table = pd.DataFrame([{"source": w.source, "warning": w.detail} for w in warnings])
            st.dataframe(shown_frame(table), hide_index=True, width="stretch")


def _pick_duplicate(inv: Investigation) -> None:
    dups, key = inv.dups, inv.key
    if not key or not len(dups):
        return
    # plain text, but a bidi override in an id would still reorder the option; the customer
    # and amount tell one customer's duplicate from another's on a busy day, the tool which call
    labels = {k: f"{layer} · gap {fmt_gap(gap)} · {visible(customer or 'no customer')} · "
                 f"{visible(amount or 'no amount')} · "
                 + (f"{tool} · " if (tool := tool_words(tool_name)) else "") + visible(second)
              for k, layer, gap, customer, amount, tool_name, second in zip(
                  dups["key"], dups["layer"], dups["gap_seconds"].astype(float),
                  dups["customer"], dups["amount"], dups["tool_name"], dups["second"],
                  strict=True)}
    picker = f"duplicate:{key}"
    st.selectbox("Duplicate", list(labels), index=list(labels).index(key), key=picker,
                 format_func=labels.__getitem__,
                 on_change=lambda: show(inv.state.at_duplicate(str(st.session_state[picker]))))
