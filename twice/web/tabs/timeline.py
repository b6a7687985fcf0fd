"""Timeline: one lane per source on a shared time axis, the selected call's attempts joined."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st

from twice.clocks import THIN_LABEL, THIN_WHY
from twice.engine import Analysis
from twice.formats import utc
from twice.web.figures import SVG_MAX_POINTS, TIMELINE_META, timeline_figure, waterfall_figure
from twice.web.nav import go, show
from twice.web.records import RECORDS_PER_LINE, point_records, show_records
from twice.web.tabs.context import Investigation
from twice.web.text import md_text

TIMELINE_POINTS = 2_500  # points per view (SVG up to figures.SVG_MAX_POINTS); the rest counted

# A pan or zoom of the timeline (plotly's `plotly_relayout`: the pan tool, a scroll, the zoom
# buttons) sent to the page as the x axis' new range: the page puts it in the URL (t0/t1).
# Streamlit's chart reports only selections (a drawn box), so this listens on the chart itself:
# only on the timeline (its layout's `meta`, `TIMELINE_META`), never on the page's other charts.
# While the page draws the timeline again, the waterfall below it can be the page's first chart
# for a moment, and a zoom of the waterfall must not become the timeline's window.
_RANGE_JS = """
export default function(component) {
  const { setTriggerValue } = component;
  let stopped = false;
  const heard = new WeakSet();  // this listener's charts (the page may keep a chart it drew)
  const listen = () => {
    if (stopped) return;
    for (const el of document.querySelectorAll('.js-plotly-plot')) {
      if (heard.has(el) || typeof el.on !== 'function' || !el.layout
          || el.layout.meta !== 'TIMELINE_META') continue;
      heard.add(el);
      el.setAttribute('data-twice-range', 'listening');  // a pan or zoom from now on is heard
      el.on('plotly_relayout', ev => {
        const lo = ev['xaxis.range[0]'], hi = ev['xaxis.range[1]'];
        const range = lo !== undefined && hi !== undefined ? [lo, hi] : ev['xaxis.range'];
        if (Array.isArray(range) && range.length === 2)
          setTriggerValue('range', String(range[0]) + '|' + String(range[1]));
      });
      // a click on a point: its customdata (a timeline row, or an attempt's id)
      el.on('plotly_click', ev => {
        const data = (ev.points || []).map(p => p.customdata).filter(d => d !== undefined);
        if (data.length) setTriggerValue('click', JSON.stringify(data));
      });
    }
    setTimeout(listen, 100);  // the chart is drawn again on every run: listen on the new one
  };
  listen();
  return () => { stopped = true; };
}
""".replace("TIMELINE_META", TIMELINE_META)
_range_listener = st.components.v2.component("twice_timeline_range", js=_RANGE_JS)


def render(inv: Investigation) -> None:
    state = inv.state
    raw = state.clock == "raw"
    toggle = f"clock:{state.clock}"
    st.toggle("Raw source clocks (off: clock-aligned)", value=raw, key=toggle,
              on_change=lambda: show(dataclasses.replace(
                  state, clock="raw" if st.session_state[toggle] else "aligned")))
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
    moved = _range_listener(key="timeline_range", on_range_change=lambda: None,
                            on_click_change=lambda: None)
    clicked = f"clicked:{inv.inv_id}:{inv.key}"  # the last click's points, kept for this call
    if isinstance(getattr(moved, "click", None), str):
        st.session_state[clicked] = clicked_points(moved.click)
    panned = panned_window(getattr(moved, "range", None))
    if panned is not None and panned != window:
        go(dataclasses.replace(state, t0=panned[0], t1=panned[1]))
    _range_control(inv, fig, window)
    if window is not None and st.button("Fit to the call again"):
        go(dataclasses.replace(state, t0=None, t1=None))
    rows = len(inv.analysis.timeline)
    near = window is None and rows > SVG_MAX_POINTS
    st.caption(f"{rows:,} rows{'; opened on the rows near the call' if near else ''}; past "
               f"{TIMELINE_POINTS:,} points the lanes that do not fit are drawn as counts per "
               "time bucket (attempts are always points). Click a point to see its record. "
               "Draw a box over a stretch of time to "
               "zoom to it, pan or zoom out (the chart's toolbar) or type a time range: the "
               "window goes in the link (t0/t1), and every row in it is drawn.")
    for o in inv.analysis.offsets:
        st.caption(f"Clock: {md_text(o.describe())}."
                   + (f" :orange-badge[{THIN_LABEL}] {md_text(THIN_WHY)}" if o.thin else ""))
    _clicked(inv, st.session_state.get(clicked, []))
    _waterfall(inv, aligned=not raw)


def clicked_points(value: str) -> list[int | str]:
    """The customdata of the points a click sent (JSON from the page: hostile until read)."""
    try:
        data = json.loads(value)
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    return [d for d in data if isinstance(d, int | str) and not isinstance(d, bool)
            ][:RECORDS_PER_LINE]


def _clicked(inv: Investigation, points: Sequence[object]) -> None:
    """The records of the points clicked on the timeline, as their sources wrote them."""
    rows = point_records(inv.analysis, inv.group, points)
    if rows.empty:
        return
    st.subheader("Clicked record", anchor="clicked-record")
    show_records(inv.analysis, rows.head(RECORDS_PER_LINE))


def _waterfall(inv: Investigation, aligned: bool) -> None:
    """The selected call's spans as bars, each under its parent (as Jaeger draws a trace)."""
    if inv.group is None:
        return
    fig = waterfall_figure(inv.analysis, inv.group, aligned=aligned)
    if not fig.data:
        return
    st.subheader("Spans of the selected call", anchor="spans")
    st.plotly_chart(fig, width="stretch", key="waterfall")
    st.caption("Each span from its start to its end, under the span that started it (its "
               "parent: a row at the left edge has none in the evidence); the attempts' own "
               "spans are outlined.")


def _range_control(inv: Investigation, fig: Any, window: tuple[pd.Timestamp, pd.Timestamp] | None
                   ) -> None:
    """From / To (UTC) boxes: the view's range, to read or to type; Show puts it in the URL."""
    shown = window or _figure_range(fig)
    with st.form("time_range"):
        left, right, button = st.columns([2, 2, 1], vertical_alignment="bottom")
        lo = left.text_input("From (UTC)", value=_shown_time(shown[0]) if shown else "")
        hi = right.text_input("To (UTC)", value=_shown_time(shown[1]) if shown else "")
        if not button.form_submit_button("Show this range"):
            return
    typed = typed_window(lo, hi)
    if isinstance(typed, str):
        st.error(typed)
        return
    if typed != window:
        go(dataclasses.replace(inv.state, t0=typed[0], t1=typed[1]))


def _figure_range(fig: Any) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    rng = getattr(getattr(getattr(fig, "layout", None), "xaxis", None), "range", None)
    if not rng or len(rng) != 2:
        return None
    try:
        return utc(pd.Timestamp(rng[0])), utc(pd.Timestamp(rng[1]))
    except (TypeError, ValueError):
        return None


def _shown_time(at: pd.Timestamp) -> str:
    return f"{utc(at):%Y-%m-%d %H:%M:%S.%f}"[:-3]  # milliseconds, as the link keeps them


def typed_window(lo: str, hi: str) -> tuple[pd.Timestamp, pd.Timestamp] | str:
    """The window typed in the From / To boxes (UTC unless a time zone is written), or what is
    wrong with it, in words."""
    try:
        start, end = (utc(pd.Timestamp(v.strip())) for v in (lo, hi))
    except (TypeError, ValueError):
        return ("The time range was not changed: give From and To as dates and times, e.g. "
                "2025-03-04 14:04:50 (UTC).")
    if start is pd.NaT or end is pd.NaT or not end > start:
        return "The time range was not changed: To must be after From."
    return start.floor("ms"), end.ceil("ms")


def panned_window(value: object) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    """The x range a pan or zoom sent ("lo|hi", plotly's UTC times), if it is one."""
    if not isinstance(value, str) or value.count("|") != 1:
        return None
    lo, hi = value.split("|")
    window = typed_window(lo, hi)
    return None if isinstance(window, str) else window


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
                           max_points=TIMELINE_POINTS, near_view=True)
