"""Markup and bidi overrides in the evidence, in chromium: the charts' hover labels show a tool
named `charge<a href="https://evil.example/">evil</a><span style="font-size:400px">` as that
text (no live link, no 400px span), and no right-to-left override reaches the page, the
duplicate picker included. Both the app's charts and the HTML report's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import chromium, running_app
from tests.web.test_hostile_render import INV, RLO, TOOL, _snapshot, hostile_timeline
from twice.engine import analyze
from twice.store import open_store
from twice.web.figures import LANES
from twice.web.report_html import build_report

TOOL_SHOWN = 'charge<a href="https://evil.example/">evil</a><span style="font-size:400px">' \
    "<U+202E>"
assert TOOL_SHOWN.replace("<U+202E>", RLO) == TOOL


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store_path = tmp_path_factory.mktemp("store") / "investigations.sqlite3"
    open_store(str(store_path)).create("hostile charts", hostile_timeline(), id=INV)
    with running_app({"TWICE_STORE": str(store_path)}) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


# The screen position of a trace's first point, from plotly's own axes.
_TRACE_POINT_JS = """
(gd, name) => {
  const fl = gd._fullLayout, box = gd.getBoundingClientRect();
  const t = (gd._fullData || []).find(t => t.name === name);
  if (!t) return null;
  const xa = fl[t.xaxis.replace('x', 'xaxis')], ya = fl[t.yaxis.replace('y', 'yaxis')];
  return [box.left + xa._offset + xa.d2p(t.x[0]), box.top + ya._offset + ya.d2p(t.y[0])];
}
"""


def _hover_label_of(page: Any, trace: str, chart_index: int = 0) -> str:
    """Aim at the first point of `trace` in a chart; the hover label plotly drew for it."""
    chart = page.locator(".js-plotly-plot").nth(chart_index)
    chart.scroll_into_view_if_needed()
    point = chart.evaluate(_TRACE_POINT_JS, trace)
    assert point is not None, f"no trace {trace!r}"
    x, y = point
    labels = page.locator(".hoverlayer .hovertext")
    for dx in (0, 1, -1, 2):
        page.mouse.move(1, 1)
        page.mouse.move(x + dx, y, steps=4)
        try:
            labels.first.wait_for(state="attached", timeout=3_000)
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: aim again
            continue
        return str(labels.first.text_content())
    raise AssertionError(f"no hover label for {trace}")


def _nothing_drawn_as_markup(page: Any) -> None:
    """No element anywhere (SVG included) links to the evil site or got its 400px style."""
    assert page.evaluate(
        "[...document.querySelectorAll('a')].filter(a => ((a.getAttribute('href') || '')"
        " + (a.getAttribute('xlink:href') || '')).includes('evil.example')).length") == 0
    assert page.evaluate(
        "[...document.querySelectorAll('[style]')]"
        ".filter(e => e.getAttribute('style').includes('400px')).length") == 0


def _open(browser: Any, url: str) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.locator(".js-plotly-plot .nsewdrag").first.wait_for(state="attached", timeout=90_000)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    return page


@pytest.mark.parametrize(("tab", "trace", "shown"), [
    ("gaps", "sdk_retry", f"tool {TOOL_SHOWN}"),
    ("timeline", LANES["tool_call"], f"tool: {TOOL_SHOWN}"),
])
def test_chart_hover_shows_a_hostile_tool_name_as_text(app_url: str, browser: Any, tab: str,
                                                        trace: str, shown: str) -> None:
    page = _open(browser, f"{app_url}/?inv={INV}&tab={tab}")
    label = _hover_label_of(page, trace)
    assert shown in label
    assert RLO not in label
    _nothing_drawn_as_markup(page)
    body = page.locator("body").inner_text()
    assert RLO not in body and "<U+202E>" in body  # the duplicate picker names it too
    page.close()


def test_report_charts_show_a_hostile_tool_name_as_text(browser: Any, tmp_path: Path) -> None:
    timeline = hostile_timeline()
    report = tmp_path / "report.html"
    report.write_text(build_report(_snapshot(timeline, "hostile charts"), analyze(timeline)),
                      encoding="utf-8")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(report.as_uri())
    page.locator(".js-plotly-plot .nsewdrag").first.wait_for(state="attached", timeout=60_000)
    # the gaps chart first, then the timeline
    for chart, trace, shown in ((0, "sdk_retry", f"tool {TOOL_SHOWN}"),
                                (1, LANES["tool_call"], f"tool: {TOOL_SHOWN}")):
        label = _hover_label_of(page, trace, chart)
        assert shown in label and RLO not in label
        _nothing_drawn_as_markup(page)
    assert RLO not in page.locator("body").inner_text()
    page.close()
