"""Incidents: the saved investigations in one list, searchable, filterable by layer and status,
each a link that opens in this tab and session; a search also lists the duplicates it names (a
customer, an amount, a charge, PaymentIntent or request id), each a link to that duplicate's
verdict, not the investigation's newest one. Each incident shows when it happened (its
attempts, sortable), its status and owner (set on its page) and whether its duplicates were
refunded (the provider's refund events). A new store's bundled samples join the list as the
background import saves them."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from twice.formats import money
from twice.layers import Layer
from twice.store import DuplicateHit, Store, Summary
from twice.store.links import ViewState, link, to_query
from twice.store.model import STATUSES
from twice.web.cache import get_store, sample_import
from twice.web.nav import CUSTOMER, INVESTIGATION, pages
from twice.web.text import duplicate_words, md_text, plural, shown_frame


def duplicate_view(hit: DuplicateHit) -> ViewState:
    """The hit's own duplicate, on its verdict."""
    return ViewState(inv=hit.investigation.id, tab="verdict").at_duplicate(hit.duplicate.dup_key)


def duplicate_link(hit: DuplicateHit) -> str:
    return link("", duplicate_view(hit))


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
                              "request id, tool, title, thread, tag")
    layer = mid.selectbox("Worst layer", ["any", *[x.value for x in Layer]])
    status = right.selectbox("Status", ["any", *STATUSES])
    order = sort_col.selectbox("Sort by", list(SORTS), format_func=SORTS.__getitem__)
    wanted = Wanted(search, None if layer == "any" else layer,
                    None if status == "any" else status, order)
    importing = sample_import()
    running = importing.running  # asked once: an import ending between two asks would leave
    # the caption drawn by this run on the page with no run after it to take it away
    if running:  # a new store's first visit: the samples are analysed meanwhile
        st.caption(f"Analysing the bundled samples ({importing.saved} of "
                   f"{len(importing.folders)} saved): each joins the list when it is saved.")
    _listing(store, wanted)
    if running:
        # the whole page again once another second has passed or all are in. Not a fragment
        # on a timer: with one, Streamlit's browser side threw ("Bad delta path index") on
        # some first visits and the page stayed blank (tests/web/test_hostile.py). A click
        # meanwhile waits for this second to end.
        importing.wait(1.0)
        st.rerun()


@dataclass(frozen=True)
class Wanted:
    """What the list is asked for."""

    search: str
    layer: str | None
    status: str | None
    order: str


def _listing(store: Store, wanted: Wanted) -> None:
    """One list: each incident a link (opened in this tab and session) and what to know of it
    in one line; a search lists the duplicates it names first."""
    # an investigation a search found through one of its duplicates opens on that duplicate
    opens: dict[str, ViewState] = {}
    if wanted.search.strip():
        for hit in reversed(_duplicates(store, wanted.search, wanted.layer)):
            opens[hit.investigation.id] = duplicate_view(hit)
    rows = store.list(search=wanted.search, layer=wanted.layer, status=wanted.status,
                      order=wanted.order)
    if not rows:
        st.info("No investigation matches.")
        return
    st.subheader("Investigations" if wanted.search.strip() else plural(len(rows), "incident"))
    page = pages()[INVESTIGATION]
    for s in rows:
        with st.container(key=f"incident-{s.id}", gap="small"):
            st.page_link(page, label=f":blue[**{md_text(s.title)}**]", help="",
                         query_params=to_query(opens.get(s.id)
                                               or ViewState(inv=s.id, tab="verdict")))
            st.caption(summary_line(s))
    # the list's data twin, made when the button is clicked (as the exports are)
    st.download_button("Download this list (CSV)", lambda: list_csv(rows, opens),
                       file_name="twice-incidents.csv", mime="text/csv", on_click="ignore")


def list_csv(rows: list[Summary], opens: dict[str, ViewState]) -> bytes:
    """The incidents as a table, each cell as a spreadsheet must read it (a title that starts
    like a formula behind a `'`)."""
    table = pd.DataFrame([{
        "title": s.title, "from": s.first_at, "to": s.last_at, "status": s.status,
        "owner": s.owner or "", "worst layer": s.worst_layer or "", "groups": s.groups,
        "duplicates": s.duplicates, "money at risk": money(s.money_at_risk),
        "refunded": refunded_text(s), "provider": s.provider, "saved": s.created_at,
        "link": link("", opens.get(s.id) or ViewState(inv=s.id, tab="verdict")),
    } for s in rows])
    return shown_frame(table).to_csv(index=False).encode("utf-8-sig")


def summary_line(s: Summary) -> str:
    """An incident in one line, as markdown: when it happened, its status and owner, its worst
    layer, groups, money at risk, refunds, provider and when it was saved."""
    owner = f"owner {md_text(s.owner)}" if s.owner else "no owner"
    found = (f"worst layer **{s.worst_layer}** · {plural(s.groups, 'group')} · money at risk "
             f"{md_text(money(s.money_at_risk))} · {refunded_text(s)}") if s.worst_layer \
        else "no duplicate"
    return (f"{time_range(s)} · **{s.status}** · {owner} · {found} · {md_text(s.provider)} · "
            f"saved {s.created_at:%Y-%m-%d %H:%M} UTC")


def _duplicates(store: Store, search: str, layer: str | None) -> list[DuplicateHit]:
    """The duplicates the search names, each a link to its verdict; returns them."""
    hits = [h for h in store.search_duplicates(search)
            if layer is None or h.duplicate.layer == layer]
    st.subheader("Duplicates")
    if not hits:
        st.caption("No duplicate's attempts hold every word of the search.")
        return hits
    st.caption(f"{plural(len(hits), 'duplicate')} hold{'s' * (len(hits) == 1)} every word of "
               "the search.")
    customer = search.strip()
    several = sum(h.duplicate.customer == customer for h in hits)
    if several > 1:  # the search named one customer with several duplicates: their page
        st.page_link(pages()[CUSTOMER], query_params={"customer": customer}, help="",
                     label=f"**{md_text(customer)}**: all {several} duplicates on one page")
    duplicate_list(hits)
    return hits


def duplicate_list(hits: list[DuplicateHit]) -> None:
    """Each duplicate a link to its verdict, named in words, with when, its refund and the
    investigation it is in."""
    page = pages()[INVESTIGATION]
    for i, h in enumerate(hits):
        d = h.duplicate
        when = f"{d.at:%Y-%m-%d %H:%M:%S} UTC" if d.at is not None else "no time"
        refund = {True: " · refunded", False: " · not refunded", None: ""}[d.refunded]
        with st.container(key=f"duplicate-{i}", gap="small"):
            st.page_link(page, help="", query_params=to_query(duplicate_view(h)),
                         label=f":blue[{duplicate_words(d)}]")
            st.caption(f"{when}{refund} · in {md_text(h.investigation.title)}")
