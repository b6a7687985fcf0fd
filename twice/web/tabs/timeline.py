"""Timeline: one lane per source on a shared time axis, the selected call's attempts joined."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import streamlit as st

from twice.clocks import THIN_LABEL, THIN_WHY
from twice.engine import Analysis
from twice.formats import utc
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
    # a box drawn on the chart is the window in the URL (t0/t1): the link shows that zoom
    # keyed by the window: a box drawn on one window is not read again on the next
    event = st.plotly_chart(fig, width="stretch", key=f"timeline:{window}", on_select="rerun",
                            selection_mode=("box",))
    picked = boxed_window(dict(event or {}).get("selection") or {})  # type: ignore[call-overload]
    if picked is not None and picked != window:
        go(dataclasses.replace(state, t0=picked[0], t1=picked[1]))
    if window is not None and st.button("Fit to the call again"):
        go(dataclasses.replace(state, t0=None, t1=None))
    st.caption(f"{len(inv.analysis.timeline):,} rows; past {TIMELINE_POINTS:,} points the lanes "
               "that do not fit are drawn as counts per time bucket (attempts are always "
               "points). Draw a box over a stretch of time to zoom to it: the window goes in "
               "the link (t0/t1), and every row in it is drawn.")
    for o in inv.analysis.offsets:
        st.caption(f"Clock: {md_text(o.describe())}."
                   + (f" :orange-badge[{THIN_LABEL}] {md_text(THIN_WHY)}" if o.thin else ""))


def boxed_window(selection: dict[str, Any]) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    """The time range of the box a user drew on the timeline (UTC), if any."""
    for box in selection.get("box") or []:
        xs = box.get("x") if isinstance(box, dict) else None
        if not isinstance(xs, list) or len(xs) != 2:
            continue
        try:
            lo, hi = sorted(utc(pd.Timestamp(x)) for x in xs)
        except (TypeError, ValueError):
            continue
        if hi > lo:
            return lo.floor("ms"), hi.ceil("ms")
    return None


@st.cache_resource(max_entries=64)
def _timeline_figure(inv_id: str, _analysis: Analysis, group: str | None, aligned: bool,
                     window: tuple[pd.Timestamp, pd.Timestamp] | None) -> object:
    # a snapshot never changes, so its figures are cached by id and view
    return timeline_figure(_analysis, selected_group=group, aligned=aligned, window=window,
                           max_points=TIMELINE_POINTS)
