"""One customer's duplicates (`?customer=cus_...`): every saved duplicate that charged them,
across investigations, newest first, each a link to its verdict; what was taken twice, what
was refunded, and by which layers. A search that names a customer with several duplicates
links here (issue 20: "the customer's page of payments when it is several").

The page lists the duplicates the store saved with each investigation (their verdicts then),
not every payment of the customer: the store keeps a timeline per investigation, and a page
that read them all would cost a full scan of every saved timeline.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd
import streamlit as st

from twice.formats import amount_text, money
from twice.store import DuplicateHit
from twice.verdict import fmt_gap
from twice.web.cache import get_store
from twice.web.text import md_text, plural, shown_frame
from twice.web.views.incidents import duplicate_link, duplicate_list

CUSTOMER_MAX = 200  # characters of a customer id a link may name


def render() -> None:
    customer = st.query_params.get("customer", "").strip()[:CUSTOMER_MAX]
    st.title(f"Customer {md_text(customer)}" if customer else "Customer")
    if not customer:
        st.info("Name a customer: search for their id on the incidents list.")
        return
    hits = get_store().customer_duplicates(customer)
    if not hits:
        st.info("No saved investigation has a duplicate that charged this customer.")
        return
    taken, refunded = taken_twice(hits)
    layers = Counter(h.duplicate.layer for h in hits)
    cols = st.columns(4)
    cols[0].metric("Duplicates", f"{len(hits):,}")
    cols[1].metric("Charged twice", money(taken))
    cols[2].metric("Refunded", f"{sum(h.duplicate.refunded is True for h in hits)} of "
                               f"{len(hits)}")
    cols[3].metric("Investigations", f"{len({h.investigation.id for h in hits}):,}")
    st.caption(" · ".join(f"{plural(n, 'duplicate')} by **{md_text(layer)}**"
                          for layer, n in layers.most_common())
               + (f" · refunded since: {money(refunded)}" if refunded else ""))
    duplicate_list(hits)
    st.dataframe(shown_frame(customer_table(hits)), hide_index=True, width="stretch",
                 column_config={"open": st.column_config.LinkColumn("open", display_text="open")})


def taken_twice(hits: list[DuplicateHit]) -> tuple[dict[str, int], dict[str, int]]:
    """The second attempts' amounts per currency, all and those refunded (minor units)."""
    taken: dict[str, int] = {}
    refunded: dict[str, int] = {}
    for h in hits:
        d = h.duplicate
        if d.amount is None:
            continue
        code = d.currency or "?"
        taken[code] = taken.get(code, 0) + d.amount
        if d.refunded:
            refunded[code] = refunded.get(code, 0) + d.amount
    return dict(sorted(taken.items())), dict(sorted(refunded.items()))


def customer_table(hits: list[DuplicateHit]) -> pd.DataFrame:
    """The page's data twin: one row a duplicate."""
    return pd.DataFrame([{
        "when (UTC)": h.duplicate.at, "amount": amount_text(h.duplicate.amount,
                                                            h.duplicate.currency),
        "tool": h.duplicate.tool, "layer": h.duplicate.layer,
        "gap": fmt_gap(h.duplicate.gap_seconds),
        "refunded": {True: "yes", False: "no", None: "not known"}[h.duplicate.refunded],
        "investigation": h.investigation.title, "open": duplicate_link(h),
    } for h in hits])
