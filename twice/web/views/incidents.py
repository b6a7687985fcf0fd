"""Incidents: the saved investigations, searchable, filterable by layer, each a link; a search
also lists the duplicates it names (a customer, an amount, a charge, PaymentIntent or request
id), each a link to that duplicate's verdict, not the investigation's newest one."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from twice.formats import money
from twice.layers import Layer
from twice.store import DuplicateHit, Store
from twice.store.links import ViewState, link
from twice.verdict import fmt_gap
from twice.web.cache import get_store
from twice.web.text import md_text, shown_frame


def duplicate_link(hit: DuplicateHit) -> str:
    """The hit's own duplicate, on its verdict."""
    state = ViewState(inv=hit.investigation.id, tab="verdict")
    return link("", state.at_duplicate(hit.duplicate.dup_key))


def render() -> None:
    store = get_store()
    st.title("Incidents")
    left, right = st.columns([3, 1])
    search = left.text_input(
        "Search", placeholder="customer, amount (49.00 or 4900), charge, PaymentIntent or "
                              "request id, title, thread, tag")
    layer = right.selectbox("Worst layer", ["any", *[x.value for x in Layer]])
    # an investigation a search found through one of its duplicates opens on that duplicate
    opens: dict[str, str] = {}
    if search.strip():
        for hit in reversed(_duplicates(store, search, None if layer == "any" else layer)):
            opens[hit.investigation.id] = duplicate_link(hit)
    rows = store.list(search=search, layer=None if layer == "any" else layer)
    if not rows:
        st.info("No investigation matches.")
        return
    if search.strip():
        st.subheader("Investigations")
    table = pd.DataFrame([{
        "title": s.title, "when": s.created_at, "provider": s.provider, "groups": s.groups,
        "worst layer": s.worst_layer or "—", "money at risk": money(s.money_at_risk),
        "open": opens.get(s.id) or link("", ViewState(inv=s.id, tab="verdict")),
    } for s in rows])
    st.dataframe(shown_frame(table), hide_index=True, width="stretch", column_config={
        "open": st.column_config.LinkColumn("open", display_text="open")})
    for s in rows:
        layer_text = f" · worst layer **{s.worst_layer}**" if s.worst_layer else " · no duplicate"
        target = opens.get(s.id) or link("", ViewState(inv=s.id, tab="verdict"))
        st.markdown(f"- [{md_text(s.title)}]({target})"
                    f"{layer_text} · {s.groups} groups · money at risk "
                    f"{md_text(money(s.money_at_risk))}")


def _duplicates(store: Store, search: str, layer: str | None) -> list[DuplicateHit]:
    """The duplicates the search names, each a link to its verdict; returns them."""
    hits = [h for h in store.search_duplicates(search)
            if layer is None or h.duplicate.layer == layer]
    st.subheader("Duplicates")
    if not hits:
        st.caption("No duplicate's attempts hold every word of the search.")
        return hits
    st.caption(f"{len(hits)} duplicate{'s' * (len(hits) != 1)} hold every word of the search.")
    for h in hits:
        d = h.duplicate
        amount = money({d.currency or "?": d.amount}) if d.amount is not None else "no amount"
        when = f"{d.at:%Y-%m-%d %H:%M:%S} UTC" if d.at is not None else "no time"
        st.markdown(f"- [{md_text(d.customer or 'no customer')} · {md_text(amount)} · "
                    f"**{md_text(d.layer)}** · gap {fmt_gap(d.gap_seconds)}]"
                    f"({duplicate_link(h)}) · {when} · in {md_text(h.investigation.title)}")
    return hits
