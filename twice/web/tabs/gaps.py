"""Gaps against the bands: every duplicate's gap on a log axis; a click opens its verdict."""

from __future__ import annotations

from typing import Any

import streamlit as st

from twice.verdict import fmt_gap
from twice.web.figures import BAND_LABELS, band_suspects, gaps_figure
from twice.web.nav import go
from twice.web.tabs.context import Investigation
from twice.web.text import md_text


def render(inv: Investigation) -> None:
    if inv.dups.empty:
        st.info("No logical call executed more than once.")
        return
    event = st.plotly_chart(gaps_figure(inv.dups, bands=inv.snap.options.bands,
                                        selected=inv.key), width="stretch",
                            key="gaps", on_select="rerun", selection_mode="points")
    selection: dict[str, Any] = dict(event or {}).get("selection") or {}  # type: ignore[call-overload]
    for point in selection.get("points", []):
        picked = point.get("customdata")
        picked = picked[0] if isinstance(picked, list) else picked
        if isinstance(picked, str) and picked != inv.key:
            go(inv.state.at_duplicate(picked, tab="verdict"))
    st.caption("Click a point to open its verdict. The bands, and the layers whose timing "
               "usually lands in each: " + "; ".join(
                   f"**{label}**: {band_suspects(band)}" for band, label in BAND_LABELS.items())
               + ".")
    if inv.key is not None:
        row = inv.dups[inv.dups["key"] == inv.key].iloc[0]
        st.markdown(f"**Selected:** {md_text(str(row['second']))} — **{row['layer']}** "
                    f"(confidence {row['confidence']:.2f}, gap {fmt_gap(row['gap_seconds'])})")
