"""Incidents: the saved investigations, searchable, filterable by layer, each a link."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from twice.formats import money
from twice.layers import Layer
from twice.store.links import ViewState, link
from twice.web.cache import get_store
from twice.web.text import md_text, shown_frame


def render() -> None:
    store = get_store()
    st.title("Incidents")
    left, right = st.columns([3, 1])
    search = left.text_input("Search", placeholder="title, customer, thread, request id, tag")
    layer = right.selectbox("Worst layer", ["any", *[x.value for x in Layer]])
    rows = store.list(search=search, layer=None if layer == "any" else layer)
    if not rows:
        st.info("No investigation matches.")
        return
    table = pd.DataFrame([{
        "title": s.title, "when": s.created_at, "provider": s.provider, "groups": s.groups,
        "worst layer": s.worst_layer or "—", "money at risk": money(s.money_at_risk),
        "open": link("", ViewState(inv=s.id, tab="verdict")),
    } for s in rows])
    st.dataframe(shown_frame(table), hide_index=True, width="stretch", column_config={
        "open": st.column_config.LinkColumn("open", display_text="open")})
    for s in rows:
        layer = f" · worst layer **{s.worst_layer}**" if s.worst_layer else " · no duplicate"
        st.markdown(f"- [{md_text(s.title)}]({link('', ViewState(inv=s.id, tab='verdict'))})"
                    f"{layer} · {s.groups} groups · money at risk "
                    f"{md_text(money(s.money_at_risk))}")
