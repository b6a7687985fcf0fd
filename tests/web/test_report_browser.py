"""The self-contained HTML report in a real browser (Debian's chromium): its charts draw and
answer the mouse, whatever the incident's size. Its script policy allows no eval, which plotly's
WebGL traces need, so the report must never hold one (they would show "WebGL is not supported")."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import chromium, hover_points
from tests.web.test_figures import enlarged
from twice.connectors import registry
from twice.engine import analyze
from twice.store import Note, Snapshot, Summary
from twice.web.figures import SVG_MAX_POINTS
from twice.web.report_html import build_report

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _snapshot(rows: int) -> tuple[Snapshot, Any]:
    found, _ = registry.scan_folder(SAMPLES / "step_retry")
    base = analyze(registry.load_all([(n, p, {}) for n, p in found]).rows)
    timeline = enlarged(base, rows).timeline if rows else base.timeline
    analysis = analyze(timeline)
    summary = Summary(id="report-test", title=f"step retry, {len(timeline)} rows",
                      created_at=datetime(2025, 3, 3, tzinfo=UTC), provider="stripe",
                      groups=len(analysis.groups), worst_layer="step_retry",
                      money_at_risk={}, sources=["sample_data/step_retry"], tags=[])
    return Snapshot(summary, timeline, [], [], []), analysis


@pytest.mark.parametrize("rows", [0, 4 * SVG_MAX_POINTS], ids=["sample", "past_svg_limit"])
def test_report_charts_draw_without_webgl_and_answer_the_mouse(browser: Any, tmp_path: Path,
                                                               rows: int) -> None:
    snap, analysis = _snapshot(rows)
    assert len(snap.timeline) >= rows
    report = tmp_path / "report.html"
    report.write_text(build_report(snap, analysis), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(report.as_uri())
    page.locator(".js-plotly-plot .nsewdrag").first.wait_for(state="attached", timeout=60_000)
    assert page.locator(".js-plotly-plot").count() == 2
    types = page.evaluate("[...document.querySelectorAll('.js-plotly-plot')]"
                          ".map(gd => gd._fullData.map(t => t.type))")
    assert not any(t.endswith("gl") for chart in types for t in chart), types
    assert page.locator(".no-webgl").count() == 0
    assert hover_points(page) == 2  # a label for a point of each chart
    assert errors == []
    page.close()


def test_report_wraps_long_unbroken_evidence_within_the_window(browser: Any,
                                                               tmp_path: Path) -> None:
    """A 5,000-character title, ids and note, none with a space to break at: the report stays
    as wide as the window (it once grew 79,670 px wide)."""
    long = "W" * 5_000
    found, _ = registry.scan_folder(SAMPLES / "step_retry")
    timeline = registry.load_all([(n, p, {}) for n, p in found]).rows
    for column in ("request_id", "thread_id", "tool_call_id", "tool_name", "idempotency_key"):
        timeline[column] = timeline[column].where(timeline[column].isna(),
                                                  timeline[column] + long).astype("string")
    analysis = analyze(timeline)
    assert analysis.groups and analysis.groups[0].duplicates[0].second.endswith(long)
    summary = Summary(id="wide", title=long, created_at=datetime(2025, 3, 3, tzinfo=UTC),
                      provider="stripe", groups=len(analysis.groups),
                      worst_layer="step_retry", money_at_risk={}, sources=[long], tags=[])
    note = Note(author=long, text=long, at=datetime(2025, 3, 3, 10, tzinfo=UTC))
    report = tmp_path / "report.html"
    report.write_text(build_report(Snapshot(summary, timeline, [note], [], []), analysis),
                      encoding="utf-8")
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.goto(report.as_uri())
    page.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=60_000)
    assert page.locator("h1").inner_text() == long  # all of it is there, wrapped
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1200 + 2, f"the report is {width} px wide in a 1200 px window"
    page.close()


def test_the_report_is_small_its_lanes_coloured_and_named_in_full(browser: Any,
                                                                 tmp_path: Path) -> None:
    import plotly.offline

    from twice.web.figures import LANE_TABLE
    from twice.web.report_html import plotly_js

    # the bundled plotly.js is the version plotly.py draws for, and it is in the report once
    assert f"plotly.js (cartesian - minified) v{plotly.offline.get_plotlyjs_version()}" \
        in plotly_js()[:200]
    snap, analysis = _snapshot(0)
    html = build_report(snap, analysis)
    assert html.count("window.Plotly = Plotly") == 1
    size = len(html.encode())
    assert size < 2_000_000, size  # the full bundle alone is 4.8 MB
    report = tmp_path / "report.html"
    report.write_text(html, encoding="utf-8")
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(report.as_uri())
    timeline = page.locator(".js-plotly-plot").nth(1)
    timeline.locator(".ytick text").first.wait_for(timeout=60_000)
    # each lane's markers drawn in its lane's colour, none of them black
    drawn = timeline.evaluate("gd => [...gd.querySelectorAll('.scatterlayer .trace')].map("
                              "t => [t.__data__[0].trace.name, getComputedStyle("
                              "t.querySelector('.point')).fill])")
    colours = {lane.name: lane.colour for lane in LANE_TABLE.values()}
    lanes = {name: fill for name, fill in drawn if name in colours}
    assert len(lanes) >= 5, drawn
    assert len(set(lanes.values())) == len(lanes), lanes
    assert "rgb(0, 0, 0)" not in lanes.values()
    # every lane's name is inside the chart, none cut at its left edge
    chart = timeline.bounding_box()
    assert chart is not None
    ticks = timeline.locator(".ytick text")
    names = ticks.evaluate_all("els => els.map(e => e.textContent)")  # SVG text
    assert set(lanes) <= set(names), names
    for i in range(ticks.count()):
        box = ticks.nth(i).bounding_box()
        assert box is not None and box["x"] >= chart["x"], (names[i], box, chart)
    assert errors == []
    page.close()
