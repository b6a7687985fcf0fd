"""Sweeps: every stored sweep (`?sweep=all`), and one sweep's duplicates (`?sweep=ID`),
each with a link that opens its saved investigation on the verdict. A sweep of a folder whose
manifest says a source failed (or cannot be read) is partial, as `twice sweep` says: its status
in the list, a warning and the failed sources on its page.

Evidence text (customer ids, sources, a failed source's error) is shown in dataframes through
`shown_frame` (control and bidi characters named, not obeyed), or inside markdown through
`md_text` (no markup, no links), never as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from twice.formats import money
from twice.store import Store, StoreError, valid_id
from twice.store.links import ViewState, link
from twice.store.sweeps import SweepGroup, SweepRecord, get_sweep, list_sweeps, sweep_groups
from twice.sweep.report import partial, totals
from twice.web.cache import get_store
from twice.web.problems import store_problem
from twice.web.text import md_text, plural, shown_frame


def sweep_link(sweep_id: str) -> str:
    return f"?sweep={sweep_id}"


def group_frame(groups: Sequence[SweepGroup]) -> pd.DataFrame:
    """One row per duplicate group, with a relative link to its investigation's verdict."""
    return pd.DataFrame([{
        "first attempt (UTC)": g.first_at.strftime("%Y-%m-%d %H:%M:%S"),
        "layer": g.layer or "—",
        "confidence": g.confidence,
        "money at risk": money(g.money_at_risk) + (" (key held)" if g.protected else ""),
        "customer": g.customer or "—",
        "tool": g.tool_name or "—",
        "attempts": g.attempts,
        "open": link("", ViewState(inv=g.investigation_id, group=g.group_id, tab="verdict")),
    } for g in groups], columns=["first attempt (UTC)", "layer", "confidence", "money at risk",
                                 "customer", "tool", "attempts", "open"])


def status(record: SweepRecord) -> str:
    """`finished` or `unfinished`, and `partial` when a swept folder's source failed."""
    done = "finished" if record.finished else "unfinished"
    return f"{done} · partial" if partial(record) else done


def _all(store: Store) -> None:
    st.title("Sweeps")
    st.caption("Every duplicate in a month of evidence: `twice sweep DIR --chunk 1d` runs one "
               "(resumable), and its duplicates are saved here as investigations.")
    sweeps = list_sweeps(store)
    if not sweeps:
        st.info("No sweep stored yet. Run `twice sweep` on exported evidence.")
        return
    table = pd.DataFrame([{
        "sweep": s.id, "started (UTC)": s.created_at.strftime("%Y-%m-%d %H:%M"),
        "from": s.params["since"], "until": s.params["until"],
        "chunks": f"{s.chunks_done}/{s.chunks_total}", "groups": s.group_count,
        "money at risk": money(totals(sweep_groups(store, s.id))["money_at_risk"]),
        "status": status(s), "open": sweep_link(s.id),
    } for s in sweeps])
    partial_ids = [s.id for s in sweeps if partial(s)]
    if partial_ids:
        st.warning(f"Partial: {len(partial_ids)} sweep(s) read a folder whose sources did not "
                   f"all load ({md_text(', '.join(partial_ids))}); open one to see which "
                   "failed.")
    st.dataframe(shown_frame(table), hide_index=True, width="stretch", column_config={
        "open": st.column_config.LinkColumn("open", display_text="open")})


def sweep_caption(record: SweepRecord, t: dict) -> str:
    """The line under a sweep's title: its window, chunks, state, groups and money at risk."""
    state = "finished" if record.finished else "unfinished: resume with `twice sweep --resume`"
    return (f"{record.params['since']} .. {record.params['until']} · "
            f"{record.chunks_done}/{record.chunks_total} chunks · {state} · "
            f"{plural(t['groups'], 'duplicate group')} · "
            f"money at risk {money(t['money_at_risk'])}")


def _one(store: Store, sweep_id: str) -> None:
    record = get_sweep(store, sweep_id)
    if record is None:
        st.error(f"Sweep `{sweep_id}` was not found.")
        st.link_button("All sweeps", sweep_link("all"))
        return
    groups = sweep_groups(store, sweep_id)
    t = totals(groups)
    st.title(f"Sweep {record.id}")
    st.caption(sweep_caption(record, t))
    if partial(record):
        errors = [str(e) for e in record.params.get("errors", [])]
        st.warning("Partial: a swept folder says some of its sources failed (its "
                   "`twice-manifest.json`), or its manifest could not be read; duplicates "
                   "those sources held are not here.")
        for error in errors:
            st.markdown(f"- failed: {md_text(error)}")
    by_layer = pd.DataFrame([{"layer": layer, "groups": row["groups"],
                              "money at risk": money(row["money_at_risk"])}
                             for layer, row in t["by_layer"].items()],
                            columns=["layer", "groups", "money at risk"])
    st.subheader("By layer")
    st.dataframe(shown_frame(by_layer), hide_index=True)
    st.subheader("Duplicate groups")
    st.dataframe(shown_frame(group_frame(groups)), hide_index=True, width="stretch",
                 column_config={"open": st.column_config.LinkColumn(
                     "open", display_text="open verdict")})
    with st.expander("Sources and warnings"):
        sources = pd.DataFrame(record.params["sources"], columns=["connector", "source", "options"])
        st.dataframe(shown_frame(sources.astype({"options": str})), hide_index=True)
        if record.warnings:
            st.dataframe(shown_frame(pd.DataFrame(record.warnings)), hide_index=True)
    st.link_button("All sweeps", sweep_link("all"))


def render() -> None:
    """`?sweep=all` (or no `sweep`) lists the sweeps; `?sweep=ID` shows one."""
    store = get_store()
    sweep_id = st.query_params.get("sweep")
    try:
        if isinstance(sweep_id, str) and sweep_id != "all" and valid_id(sweep_id):
            _one(store, sweep_id)
        else:
            _all(store)
    except StoreError as exc:
        st.error(store_problem(exc, "The sweeps cannot be read"))
