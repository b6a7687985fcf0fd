"""Timeline: one lane per source on a shared time axis, the selected call's attempts joined."""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from twice.clocks import THIN_LABEL, THIN_WHY
from twice.engine import Analysis
from twice.web.figures import timeline_figure
from twice.web.nav import go
from twice.web.tabs.context import Investigation
from twice.web.text import md_text

TIMELINE_POINTS = 5_000  # individual WebGL points per view; the rest is aggregated


def render(inv: Investigation) -> None:
    state = inv.state
    raw = st.toggle("Raw source clocks (off: clock-aligned)", value=state.clock == "raw")
    if raw != (state.clock == "raw"):
        go(dataclasses.replace(state, clock="raw" if raw else "aligned"))
    window = (state.t0, state.t1) if state.t0 is not None and state.t1 is not None else None
    fig = _timeline_figure(inv.inv_id, inv.analysis, inv.group.group_id if inv.group else None,
                           not raw, window)
    st.plotly_chart(fig, width="stretch", key="timeline")
    st.caption(f"{len(inv.analysis.timeline):,} rows; past {TIMELINE_POINTS:,} points the lanes "
               "that do not fit are drawn as counts per time bucket (attempts are always "
               "points). Narrow the window with t0/t1 in the URL to see every row.")
    for o in inv.analysis.offsets:
        st.caption(f"Clock: {md_text(o.describe())}."
                   + (f" :orange-badge[{THIN_LABEL}] {md_text(THIN_WHY)}" if o.thin else ""))


@st.cache_resource(max_entries=64)
def _timeline_figure(inv_id: str, _analysis: Analysis, group: str | None, aligned: bool,
                     window: tuple[pd.Timestamp, pd.Timestamp] | None) -> object:
    # a snapshot never changes, so its figures are cached by id and view
    return timeline_figure(_analysis, selected_group=group, aligned=aligned, window=window,
                           max_points=TIMELINE_POINTS)
