"""Incidents: the saved investigations, searchable, filterable by layer, each a link; a search
also lists the duplicates it names (a customer, an amount, a charge, PaymentIntent or request
id), each a link to that duplicate's verdict, not the investigation's newest one. Each
incident shows when it happened (its attempts, sortable), its status and owner (set on its page)
and whether its duplicates were refunded (the provider's refund events)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from twice.formats import money
from twice.layers import Layer
from twice.store import DuplicateHit, Store, Summary
from twice.store.links import ViewState, link
from twice.store.model import STATUSES
from twice.verdict import fmt_gap
from twice.web.cache import get_store
from twice.web.text import md_text, shown_frame


def duplicate_link(hit: DuplicateHit) -> str:
    """The hit's own duplicate, on its verdict."""
    state = ViewState(inv=hit.investigation.id, tab="verdict")
    return link("", state.at_duplicate(hit.duplicate.dup_key))


# how the list may be sorted (the store's orders)
SORTS = {"incident": "Incident time, newest first", "incident_oldest": "Incident time, oldest "
         "first", "saved": "Saved, newest first"}


def refunded_text(s: Summary) -> str:
    """Whether the incident's duplicates were refunded, in words."""
    if s.refunded is None:
        return "not known"
    if not s.duplicates:
        return "no duplicate"
    if s.refunded == s.duplicates:
        return "refunded" if s.duplicates == 1 else f"all {s.duplicates} refunded"
    return "not refunded" if not s.refunded else f"{s.refunded} of {s.duplicates} refunded"


def time_range(s: Summary) -> str:
    if s.first_at is None or s.last_at is None:
        return "not known"
    end = f"{s.last_at:%H:%M:%S}" if s.last_at.date() == s.first_at.date() \
        else f"{s.last_at:%Y-%m-%d %H:%M:%S}"
    return f"{s.first_at:%Y-%m-%d %H:%M:%S} – {end} UTC"


def render() -> None:
    store = get_store()
    st.title("Incidents")
    left, mid, right, sort_col = st.columns([3, 1, 1, 1])
    search = left.text_input(
        "Search", placeholder="customer, amount (49.00 or 4900), charge, PaymentIntent or "
                              "request id, title, thread, tag")
    layer = mid.selectbox("Worst layer", ["any", *[x.value for x in Layer]])
    status = right.selectbox("Status", ["any", *STATUSES])
    order = sort_col.selectbox("Sort by", list(SORTS), format_func=SORTS.__getitem__)
    # an investigation a search found through one of its duplicates opens on that duplicate
    opens: dict[str, str] = {}
    if search.strip():
        for hit in reversed(_duplicates(store, search, None if layer == "any" else layer)):
            opens[hit.investigation.id] = duplicate_link(hit)
    rows = store.list(search=search, layer=None if layer == "any" else layer,
                      status=None if status == "any" else status, order=order)
    if not rows:
        st.info("No investigation matches.")
        return
    if search.strip():
        st.subheader("Investigations")
    table = pd.DataFrame([{
        "title": s.title, "from": s.first_at, "to": s.last_at, "status": s.status,
        "owner": s.owner or "—", "refunded": refunded_text(s), "groups": s.groups,
        "worst layer": s.worst_layer or "—", "money at risk": money(s.money_at_risk),
        "provider": s.provider, "saved": s.created_at,
        "open": opens.get(s.id) or link("", ViewState(inv=s.id, tab="verdict")),
    } for s in rows])
    st.dataframe(shown_frame(table), hide_index=True, width="stretch", column_config={
        "open": st.column_config.LinkColumn("open", display_text="open")})
    for s in rows:
        layer_text = f" · worst layer **{s.worst_layer}**" if s.worst_layer else " · no duplicate"
        target = opens.get(s.id) or link("", ViewState(inv=s.id, tab="verdict"))
        owner = f" · owner {md_text(s.owner)}" if s.owner else " · no owner"
        st.markdown(f"- [{md_text(s.title)}]({target}) · {time_range(s)} · **{s.status}**"
                    f"{owner}{layer_text} · {s.groups} group{'s' * (s.groups != 1)} · money "
                    f"at risk {md_text(money(s.money_at_risk))} · {refunded_text(s)}")


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
        refund = {True: " · refunded", False: " · not refunded", None: ""}[d.refunded]
        st.markdown(f"- [{md_text(d.customer or 'no customer')} · {md_text(amount)} · "
                    f"**{md_text(d.layer)}** · gap {fmt_gap(d.gap_seconds)}]"
                    f"({duplicate_link(h)}) · {when}{refund} · in "
                    f"{md_text(h.investigation.title)}")
    return hits
