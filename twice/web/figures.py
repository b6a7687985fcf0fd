"""The investigation's figures, as pure functions: an Analysis in, a plotly Figure (or a table) out.

No Streamlit here: the pages call these and render what comes back, and tests check the figures'
data without a browser. The timeline has to stay responsive on 50k+ rows, so its traces are built
with column operations only (no per-row Python).
"""

from __future__ import annotations

import hashlib
import html
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from twice.engine import Analysis, Group
from twice.formats import INVISIBLE, amount_text, iso, utc, visible
from twice.layers import LAYERS, Band, Bands, Layer, usual_suspects
from twice.store.links import DuplicateKey
from twice.timeline import Kind

# one colour per layer, from the layers table
LAYER_COLORS: dict[str, str] = {layer.value: LAYERS[layer].colour for layer in Layer}

BAND_LABELS: dict[Band, str] = {
    Band.SECONDS: "seconds",
    Band.TENS_OF_SECONDS: "tens of seconds",
    Band.MINUTES: "minutes … key retention",
    Band.BEYOND_RETENTION: "beyond key retention",
}
_BAND_FILLS: dict[Band, str] = {
    Band.SECONDS: "rgba(0,114,178,0.07)",
    Band.TENS_OF_SECONDS: "rgba(230,159,0,0.09)",
    Band.MINUTES: "rgba(213,94,0,0.07)",
    Band.BEYOND_RETENTION: "rgba(120,120,120,0.10)",
}
# A gap of 0 s (a proxy resending within the provider's clock resolution) has no place on a log
# axis: such gaps are drawn at this floor and their hover text says so.
GAP_FLOOR_S = 0.01

DUPLICATE_COLUMNS = ["key", "group_id", "first", "second", "gap_seconds", "band", "layer",
                     "confidence", "protected", "tool_name", "thread_id", "at", "customer",
                     "amount"]

# Timeline lanes, top to bottom: the provider's view first, then the agent's from the wire inwards.
# One row per kind of record: its lane's name, marker and colour, the same in every
# investigation (a lane is never coloured by the order it appears in).
@dataclass(frozen=True)
class Lane:
    name: str
    symbol: str
    colour: str  # Okabe-Ito and Tol's muted: none of them a layer's colour (twice.layers)


LANE_TABLE: dict[str, Lane] = {
    Kind.PROVIDER_REQUEST.value: Lane("provider requests", "diamond", "#0072B2"),
    Kind.PROVIDER_EVENT.value: Lane("provider events", "circle", "#56B4E9"),
    Kind.HTTP_SPAN.value: Lane("HTTP spans", "square", "#009E73"),
    Kind.TOOL_SPAN.value: Lane("tool spans", "square", "#117733"),
    Kind.TOOL_RESULT.value: Lane("tool results", "triangle-left", "#882255"),
    Kind.TOOL_CALL.value: Lane("tool calls", "triangle-right", "#44AA99"),
    Kind.CHECKPOINT.value: Lane("checkpoints", "circle", "#999933"),
    Kind.QUEUE_RECEIVE.value: Lane("queue receives", "star", "#332288"),
}
LANES: dict[str, str] = {kind: lane.name for kind, lane in LANE_TABLE.items()}
# the ring around the selected call's records: drawn in ink, over every lane's colour
SELECTED_RING = "#000000"
# how far apart records at the same time in the same lane are drawn (lane heights: 1)
SPREAD_STEP = 0.12
SPREAD_MAX = 0.38
# the timeline opens on the selected call: its attempts, and this share of their span (at
# least CONTEXT_MIN_S) on each side; without one, on the bulk of the rows (QUANTILE to
# 1 - QUANTILE), so a stray record weeks away does not squeeze everything else into a line
CONTEXT_SHARE = 0.25
CONTEXT_MIN_S = 30.0
QUANTILE = 0.02
# What the hover of a timeline point shows, in this order (label, column).
_HOVER_FIELDS = [
    ("source", "source"), ("request id", "request_id"), ("idempotency key", "idempotency_key"),
    ("tool_call_id", "tool_call_id"), ("tool", "tool_name"), ("thread", "thread_id"),
    ("span id", "span_id"), ("event", "event_type"), ("object", "object_id"),
    ("status", "status"), ("outcome", "outcome"), ("delivery", "delivery_count"),
    ("worker", "worker"), ("step", "step"), ("name", "name"),
]
AGGREGATE_BUCKETS = 240
# at most this many markers are drawn as SVG (any browser); more go to WebGL (fast, needs a GPU or
# a software GL): a few thousand SVG markers still pan and hover smoothly
SVG_MAX_POINTS = 3_000
# a large timeline opened without a window carries points this many view widths either side
NEAR_VIEWS = 2
TIMELINE_META = "twice-timeline"  # the timeline's layout.meta: the chart the page listens on
SELECTED_NAME = "selected group"
ATTEMPTS_LINE_NAME = "selected group: attempts"
AGGREGATE_NAME = "other rows (count per time bucket)"


# --- evidence text in a figure -----------------------------------------------------------------

# plotly draws a subset of HTML in hover text, tick labels, trace names and titles (`<a href>`,
# `<span style>`, `<br>`, and `<extra>` in a hover): evidence text goes in as entities, which
# plotly turns back into the characters after reading the tags. It decodes &amp; &lt; &gt; and
# numeric entities, not &quot;, so quotes are numeric.
_ENTITIES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"})
_MARKUP = "[&<>\"']"


def plot_text(value: object) -> str:
    """Evidence text as plotly text: shown as typed, its markup never drawn, its control and bidi
    characters named (`<U+202E>`)."""
    return visible(str(value)).translate(_ENTITIES)


def plot_texts(values: pd.Series) -> pd.Series:
    """`plot_text` of a column (missing values stay missing); only the values that need it go
    through Python, so a 50k-row timeline stays fast."""
    text = values.astype("string")
    needs = (text.str.contains(INVISIBLE.pattern, regex=True)
             | text.str.contains(_MARKUP, regex=True)).fillna(False).astype(bool)
    if needs.any():
        text = text.where(~needs, text[needs].map(plot_text))
    return text


# --- duplicates and the gap chart --------------------------------------------------------------

def duplicates_frame(analysis: Analysis) -> pd.DataFrame:
    """One row per duplicate (second and later attempts of a logical call), newest group first."""
    rows = []
    for g in analysis.groups:
        # the records, not `g.attempts`: slicing a frame per group costs ~1 ms, on thousands
        by_id = {str(r["attempt_id"]): r for r in g.records}
        at = {k: r["at"] for k, r in by_id.items()}
        for d in g.duplicates:
            second = by_id.get(d.second, {})
            rows.append({
                "key": str(DuplicateKey(g.group_id, d.second)), "group_id": g.group_id,
                "first": d.first,
                "second": d.second, "gap_seconds": float(d.gap_seconds), "band": d.band.value,
                "layer": d.layer.value, "confidence": float(d.confidence),
                "protected": bool(d.protected), "tool_name": g.tool_name,
                "thread_id": g.thread_id, "at": at.get(d.second, pd.NaT),
                "customer": _text(second.get("subject")),
                "amount": amount_text(second.get("amount"), second.get("currency")),
            })
    frame = pd.DataFrame(rows, columns=DUPLICATE_COLUMNS)
    if frame.empty:
        return frame.astype({"gap_seconds": float, "confidence": float, "protected": bool})
    return frame


def _band_edges(bands: Bands, max_gap: float) -> list[tuple[Band, float, float]]:
    # the outer bands reach past the axis range, so the shading covers the whole plot
    right = max(bands.retention * 10, max_gap * 3) * 10
    return [
        (Band.SECONDS, GAP_FLOOR_S / 20, bands.seconds),
        (Band.TENS_OF_SECONDS, bands.seconds, bands.tens_of_seconds),
        (Band.MINUTES, bands.tens_of_seconds, bands.retention),
        (Band.BEYOND_RETENTION, bands.retention, right),
    ]


def _jitter(keys: pd.Series) -> np.ndarray:
    """A stable vertical offset per key in [-1, 1] (the same point stays put between reruns)."""
    digests = [int(hashlib.sha256(k.encode()).hexdigest()[:8], 16) for k in keys.astype(str)]
    return np.asarray(digests, dtype=float) / 0xFFFFFFFF * 2 - 1


def _fmt_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{s / 60:.3g} min"
    return f"{s / 3600:.3g} h"


def gaps_figure(dups: pd.DataFrame, bands: Bands | None = None,
                selected: str | None = None) -> go.Figure:
    """Every duplicate's gap on a log axis over the bands where each layer's timing lands.

    One trace per verdict layer; protected duplicates (no second effect) are hollow; each point's
    customdata is its duplicate key, so a click or selection names the duplicate.
    """
    bands = bands or Bands()
    fig = go.Figure()
    gaps = pd.to_numeric(dups["gap_seconds"], errors="coerce").astype(float).clip(lower=0)
    max_gap = float(gaps.max()) if len(gaps) else 0.0
    lo, hi = GAP_FLOOR_S / 2, max(bands.retention * 10, max_gap * 3)
    edges = _band_edges(bands, max_gap)
    for row, (band, x0, x1) in enumerate(edges):
        fig.add_vrect(x0=x0, x1=x1, fillcolor=_BAND_FILLS[band], line_width=0, layer="below",
                      name=band.value)
        fig.add_annotation(_band_label(band, row, len(edges), (x0, x1), (lo, hi)))
    by_group = bool(dups["group_id"].nunique() <= 40) if len(dups) else True
    # the group ids are category labels on the axis: plotly draws markup in those too
    y_all = plot_texts(dups["group_id"]) if by_group else pd.Series(
        _jitter(dups["key"]), index=dups.index)
    for layer, color in LAYER_COLORS.items():
        part = dups[dups["layer"] == layer]
        if part.empty:
            continue
        drawn = gaps[part.index].clip(lower=GAP_FLOOR_S)
        is_sel = (part["key"] == selected).to_numpy()
        protected = part["protected"].astype(bool).to_numpy()
        floor_note = np.where(gaps[part.index].to_numpy() < GAP_FLOOR_S,
                              f" (drawn at {GAP_FLOOR_S} s)", "")
        text = ("<b>" + part["layer"].astype(str) + "</b> · gap "
                + gaps[part.index].map(_fmt_seconds) + floor_note
                + "<br>" + plot_texts(part["first"]) + " → " + plot_texts(part["second"])
                + "<br>confidence " + part["confidence"].map("{:.2f}".format)
                + np.where(protected, " · protected (no second effect)", " · second effect")
                + "<br>group " + plot_texts(part["group_id"])
                + " · tool " + plot_texts(part["tool_name"]).fillna("?"))
        fig.add_trace(go.Scatter(
            x=drawn.to_numpy(), y=y_all[part.index].to_numpy(), mode="markers", name=layer,
            legendgroup=layer, customdata=part["key"].to_numpy(), text=text.to_numpy(),
            hovertemplate="%{text}<extra></extra>",
            marker={
                "color": color,
                "symbol": np.where(protected, "circle-open", "circle").tolist(),
                "size": np.where(is_sel, 20, 11).tolist(),
                "line": {"color": np.where(is_sel, "#000000", color).tolist(),
                         "width": np.where(is_sel, 3, np.where(protected, 2, 0.5)).tolist()},
                "opacity": 1.0,
            },
        ))
    fig.update_xaxes(type="log", title="gap between attempts (s, log scale)",
                     range=[math.log10(lo), math.log10(hi)])
    if by_group:
        fig.update_yaxes(type="category", title="logical call (group)")
    else:
        fig.update_yaxes(visible=False, range=[-1.5, 1.5])
    # Streamlit turns click-selection off while dragmode is "select"/"lasso": zoom keeps a click
    # on a point a selection event (the app opens that duplicate's verdict).
    # the legend under the plot, so a phone's width is the plot's; the band labels in rows above
    fig.update_layout(clickmode="event+select", dragmode="zoom", hovermode="closest",
                      legend={"title": {"text": "verdict layer"}, "orientation": "h",
                              "y": -0.25, "yanchor": "top"},
                      margin={"t": 40 + BAND_ROW_PX * len(edges)},
                      title={"text": "Gaps between attempts of one logical call",
                             "yref": "container", "y": 1, "yanchor": "top", "pad": {"t": 8}})
    return fig


BAND_ROW_PX = 17  # a band label's row above the gaps plot


def band_suspects(band: Band) -> str:
    """The layers whose timing usually lands in `band`, in words."""
    return ", ".join(layer.value.replace("_", " ") for layer in usual_suspects(band))


def _band_label(band: Band, row: int, rows: int, edges: tuple[float, float],
                axis: tuple[float, float]) -> dict[str, object]:
    """A band's name on a row of its own above the plot (labels side by side overprint each
    other on a phone, where a band is 30 px wide), over the band's visible middle, kept inside
    the plot at its ends; the layers it suggests on hover (and under the chart)."""
    lo, hi = (math.log10(v) for v in axis)
    left, right = (min(max(math.log10(v), lo), hi) for v in edges)
    middle = (left + right) / 2
    share = (middle - lo) / (hi - lo)
    x, anchor = (lo, "left") if share < 0.2 else (hi, "right") if share > 0.8 else \
        (middle, "center")
    return {"x": x, "xref": "x", "xanchor": anchor, "y": 1, "yref": "paper",
            "yanchor": "bottom", "yshift": 4 + BAND_ROW_PX * (rows - 1 - row),
            "text": f"<b>{BAND_LABELS[band]}</b>", "showarrow": False,
            "font": {"size": 11}, "bgcolor": _BAND_FILLS[band].rsplit(",", 1)[0] + ",0.35)",
            "hovertext": f"{BAND_LABELS[band]}: usually {band_suspects(band)}",
            "name": band.value}


# --- the timeline ------------------------------------------------------------------------------

def _nonnull(values: pd.Series) -> set[str]:
    return set(values.dropna().astype(str))


def attempt_rows(timeline: pd.DataFrame, attempts: pd.DataFrame) -> pd.Series:
    """Which timeline rows record one of `attempts`: its provider request and events, its HTTP and
    tool spans, its tool call and result, and the queue receives of its thread."""
    kind = timeline["kind"]
    request = timeline["request_id"].isin(_nonnull(attempts["request_id"]))
    spans = _nonnull(attempts["http_span_id"]) | _nonnull(attempts["tool_span_id"]) \
        if "http_span_id" in attempts else set()
    span = kind.isin([Kind.HTTP_SPAN.value, Kind.TOOL_SPAN.value]) \
        & timeline["span_id"].isin(spans)
    call = kind.isin([Kind.TOOL_CALL.value, Kind.TOOL_RESULT.value]) \
        & timeline["tool_call_id"].isin(_nonnull(attempts["tool_call_id"]))
    receive = (kind == Kind.QUEUE_RECEIVE.value) \
        & timeline["thread_id"].isin(_nonnull(attempts["thread_id"]))
    return (request | span | call | receive).fillna(False).astype(bool)


def _utc_naive(times: pd.Series) -> pd.Series:
    return times.dt.tz_convert("UTC").dt.tz_localize(None)


def _hover(rows: pd.DataFrame, lane: pd.Series, x: pd.Series) -> pd.Series:
    text = "<b>" + lane.astype(str) + "</b> " + x.dt.strftime("%H:%M:%S.%f").str[:-3]
    for label, col in _HOVER_FIELDS:
        values = rows[col]
        text = text + ("<br>" + label + ": " + plot_texts(values)).where(values.notna(), "")
    return text


def _lane_trace(rows: pd.DataFrame, lane: pd.Series, x: pd.Series, y: pd.Series, kind: str,
                scatter: type[go.Scatter] | type[go.Scattergl]) -> go.Scatter | go.Scattergl:
    info = LANE_TABLE[kind]
    return scatter(
        x=x.to_numpy(), y=y.to_numpy(), mode="markers", name=info.name, legendgroup=kind,
        customdata=rows.index.to_numpy(), text=_hover(rows, lane, x).to_numpy(),
        hovertemplate="%{text}<extra></extra>",
        marker={"symbol": info.symbol, "size": 7, "opacity": 0.8, "color": info.colour,
                "line": {"width": 0}},
    )


def lane_positions(lane: pd.Series, x: pd.Series, lanes: list[str]) -> pd.Series:
    """Each row's height: its lane's (the first lane on top, one unit apart), records at the
    same time in the same lane spread around it so each can be seen and hovered."""
    base = (len(lanes) - 1 - pd.Categorical(lane, categories=lanes).codes).astype(float)
    if not len(lane):
        return pd.Series(base, index=lane.index, dtype=float)
    keys = pd.DataFrame({"lane": lane.to_numpy(), "x": x.to_numpy()}, index=lane.index)
    rank = keys.groupby(["lane", "x"], sort=False).cumcount().to_numpy()
    size = keys.groupby(["lane", "x"], sort=False)["x"].transform("size").to_numpy()
    offset = np.clip((rank - (size - 1) / 2) * SPREAD_STEP, -SPREAD_MAX, SPREAD_MAX)
    return pd.Series(base + offset, index=lane.index)


def fitted_range(x: pd.Series, focus: pd.Series | None = None
                 ) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    """The time range the timeline opens on: the selected call's attempts (`focus`) with
    context on both sides, else the bulk of the rows; robust to a stray record weeks away.
    None: nothing to fit."""
    times = (focus if focus is not None and focus.notna().any() else x).dropna()
    if times.empty:
        return None
    if focus is not None and focus.notna().any():
        lo, hi = times.min(), times.max()
    else:
        lo, hi = times.quantile(QUANTILE), times.quantile(1 - QUANTILE)
    pad = max((hi - lo) * CONTEXT_SHARE, pd.Timedelta(seconds=CONTEXT_MIN_S))
    return pd.Timestamp(lo - pad), pd.Timestamp(hi + pad)


def _aggregate_trace(x: pd.Series, lane: pd.Series, lanes: list[str],
                     lo: pd.Timestamp, hi: pd.Timestamp) -> go.Heatmap:
    """Per-lane row counts per time bucket, drawn as a density strip behind the points."""
    span_ns = max(int((hi - lo).value), 1)
    width_ns = max(span_ns // AGGREGATE_BUCKETS, 1)
    n_buckets = span_ns // width_ns + 1
    bucket = ((x - lo).to_numpy().astype("timedelta64[ns]").astype(np.int64) // width_ns)
    bucket = np.clip(bucket, 0, n_buckets - 1)
    lane_idx = pd.Categorical(lane, categories=lanes).codes
    counts = np.zeros((len(lanes), n_buckets), dtype=np.int64)
    np.add.at(counts, (lane_idx, bucket), 1)
    z = np.where(counts > 0, counts.astype(float), np.nan)
    centers = lo + pd.to_timedelta(np.arange(n_buckets) * width_ns + width_ns // 2, unit="ns")
    heights = [len(lanes) - 1 - i for i in range(len(lanes))]
    return go.Heatmap(
        x=pd.DatetimeIndex(centers).to_numpy(), y=heights, z=z, name=AGGREGATE_NAME,
        text=[[name] * n_buckets for name in lanes],
        colorscale="Greys", zmin=0, showscale=False, opacity=0.55, showlegend=True,
        hovertemplate="%{text}: %{z} rows near %{x}<extra>aggregated</extra>", xgap=0, ygap=4,
    )


def _attempt_anchors(group: Group, aligned: bool) -> tuple[pd.Series, pd.Series]:
    """Where each attempt of a group sits on the timeline: time, and the lane that saw it."""
    att = group.attempts
    col = "at" if aligned or "at_raw" not in att else "at_raw"
    ids = att["attempt_id"].astype(str)
    lane = pd.Series(LANES[Kind.PROVIDER_REQUEST.value], index=att.index, dtype=object)
    lane = lane.where(~ids.str.startswith("span:"), LANES[Kind.TOOL_SPAN.value])
    lane = lane.where(~ids.str.startswith("call:"), LANES[Kind.TOOL_CALL.value])
    return _utc_naive(att[col]), lane


def timeline_figure(analysis: Analysis, selected_group: str | None = None, aligned: bool = True,
                    window: tuple[pd.Timestamp, pd.Timestamp] | None = None,
                    max_points: int = 20_000, webgl: bool = True,
                    near_view: bool = False) -> go.Figure:
    """Every source's rows on one time axis, one lane per kind of record.

    Up to `SVG_MAX_POINTS` drawn points the markers are SVG, which every browser draws (a browser
    without WebGL, e.g. a VM or a remote desktop with the GPU off, shows plotly's "WebGL is not
    supported" instead of WebGL traces); past it they are WebGL, which stays interactive, unless
    `webgl` is False (the HTML report: its script policy forbids the eval WebGL's shaders need).

    Over `max_points` rows in the window, lanes that do not fit the budget are drawn as counts
    per time bucket; rows that are attempts of any group (and the selected group's rows) are
    always drawn as individual points.

    `near_view` (the web app, which draws a pan or zoom again as a window of its own): opened
    without a window on more than `SVG_MAX_POINTS` rows, the figure holds the rows within
    `NEAR_VIEWS` view widths of the opened view (and the selected call's): the browser is sent
    and draws what can be seen, not a day of hover text; zoomed out, the page draws the rest.
    """
    tl = analysis.timeline
    t_col = "at_aligned" if aligned else "at"
    times = tl[t_col].fillna(tl["at"])
    in_window = pd.Series(True, index=tl.index)
    if window is not None:
        lo_w, hi_w = utc(window[0]), utc(window[1])
        in_window = (times >= lo_w) & (times <= hi_w)
    rows = tl[in_window & tl["kind"].isin(list(LANES))]
    x = _utc_naive(times[rows.index])
    lane = rows["kind"].map(LANES)

    group = next((g for g in analysis.groups if g.group_id == selected_group), None)
    grouped = analysis.attempts[analysis.attempts["group_id"].notna()]
    keep = attempt_rows(rows, grouped)
    selected_mask = attempt_rows(rows, group.attempts) if group is not None \
        else pd.Series(False, index=rows.index)
    keep |= selected_mask

    individual = pd.Series(True, index=rows.index)
    aggregated_lanes: list[str] = []
    focus = _attempt_anchors(group, aligned)[0] if group is not None else None
    view = fitted_range(x, focus) if near_view and window is None \
        and len(rows) > SVG_MAX_POINTS else None
    if view is not None:  # the rows near the opened view, and the selected call's
        pad = (view[1] - view[0]) * NEAR_VIEWS
        near = x.between(view[0] - pad, view[1] + pad) | selected_mask
        rows, x, lane = rows[near], x[near], lane[near]
        keep, selected_mask = keep[near], selected_mask[near]
        individual = individual[near]
    if len(rows) > max_points:
        # smallest lanes first: sparse evidence (receives, spans) stays visible as points
        budget = max(max_points - int(keep.sum()), 0)
        sizes = rows.loc[~keep, "kind"].value_counts().sort_values(kind="stable")
        fits = sizes.cumsum() <= budget
        point_kinds = list(sizes[fits].index)
        aggregated_lanes = [LANES[k] for k in sizes[~fits].index]
        individual = keep | rows["kind"].isin(point_kinds)

    n_drawn = int(individual.sum()) + (2 * int(selected_mask.sum()) if group is not None else 0)
    scatter = go.Scattergl if webgl and n_drawn > SVG_MAX_POINTS else go.Scatter
    fig = go.Figure()
    present = [k for k in LANES if (rows["kind"] == k).any()]
    lanes = [LANES[k] for k in present]
    y = lane_positions(lane, x, lanes)
    if aggregated_lanes:
        rest = ~individual
        lo_t = x.min() if window is None else _utc_naive(pd.Series([lo_w])).iloc[0]
        hi_t = x.max() if window is None else _utc_naive(pd.Series([hi_w])).iloc[0]
        fig.add_trace(_aggregate_trace(x[rest], lane[rest], lanes, lo_t, hi_t))
    for kind in present:
        part = individual & (rows["kind"] == kind)
        if part.any():
            fig.add_trace(_lane_trace(rows[part], lane[part], x[part], y[part], kind, scatter))
    if group is not None and selected_mask.any():
        sel = selected_mask
        fig.add_trace(scatter(
            x=x[sel].to_numpy(), y=y[sel].to_numpy(), mode="markers", name=SELECTED_NAME,
            customdata=rows.index[sel].to_numpy(),
            text=_hover(rows[sel], lane[sel], x[sel]).to_numpy(),
            hovertemplate="%{text}<extra>selected</extra>",
            # an open symbol is drawn in the marker's colour (its line colour is not used)
            marker={"size": 15, "color": SELECTED_RING,
                    "line": {"color": SELECTED_RING, "width": 2.5}, "symbol": "circle-open"},
        ))
    if group is not None:
        ax, alane = _attempt_anchors(group, aligned)
        inside = pd.Series(True, index=ax.index) if window is None else \
            (ax >= _utc_naive(pd.Series([lo_w])).iloc[0]) & \
            (ax <= _utc_naive(pd.Series([hi_w])).iloc[0])
        color = LAYER_COLORS.get(group.worst_layer.value if group.worst_layer else "unknown")
        heights = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}
        fig.add_trace(scatter(
            x=ax[inside].to_numpy(), y=alane[inside].map(heights).to_numpy(),
            mode="lines+markers",
            name=ATTEMPTS_LINE_NAME, customdata=group.attempts["attempt_id"][inside].to_numpy(),
            text=("attempt " + plot_texts(group.attempts["attempt_id"][inside])).to_numpy(),
            hovertemplate="%{text}<br>%{x}<extra></extra>",
            line={"color": color, "width": 3}, marker={"size": 16, "color": color,
                                                        "symbol": "x"},
        ))
    # lanes on a numeric axis, named by their ticks: records at one time spread within a lane
    fig.update_yaxes(type="linear", tickmode="array",
                     tickvals=[len(lanes) - 1 - i for i in range(len(lanes))], ticktext=lanes,
                     range=[-0.6, len(lanes) - 0.4], zeroline=False, showgrid=True,
                     title=None, automargin=True)  # room for the longest lane name
    fig.update_xaxes(title=f"time (UTC, {'clock-aligned' if aligned else 'raw source clocks'})")
    if window is not None:
        fig.update_xaxes(range=[_utc_naive(pd.Series([lo_w])).iloc[0],
                                _utc_naive(pd.Series([hi_w])).iloc[0]])
    else:  # opened on the selected call (else the bulk of the rows); zoom out to see all
        fitted = fitted_range(x, focus)
        if fitted is not None:
            fig.update_xaxes(range=list(fitted))
    # a drawn box is a selection the page turns into the link's window (t0/t1)
    fig.update_layout(hovermode="closest", dragmode="select", selectdirection="h",
                      meta=TIMELINE_META, height=120 + 45 * max(len(lanes), 1),
                      legend={"orientation": "h", "y": -0.2}, margin={"t": 30})
    return fig


# --- two attempts side by side -----------------------------------------------------------------

_COMPARE_FIELDS: list[tuple[str, str]] = [
    ("time (raw)", "at_raw"), ("time (aligned)", "at"), ("request id", "request_id"),
    ("idempotency key", "idempotency_key"), ("tool_call_id", "tool_call_id"),
    ("thread_id", "thread_id"), ("HTTP span id", "http_span_id"),
    ("tool span id", "tool_span_id"), ("worker", "worker"), ("status", "status"),
    ("effect", "effect"), ("object id", "object_id"), ("amount", "amount"),
    ("currency", "currency"), ("customer", "subject"), ("sources", "source"),
]


def _text(value: object) -> str | None:
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, pd.Timestamp):
        return iso(value, "milliseconds")
    return str(value)


def _body(timeline: pd.DataFrame, attempt: pd.Series) -> str | None:
    """The request body the provider logged, else the tool call's arguments."""
    for column, kind in (("request_id", Kind.PROVIDER_REQUEST), ("tool_call_id", Kind.TOOL_CALL)):
        value = attempt.get(column)
        if isinstance(value, str):
            found = timeline.loc[(timeline[column] == value) & (timeline["kind"] == kind.value)
                                 & timeline["args"].notna(), "args"]
            if len(found):
                return str(found.iloc[0])
    return None


# --- the raw records of a call ----------------------------------------------------------------

def call_records(analysis: Analysis, group: Group) -> pd.DataFrame:
    """The timeline rows that record the group's attempts (`attempt_rows`), oldest first, with
    `label`: lane · time · where its source wrote it (file and line)."""
    tl = analysis.timeline
    rows = tl[attempt_rows(tl, group.attempts)].sort_values("at", kind="stable")
    return rows.assign(label=record_labels(rows))


def record_labels(rows: pd.DataFrame) -> pd.Series:
    """Each timeline row named for a picker: lane · time · where its source wrote it."""
    lane = rows["kind"].map(LANES).fillna(rows["kind"]).astype(str)
    when = rows["at"].map(lambda t: iso(t, "milliseconds")).astype(str)
    return lane + " · " + when + " · " + rows["origin"].fillna(rows["source"]).astype(str)


def record_text(row: pd.Series) -> str:
    """One record as JSON text: every field its source filled in (the body or arguments parsed
    back into JSON when they are), control and bidi characters named."""
    record: dict[str, object] = {}
    for col, value in row.items():
        text = _text(value)
        if text is None or col in ("label",):
            continue
        if col == "args":
            try:
                record[str(col)] = json.loads(text)
                continue
            except ValueError:
                pass
        if col == "livemode" and text in ("0", "1"):  # as Stripe writes it
            record[str(col)] = text == "1"
            continue
        record[str(col)] = value if isinstance(value, int | float) and not isinstance(
            value, bool) else text
    return visible(json.dumps(record, indent=2, ensure_ascii=False, default=str))


# What every attempt of one logical call must share: one intended call charges one customer
# one amount in one currency. Attempts that differ are a grouping to doubt, or a changed call.
AGREE_FIELDS: list[tuple[str, str]] = [("customer", "subject"), ("amount", "amount"),
                                       ("currency", "currency")]


def disagreements(group: Group) -> dict[str, list[str]]:
    """The fields that should agree across a group's attempts and do not: field -> the values
    seen (in attempt order, each once; a missing value is not a disagreement)."""
    out: dict[str, list[str]] = {}
    for label, col in AGREE_FIELDS:
        seen = [v for v in (_text(r.get(col)) for r in group.records) if v is not None]
        values = list(dict.fromkeys(seen))
        if len(values) > 1:
            out[label] = values
    return out


def attempt_comparison(analysis: Analysis, group_id: str, first: str, second: str) -> pd.DataFrame:
    """Two attempts field by field: index = field, columns first, second, same (NA: neither)."""
    group = next((g for g in analysis.groups if g.group_id == group_id), None)
    pool = group.attempts if group is not None else analysis.attempts
    ids = pool["attempt_id"].astype(str)
    picked = []
    for attempt_id in (first, second):
        match = pool[ids == attempt_id]
        picked.append(match.iloc[0] if len(match) else pd.Series(dtype=object))
    a, b = picked
    rows = []
    for label, col in [*_COMPARE_FIELDS, ("args / body", "")]:
        va = _body(analysis.timeline, a) if not col else _text(a.get(col))
        vb = _body(analysis.timeline, b) if not col else _text(b.get(col))
        same = pd.NA if va is None and vb is None else va == vb
        rows.append({"field": label, "first": va, "second": vb, "same": same})
    out = pd.DataFrame(rows).set_index("field")
    out["same"] = out["same"].astype("boolean")
    return out


# Fields of the comparison one intended call must share (`AGREE_FIELDS`, and what it was
# asked to do): a difference there is marked as a doubt on the grouping, not as a retry's trace.
MUST_AGREE = frozenset({"customer", "amount", "currency", "args / body", "tool_call_id"})
DIFF_STYLE = (
    "<style>.twice-diff{border-collapse:collapse;width:100%;font-size:.85em}"
    ".twice-diff th,.twice-diff td{border:1px solid #ddd;padding:.25em .5em;text-align:left;"
    "vertical-align:top;white-space:pre-wrap;overflow-wrap:anywhere}"
    ".twice-diff td.differ{background:#fff3cd}"
    ".twice-diff td.differ.must-agree{background:#f8d7da;font-weight:600}"
    ".twice-diff td.missing{color:#888}</style>")


def comparison_html(table: pd.DataFrame) -> str:
    """The two attempts as an HTML diff (`attempt_comparison`'s table): one row a field, the
    cells that differ marked (class `differ`, and `must-agree` where one intended call cannot
    differ) with a "≠" a reader without colour sees too. Every value is escaped."""
    rows = []
    for field, row in table.iterrows():
        same = row["same"]
        differ = same is not pd.NA and not bool(same)
        classes = ["differ"] if differ else []
        if differ and field in MUST_AGREE:
            classes.append("must-agree")
        cells = []
        for col in ("first", "second"):
            value = row[col]
            missing = not isinstance(value, str)
            cls = " ".join([*classes, "missing"] if missing else classes)
            text = "—" if missing else html.escape(visible(value))
            cells.append(f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>")
        mark = "≠" if differ else ("=" if same is not pd.NA else "")
        rows.append(f'<tr data-field="{html.escape(str(field))}"><th>{html.escape(str(field))}'
                    f'</th>{"".join(cells)}<td>{mark}</td></tr>')
    return (f'{DIFF_STYLE}<table class="twice-diff"><thead><tr><th>field</th><th>first</th>'
            f'<th>second</th><th></th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


# --- spans of one call, as a waterfall ---------------------------------------------------------

WATERFALL_MAX_SPANS = 200  # the call's traces' first spans; a trace bigger than that is cut


def call_spans(analysis: Analysis, group: Group) -> pd.DataFrame:
    """The spans of the traces the group's records are in, each under its parent, depth first
    (children by start time): `depth` is how deep it nests (0: its parent is not in the
    evidence), `order` its row in the waterfall."""
    records = call_records(analysis, group)
    traces = set(records["trace_id"].dropna().astype(str)) if len(records) else set()
    tl = analysis.timeline
    spans = tl[tl["trace_id"].isin(traces) & tl["span_id"].notna()].sort_values(
        "at", kind="stable").drop_duplicates("span_id")
    ids = set(spans["span_id"].astype(str))
    children: dict[str | None, list[int]] = {}
    for index, parent in zip(spans.index, spans["parent_span_id"], strict=True):
        key = str(parent) if isinstance(parent, str) and parent in ids else None
        children.setdefault(key, []).append(index)
    ordered: list[tuple[int, int]] = []
    stack = [(i, 0) for i in reversed(children.get(None, []))]
    while stack and len(ordered) < WATERFALL_MAX_SPANS:
        index, depth = stack.pop()
        ordered.append((index, depth))
        span_id = str(spans.at[index, "span_id"])
        stack += [(c, depth + 1) for c in reversed(children.get(span_id, []))]
    out = spans.loc[[i for i, _ in ordered]].copy()
    out["depth"] = [d for _, d in ordered]
    out["order"] = range(len(out))
    return out


def waterfall_figure(analysis: Analysis, group: Group, aligned: bool = True) -> go.Figure:
    """The call's spans as bars from start to end, each row under its parent and indented by
    its depth (as Jaeger draws a trace), in its lane's colour; the attempts' own spans
    outlined. Names and ids are evidence: drawn as plain text."""
    spans = call_spans(analysis, group)
    fig = go.Figure()
    if spans.empty:
        return fig
    start = spans["at_aligned" if aligned else "at"]
    end = spans["end"].where(spans["end"].notna(), spans["at"])
    length_ms = ((end - spans["at"]).dt.total_seconds() * 1000).clip(lower=0)
    own = set(group.attempts["http_span_id"].dropna().astype(str)) | set(
        group.attempts["tool_span_id"].dropna().astype(str)) \
        if "http_span_id" in group.attempts else set()
    name = plot_texts(spans["name"].fillna(spans["kind"]))
    labels = [("\u2003" * min(int(d), 12)) + str(n)  # indented by depth (an em space a level)
              for d, n in zip(spans["depth"], name, strict=True)]
    hover = ("<b>" + name.astype(str) + "</b> · " + spans["kind"].astype(str)
             + "<br>" + length_ms.map(lambda v: f"{v:,.1f} ms") + " from "
             + _utc_naive(start).dt.strftime("%H:%M:%S.%f").str[:-3]
             + "<br>span " + plot_texts(spans["span_id"]).astype(str)
             + ("<br>request " + plot_texts(spans["request_id"])).fillna("")
             + ("<br>outcome " + plot_texts(spans["outcome"])).fillna(""))
    for kind in dict.fromkeys(spans["kind"].astype(str)):
        part = (spans["kind"] == kind).to_numpy()
        lane = LANE_TABLE.get(kind, Lane(kind, "square", "#777777"))
        mine = spans["span_id"][part].astype(str).isin(own).to_numpy()
        fig.add_trace(go.Bar(
            orientation="h", name=lane.name, y=spans["order"][part].to_numpy(),
            base=_utc_naive(start[part]).to_numpy(),
            # a span without an end, or of no length, still shows as a sliver
            x=np.maximum(length_ms[part].to_numpy(dtype=float), 0.0), text=None,
            hovertext=hover[part].to_numpy(), hoverinfo="text",
            marker={"color": lane.colour,
                    "line": {"color": np.where(mine, SELECTED_RING, lane.colour).tolist(),
                             "width": np.where(mine, 2.5, 0).tolist()}},
        ))
    fig.update_xaxes(type="date", title=f"time (UTC, {'clock-aligned' if aligned else 'raw'})")
    fig.update_yaxes(tickmode="array", tickvals=spans["order"].tolist(),
                     ticktext=labels, autorange="reversed", automargin=True,
                     title=None)
    fig.update_layout(barmode="overlay", bargap=0.35, height=90 + 28 * len(spans),
                      legend={"orientation": "h", "y": -0.25, "yanchor": "top"},
                      margin={"t": 20}, hovermode="closest")
    return fig
