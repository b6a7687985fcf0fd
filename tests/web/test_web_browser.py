"""The web app in a real browser: Debian's chromium driven by Playwright (no browser download).

The app runs headless on a free port with its own store; a shared link opens the selected
duplicate's verdict; clicking a point on the gap chart moves the verdict panel to that duplicate.
Screenshots go to test-artifacts/ (and to docs/screenshots/ with TWICE_SCREENSHOTS=1).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.web.conftest import chromium, running_app
from twice.connectors import registry
from twice.store import open_store
from twice.timeline import concat

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
COMBINED = "two-incidents"


def _load(name: str):  # type: ignore[no-untyped-def]
    found, _ = registry.scan_folder(ROOT / "sample_data" / name)
    return registry.load_all([(n, p, {}) for n, p in found]).rows


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store_path = tmp_path_factory.mktemp("store") / "investigations.sqlite3"
    store = open_store(str(store_path))
    # two incidents in one investigation: two duplicates on the gap chart
    store.create("Step retry and redelivery", concat([_load("step_retry"), _load("redelivery")]),
                 id=COMBINED)
    with running_app({"TWICE_STORE": str(store_path)}) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as b:
        yield b


def _shot(page: object, name: str, docs: bool = True) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    # let the rest of the page finish drawing (a picture, not an assertion)
    page.locator("[data-testid='stStatusWidget']").wait_for(  # type: ignore[attr-defined]
        state="hidden", timeout=30_000)
    page.wait_for_timeout(1500)  # type: ignore[attr-defined]
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]
    if docs and os.environ.get("TWICE_SCREENSHOTS"):
        folder = ROOT / "docs" / "screenshots"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(ARTIFACTS / f"{name}.png", folder / f"{name}.png")


def _verdict_heading(page: object) -> str:
    heading = page.locator("h2#verdict, [id='verdict']").first  # type: ignore[attr-defined]
    heading.wait_for(timeout=60_000)
    return str(heading.inner_text())


def test_shared_link_opens_the_verdict(app_url: str, browser: object) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    page.goto(f"{app_url}/?inv=sample-step-retry&tab=verdict")
    assert "step_retry" in _verdict_heading(page)
    # the page renders in pieces: wait until the findings are in before reading it
    page.wait_for_function("document.body.innerText.includes('key_regenerated')",
                           timeout=60_000)
    body = page.locator("body").inner_text()
    assert "key_regenerated" in body
    assert "tool_call_id" in body
    _shot(page, "verdict")
    page.close()


def test_clicking_a_gap_point_moves_the_verdict(app_url: str, browser: object) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    page.goto(f"{app_url}/?inv={COMBINED}&tab=verdict")
    first = _verdict_heading(page)
    page.goto(f"{app_url}/?inv={COMBINED}&tab=gaps")
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    _shot(page, "gaps")
    # the two duplicates: click the point that is not the selected one
    points = page.locator(".js-plotly-plot .scatterlayer path.point")
    points.first.wait_for(timeout=30_000)
    layers_before = first.split(":")[0]
    target = "redelivery" if layers_before.startswith("step_retry") else "step_retry"
    clicked = False
    for i in range(points.count()):
        # plotly hit-tests clicks on its drag layer, so click where the point is drawn
        box = points.nth(i).bounding_box()
        assert box is not None
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        try:
            page.wait_for_function(
                f"document.body.innerText.includes('{target}: ')", timeout=8_000)
            clicked = True
            break
        except Exception:  # noqa: BLE001 - that point was the selected one; try the next
            page.goto(f"{app_url}/?inv={COMBINED}&tab=gaps")
            page.locator(".js-plotly-plot .scatterlayer path.point").first.wait_for()
    assert clicked, "no point on the gap chart opened the other duplicate's verdict"
    assert target in _verdict_heading(page)
    assert "dup=" in page.url and "tab=verdict" in page.url
    _shot(page, "verdict_after_click", docs=False)
    page.close()


def test_timeline_and_incidents_views_render(app_url: str, browser: object) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    page.goto(f"{app_url}/?inv=sample-redelivery&tab=timeline")
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    _shot(page, "timeline")
    page.goto(f"{app_url}/?inv=sample-redelivery&tab=notes")
    page.get_by_role("button", name="Add note").wait_for(timeout=60_000)
    _shot(page, "notes")
    page.goto(f"{app_url}/?inv=sample-redelivery&tab=export")
    page.get_by_role("button", name="Self-contained HTML report").wait_for(timeout=60_000)
    _shot(page, "export")
    page.goto(f"{app_url}/")
    page.get_by_text("Incidents").first.wait_for(timeout=60_000)
    page.get_by_role("link", name="Sample: step retry").first.wait_for(timeout=30_000)
    _shot(page, "incidents")
    page.goto(f"{app_url}/?customer=cus_WrcAXdGAH5bSQW")
    page.get_by_role("heading", name="Customer cus_WrcAXdGAH5bSQW").wait_for(timeout=60_000)
    page.get_by_role("link", name=re.compile("cus_WrcAXdGAH5bSQW · 9.00 USD")).first.wait_for(
        timeout=30_000)
    _shot(page, "customer")
    page.goto(f"{app_url}/?inv=does-not-exist")
    page.get_by_text("was not found").first.wait_for(timeout=60_000)
    page.close()
