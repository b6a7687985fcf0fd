"""The investigation figures, built from the bundled incidents (and a 60k-row timeline)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import pytest

from twice.connectors import registry
from twice.engine import Analysis, analyze
from twice.layers import Bands, Layer
from twice.timeline import Kind
from twice.web.figures import (
    AGGREGATE_NAME,
    ATTEMPTS_LINE_NAME,
    GAP_FLOOR_S,
    LANE_TABLE,
    LANES,
    LAYER_COLORS,
    NEAR_VIEWS,
    SELECTED_NAME,
    SELECTED_RING,
    attempt_comparison,
    comparison_html,
    duplicates_frame,
    gaps_figure,
    timeline_figure,
)

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
INCIDENTS = sorted(p.name for p in SAMPLES.iterdir() if (p / "truth.json").exists())


@dataclasses.dataclass
class Incident:
    truth: dict[str, Any]
    analysis: Analysis


@pytest.fixture(scope="module")
def incidents() -> dict[str, Incident]:
    out = {}
    for name in INCIDENTS:
        found, _ = registry.scan_folder(SAMPLES / name)
        loaded = registry.load_all([(n, p, {}) for n, p in found])
        out[name] = Incident(json.loads((SAMPLES / name / "truth.json").read_text()),
                             analyze(loaded.rows))
    return out


@pytest.fixture(scope="module")
def all_dups(incidents: dict[str, Incident]) -> pd.DataFrame:
    return pd.concat([duplicates_frame(i.analysis) for i in incidents.values()],
                     ignore_index=True)


def _points(fig: go.Figure) -> dict[str, dict[str, Any]]:
    """Duplicate key -> its marker's trace name, x, symbol, size, outline colour."""
    out = {}
    for trace in fig.data:
        m = trace.marker
        for i, key in enumerate(trace.customdata):
            assert key not in out, f"{key} drawn twice"
            out[key] = {"layer": trace.name, "x": trace.x[i], "symbol": m.symbol[i],
                        "size": m.size[i], "outline": m.line.color[i], "color": m.color}
    return out


def test_incidents_are_bundled() -> None:
    assert {"step_retry", "sdk_retry", "redelivery", "control_renewal"} <= set(INCIDENTS)


def test_duplicates_frame_names_each_incidents_layer(incidents: dict[str, Incident]) -> None:
    for name, inc in incidents.items():
        dups = duplicates_frame(inc.analysis)
        if inc.truth["layer"] == "none":
            assert dups.empty, name
            continue
        assert inc.truth["layer"] in set(dups["layer"]), name
        for row in dups.to_dict("records"):
            assert row["key"] == f"{row['group_id']}:{row['second']}"
            group = next(g for g in inc.analysis.groups if g.group_id == row["group_id"])
            assert row["at"] == group.attempts.set_index("attempt_id").loc[row["second"], "at"]
        assert dups["protected"].any() == inc.truth["protected"], name


def test_gaps_figure_has_one_marker_per_duplicate(all_dups: pd.DataFrame) -> None:
    fig = gaps_figure(all_dups)
    points = _points(fig)
    assert sorted(points) == sorted(all_dups["key"])
    assert fig.layout.xaxis.type == "log"
    for row in all_dups.to_dict("records"):
        p = points[row["key"]]
        assert p["layer"] == row["layer"]
        assert p["color"] == LAYER_COLORS[row["layer"]]
        assert p["x"] == pytest.approx(max(row["gap_seconds"], GAP_FLOOR_S))
        assert p["symbol"] == ("circle-open" if row["protected"] else "circle")
    # a 0 s gap (a resend logged in the same instant) is still drawn, at the floor of the log
    # axis; the gateway sample's own gap is 12 ms since the request log gives milliseconds
    zero = all_dups.copy()
    zero.loc[zero.index[0], "gap_seconds"] = 0.0
    fig0 = gaps_figure(zero)
    drawn = _points(fig0)[zero.iloc[0]["key"]]["x"]
    assert drawn == pytest.approx(GAP_FLOOR_S)
    assert 10 ** fig0.layout.xaxis.range[0] < drawn


def test_gaps_figure_shades_the_bands_with_their_layers(all_dups: pd.DataFrame) -> None:
    for bands in (Bands(), Bands(seconds=5, tens_of_seconds=60, retention=6 * 3600)):
        fig = gaps_figure(all_dups, bands=bands)
        shapes = {s.name: s for s in fig.layout.shapes}
        assert list(shapes) == ["seconds", "tens_of_seconds", "minutes", "beyond_retention"]
        assert shapes["seconds"].x1 == bands.seconds
        assert (shapes["tens_of_seconds"].x0, shapes["tens_of_seconds"].x1) == (
            bands.seconds, bands.tens_of_seconds)
        assert (shapes["minutes"].x0, shapes["minutes"].x1) == (
            bands.tens_of_seconds, bands.retention)
        assert shapes["beyond_retention"].x0 == bands.retention
        assert all(s.yref in ("paper", "y domain") and (s.y0, s.y1) == (0, 1)
                   for s in shapes.values())
        # the band shading spans the whole axis (range is log10 of seconds)
        lo, hi = (10 ** v for v in fig.layout.xaxis.range)
        assert shapes["seconds"].x0 <= lo and shapes["beyond_retention"].x1 >= hi
        labels = {a.name: a for a in fig.layout.annotations}
        assert list(labels) == list(shapes)  # one label a band, each on a row of its own
        assert len({a.yshift for a in labels.values()}) == len(labels)
        assert "sdk retry" in labels["seconds"].hovertext
        assert "gateway retry" in labels["seconds"].hovertext
        assert "step retry" in labels["tens_of_seconds"].hovertext
        assert "redelivery" in labels["minutes"].hovertext
        # inside the axis at both ends
        lo, hi = fig.layout.xaxis.range
        assert all(lo <= a.x <= hi for a in labels.values())


def test_layer_colours_cover_every_layer_and_differ() -> None:
    assert set(LAYER_COLORS) == {layer.value for layer in Layer}
    assert len(set(LAYER_COLORS.values())) == len(LAYER_COLORS)


def test_selected_duplicate_is_highlighted(all_dups: pd.DataFrame) -> None:
    key = all_dups[all_dups["layer"] == "step_retry"]["key"].iloc[0]
    fig = gaps_figure(all_dups, selected=key)
    points = _points(fig)
    others = [p for k, p in points.items() if k != key]
    assert all(points[key]["size"] > p["size"] for p in others)
    assert points[key]["outline"] == "#000000"
    assert all(p["outline"] != "#000000" for p in others)
    assert fig.layout.clickmode == "event+select"
    assert fig.layout.dragmode == "zoom"  # a click must stay a selection in Streamlit
    plain = _points(gaps_figure(all_dups))
    assert len({p["size"] for p in plain.values()}) == 1


def test_gaps_figure_without_duplicates_still_shows_the_bands(
        incidents: dict[str, Incident]) -> None:
    dups = duplicates_frame(incidents["control_renewal"].analysis)
    fig = gaps_figure(dups)
    assert len(fig.data) == 0 and len(fig.layout.shapes) == 4


def _lane_traces(fig: go.Figure) -> dict[str, Any]:
    return {t.name: t for t in fig.data if t.name in set(LANES.values())}


def _attempt_request_rows(analysis: Analysis, group_id: str) -> pd.Index:
    group = next(g for g in analysis.groups if g.group_id == group_id)
    tl = analysis.timeline
    return tl.index[(tl["kind"] == Kind.PROVIDER_REQUEST.value)
                    & tl["request_id"].isin(list(group.attempts["request_id"].dropna()))]


def test_timeline_has_a_lane_per_source_kind(incidents: dict[str, Incident]) -> None:
    analysis = incidents["redelivery"].analysis
    fig = timeline_figure(analysis)
    lanes = _lane_traces(fig)
    assert set(lanes) == set(LANES.values())  # redelivery has every kind, queue receives too
    assert all(t.type == "scatter" for t in fig.data)  # SVG: drawn without WebGL too
    # the first lane on top; each lane's records at its height (spread within it)
    assert list(fig.layout.yaxis.ticktext) == list(LANES.values())
    height = dict(zip(fig.layout.yaxis.ticktext, fig.layout.yaxis.tickvals, strict=True))
    for kind, label in LANES.items():
        trace = lanes[label]
        assert all(abs(y - height[label]) < 0.4 for y in trace.y), label
        assert len(trace.x) == (analysis.timeline["kind"] == kind).sum()
    hover = " ".join(lanes["provider requests"].text)
    assert "request id: req_" in hover and "idempotency key: " in hover


def test_timeline_highlights_the_selected_groups_attempts(incidents: dict[str, Incident]) -> None:
    analysis = incidents["step_retry"].analysis
    group = analysis.groups[0]
    fig = timeline_figure(analysis, selected_group=group.group_id)
    by_name = {t.name: t for t in fig.data}
    selected = by_name[SELECTED_NAME]
    requests = _attempt_request_rows(analysis, group.group_id)
    assert len(requests) >= 2
    assert set(requests) <= set(selected.customdata)
    calls = analysis.timeline.index[analysis.timeline["tool_call_id"].isin(group.tool_call_ids)
                                    & (analysis.timeline["kind"] == Kind.TOOL_CALL.value)]
    assert set(calls) <= set(selected.customdata)
    line = by_name[ATTEMPTS_LINE_NAME]
    assert "lines" in line.mode
    assert list(line.customdata) == list(group.attempts["attempt_id"])
    expected = group.attempts["at"].dt.tz_convert("UTC").dt.tz_localize(None)
    assert [pd.Timestamp(x) for x in line.x] == list(expected)
    # on the raw clocks the attempts sit where the provider's own clock put them
    raw = {t.name: t for t in timeline_figure(analysis, selected_group=group.group_id,
                                              aligned=False).data}[ATTEMPTS_LINE_NAME]
    expected_raw = group.attempts["at_raw"].dt.tz_convert("UTC").dt.tz_localize(None)
    assert [pd.Timestamp(x) for x in raw.x] == list(expected_raw)
    assert SELECTED_NAME not in {t.name for t in timeline_figure(analysis).data}


def test_timeline_window_clips_rows(incidents: dict[str, Incident]) -> None:
    analysis = incidents["step_retry"].analysis
    group = analysis.groups[0]
    t0 = group.attempts["at"].min() - pd.Timedelta(seconds=5)
    t1 = group.attempts["at"].max() + pd.Timedelta(seconds=5)
    fig = timeline_figure(analysis, selected_group=group.group_id, window=(t0, t1))
    naive0, naive1 = t0.tz_localize(None), t1.tz_localize(None)
    drawn = 0
    for trace in fig.data:
        xs = [pd.Timestamp(x) for x in trace.x]
        assert all(naive0 <= x <= naive1 for x in xs), trace.name
        drawn += len(xs) if trace.name in set(LANES.values()) else 0
    inside = analysis.timeline["at_aligned"].between(t0, t1).sum()
    assert drawn == inside < len(analysis.timeline)
    assert [pd.Timestamp(x) for x in fig.layout.xaxis.range] == [naive0, naive1]
    assert set(_attempt_request_rows(analysis, group.group_id)) <= set(
        {t.name: t for t in fig.data}[SELECTED_NAME].customdata)


def enlarged(analysis: Analysis, rows: int) -> Analysis:
    """The incident's timeline plus shifted copies with fresh ids (the copies are no attempts)."""
    tl = analysis.timeline
    copies = [tl]
    for i in range(1, rows // len(tl) + 1):
        c = tl.copy()
        for col in ("at", "at_aligned", "end"):
            c[col] = c[col] + pd.Timedelta(minutes=30 * i)
        for col in ("request_id", "span_id", "tool_call_id", "thread_id", "idempotency_key"):
            c[col] = c[col] + f"-copy{i}"
        copies.append(c)
    return dataclasses.replace(analysis, timeline=pd.concat(copies, ignore_index=True))


def test_big_timeline_aggregates_but_keeps_attempts(incidents: dict[str, Incident]) -> None:
    base = incidents["step_retry"].analysis
    analysis = enlarged(base, 60_000)
    assert len(analysis.timeline) >= 60_000
    group = base.groups[0]
    max_points = 5_000
    fig = timeline_figure(analysis, selected_group=group.group_id, max_points=max_points)
    by_name = {t.name: t for t in fig.data}
    lanes = _lane_traces(fig)
    individual = sum(len(t.x) for t in lanes.values())
    attempt_rows = set(_attempt_request_rows(analysis, group.group_id))
    assert individual <= max_points + 100
    assert all(t.type == "scattergl" for t in lanes.values())  # past SVG_MAX_POINTS: WebGL
    kept = set().union(*(set(t.customdata) for t in lanes.values()))
    assert attempt_rows <= kept  # the attempts are points, never only counts
    assert attempt_rows <= set(by_name[SELECTED_NAME].customdata)
    density = by_name[AGGREGATE_NAME]
    assert density.type == "heatmap"
    counted = sum(v for row in density.z for v in row if v is not None and not math.isnan(v))
    assert counted + individual == len(analysis.timeline)
    # under the budget everything is a point and nothing is aggregated
    small = timeline_figure(base, selected_group=group.group_id, max_points=max_points)
    assert AGGREGATE_NAME not in {t.name for t in small.data}
    assert {t.type for t in small.data} == {"scatter"}


def test_attempt_comparison_of_step_retry(incidents: dict[str, Incident]) -> None:
    inc = incidents["step_retry"]
    group = inc.analysis.groups[0]
    dup = group.duplicates[0]
    table = attempt_comparison(inc.analysis, group.group_id, dup.first, dup.second)
    assert list(table.columns) == ["first", "second", "same"]
    key = table.loc["idempotency key"]
    assert key["first"] and key["second"] and not key["same"]  # a fresh key per re-run
    call = table.loc["tool_call_id"]
    assert call["same"] and call["first"] == inc.truth["duplicate_tool_call_ids"][0]
    objects = table.loc["object id"]
    assert {objects["first"], objects["second"]} == set(inc.truth["payment_intents"])
    assert not objects["same"]
    assert table.loc["amount", "same"] and table.loc["args / body", "same"]
    assert str(table.loc["time (raw)", "first"]).endswith("Z")


def test_the_attempts_diff_marks_what_differs_and_escapes_it(
        incidents: dict[str, Incident]) -> None:
    import re

    inc = incidents["step_retry"]
    group = inc.analysis.groups[0]
    dup = group.duplicates[0]
    table = attempt_comparison(inc.analysis, group.group_id, dup.first, dup.second)
    table.loc["customer", ["second", "same"]] = ["<script>alert(1)</script>\u202e", False]
    page = comparison_html(table)
    marked = dict(re.findall(r'<tr data-field="([^"]+)">.*?<td( class="[^"]*")?>', page))
    # a fresh key per re-run differs; the same tool call and amount do not
    assert "differ" in marked["idempotency key"] and "must-agree" not in marked[
        "idempotency key"]
    assert marked["tool_call_id"] == "" and marked["amount"] == ""
    assert "must-agree" in marked["customer"]  # one intended call charges one customer
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<U+202E>" not in page and "&lt;U+202E&gt;" in page  # named, never obeyed
    assert page.count("≠") == int((~table["same"].fillna(True)).sum())


def _naive(ts: pd.Timestamp) -> pd.Timestamp:
    return ts.tz_convert("UTC").tz_localize(None)


def test_timeline_opens_on_the_selected_call_despite_a_stray_record(
        incidents: dict[str, Incident]) -> None:
    analysis = incidents["step_retry"].analysis
    group = analysis.groups[0]
    # one record five weeks later (a stray export row): the axis must not span five weeks
    stray = analysis.timeline.iloc[[0]].copy()
    stray["at"] = stray["at_aligned"] = stray["at"] + pd.Timedelta(days=35)
    stray.index = [analysis.timeline.index.max() + 1]
    widened = Analysis(groups=analysis.groups, attempts=analysis.attempts,
                       timeline=pd.concat([analysis.timeline, stray]),
                       offsets=analysis.offsets, warnings=[])
    first, last = group.attempts["at"].min(), group.attempts["at"].max()
    lo, hi = (pd.Timestamp(t) for t in timeline_figure(
        widened, selected_group=group.group_id).layout.xaxis.range)
    assert lo < _naive(first) and hi > _naive(last)  # every attempt in view, with context
    assert hi - lo < (last - first) * 2 + pd.Timedelta(minutes=2)
    # no call selected: the bulk of the rows, not the stray one
    lo, hi = (pd.Timestamp(t) for t in timeline_figure(widened).layout.xaxis.range)
    assert hi < _naive(stray["at"].iloc[0]) - pd.Timedelta(days=30)


def test_timeline_ring_is_visible_and_lane_colours_are_fixed(
        incidents: dict[str, Incident]) -> None:
    colours: dict[str, set[str]] = {}
    for incident in incidents.values():
        analysis = incident.analysis
        group = analysis.groups[0].group_id if analysis.groups else None
        fig = timeline_figure(analysis, selected_group=group)
        for name, trace in _lane_traces(fig).items():
            colours.setdefault(name, set()).add(trace.marker.color)
        if group is not None:
            ring = {t.name: t for t in fig.data}[SELECTED_NAME].marker
            # an open symbol is drawn in marker.color: a transparent one draws nothing
            assert ring.symbol == "circle-open" and ring.color == SELECTED_RING
    # one colour per lane, whatever the investigation, and no two lanes alike
    assert all(len(c) == 1 for c in colours.values()), colours
    assert {name: c.pop() for name, c in colours.items()} == {
        lane.name: lane.colour for lane in LANE_TABLE.values() if lane.name in colours}
    assert len({lane.colour for lane in LANE_TABLE.values()}) == len(LANE_TABLE)


def test_records_at_the_same_time_in_a_lane_are_drawn_apart(
        incidents: dict[str, Incident]) -> None:
    analysis = incidents["step_retry"].analysis
    events = _lane_traces(timeline_figure(analysis))["provider events"]
    points = pd.DataFrame({"x": [pd.Timestamp(x) for x in events.x], "y": list(events.y)})
    same_time = points[points.duplicated("x", keep=False)]
    assert len(same_time), "Stripe writes a PaymentIntent's events in the same second"
    # each record at one time has a height of its own: none hides another
    assert not same_time.duplicated(["x", "y"]).any()


def changed_amount(timeline: pd.DataFrame, analysis: Analysis) -> pd.DataFrame:
    """The step retry with its second attempt charging 19.00 instead of 9.00 (same tool call)."""
    second = analysis.groups[0].duplicates[0].second
    request = next(str(r["request_id"]) for r in analysis.groups[0].records
                   if r["attempt_id"] == second)
    out = timeline.copy()
    out.loc[(out["request_id"] == request) & out["amount"].notna(), "amount"] = 1900
    return out


def test_attempts_that_disagree_on_the_amount_are_named(incidents: dict[str, Incident]) -> None:
    from twice.web.figures import disagreements

    incident = incidents["step_retry"]
    assert disagreements(incident.analysis.groups[0]) == {}
    changed = analyze(changed_amount(incident.analysis.timeline, incident.analysis))
    assert disagreements(changed.groups[0]) == {"amount": ["900", "1900"]}


def test_a_calls_raw_records_name_their_file_and_line(incidents: dict[str, Incident]) -> None:
    from twice.web.figures import call_records, record_text

    analysis = incidents["step_retry"].analysis
    group = analysis.groups[0]
    records = call_records(analysis, group)
    requests = set(group.attempts["request_id"].dropna())
    assert requests <= set(records["request_id"].dropna())
    assert records["label"].str.contains(r"stripe_logs\.jsonl:\d+").any()
    logged = records[records["kind"] == Kind.PROVIDER_REQUEST.value].iloc[0]
    text = json.loads(record_text(logged))
    assert text["request_id"] == logged["request_id"] and text["origin"] == logged["origin"]
    # the body as the provider logged it, parsed back into JSON
    body = records[records["args"].notna() & (records["kind"] == "provider_request")].iloc[0]
    assert isinstance(json.loads(record_text(body))["args"], dict)


def test_the_waterfall_nests_the_calls_spans_and_draws_names_as_text(
        incidents: dict[str, Incident]) -> None:
    from twice.web.figures import call_spans, waterfall_figure

    analysis = incidents["sdk_retry"].analysis
    group = analysis.groups[0]
    spans = call_spans(analysis, group)
    # the tool span, then the SDK's two HTTP tries under it, oldest first
    assert list(spans["kind"]) == ["tool_span", "http_span", "http_span"]
    assert list(spans["depth"]) == [0, 1, 1]
    assert (spans["parent_span_id"].iloc[1:] == spans["span_id"].iloc[0]).all()
    assert spans["at"].iloc[1] < spans["at"].iloc[2]
    hostile = dataclasses.replace(analysis, timeline=analysis.timeline.copy())
    hostile.timeline.loc[spans.index[0], "name"] = "<b onmouseover=x>tool</b>\u202e"
    fig = waterfall_figure(hostile, group)
    labels = list(fig.layout.yaxis.ticktext)
    assert "<b" not in labels[0] and "\u202e" not in labels[0], labels
    assert labels[1].startswith("\u2003") and not labels[0].startswith("\u2003")
    hovers = [h for t in fig.data for h in t.hovertext]
    assert not any("<b onmouseover" in h for h in hovers)


def test_a_large_timeline_opens_with_the_rows_near_the_call(
        incidents: dict[str, Incident]) -> None:
    """The web app's first view of a large timeline holds what can be seen (it draws a pan or
    zoom again as a window of its own); without `near_view` (the report) every row is there."""
    base = incidents["step_retry"].analysis
    analysis = enlarged(base, 20_000)
    group = base.groups[0]
    whole = timeline_figure(analysis, selected_group=group.group_id, max_points=2_500)
    near = timeline_figure(analysis, selected_group=group.group_id, max_points=2_500,
                           near_view=True)
    assert near.layout.xaxis.range == whole.layout.xaxis.range  # the same view, fitted
    lo, hi = (pd.Timestamp(x) for x in near.layout.xaxis.range)
    pad = (hi - lo) * NEAR_VIEWS
    shown = 0
    for trace in near.data:
        xs = [pd.Timestamp(x) for x in trace.x]
        assert all(lo - pad <= x <= hi + pad for x in xs), trace.name
        shown += len(xs) if trace.name in set(LANES.values()) else 0
    assert 0 < shown < len(analysis.timeline) // 10
    assert set(_attempt_request_rows(analysis, group.group_id)) <= set(
        {t.name: t for t in near.data}[SELECTED_NAME].customdata)
    assert {t.type for t in near.data} <= {"scatter", "heatmap"}  # few points: SVG
    assert len(near.to_json()) < len(whole.to_json()) / 4
