"""The incident workflow in a real browser (Debian's chromium driven by Playwright): the
incidents list shows each incident's own time range and sorts by it, whether its duplicate was
refunded (from the provider's `charge.refunded` event), and a status and owner set on the
investigation's page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.store.test_store import refunded_copy
from tests.web.conftest import choose, chromium, click_after_typing, running_app, samples_in

ROOT = Path(__file__).resolve().parents[2]


def _load(folder: Path):  # type: ignore[no-untyped-def]
    from twice.connectors import registry

    found, _ = registry.scan_folder(folder)
    return registry.load_all([(n, p, {}) for n, p in found]).rows


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The app on a store holding a refunded step retry and a redelivery that was not
    refunded (hours later), beside the bundled samples; and the step retry's attempts' time
    range as the list should write it."""
    from twice.engine import analyze
    from twice.store import open_store

    tmp = tmp_path_factory.mktemp("workflow")
    store = open_store(str(tmp / "investigations.sqlite3"))
    timeline = _load(refunded_copy("step_retry", tmp / "refunded"))
    store.create("Refunded retry", timeline, id="refunded-retry")
    redelivery = _load(ROOT / "sample_data" / "redelivery")
    store.create("Unrefunded redelivery", redelivery, id="unrefunded-redelivery")
    times = [r["at"] for g in analyze(timeline).groups for r in g.records]
    assert min(r["at"] for r in analyze(redelivery).groups[0].records) > max(times)
    shown = f"{min(times):%Y-%m-%d %H:%M:%S} – {max(times):%H:%M:%S} UTC"
    with running_app({"TWICE_STORE": str(tmp / "investigations.sqlite3")}) as url:
        yield url, shown


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


# The list's items' texts, read in one go, once the refunded retry is among them and no item
# is left from the run before; else false (wait_for_function asks again).
_ITEMS_JS = """() => {
  const items = [...document.querySelectorAll("[class*='st-key-incident-']")];
  if (items.some(e => e.closest('[data-stale="true"]'))) return false;
  const texts = items.map(e => e.innerText);
  return texts.some(t => t.split('\\n')[0].trim() === 'Refunded retry') ? texts : false;
}"""


def _items(page: Any) -> dict[str, str]:
    """The incidents list's items (a link, then one line) by title, in the order shown.

    The list is read in one step in the page once the refunded retry shows in it: reading the
    items one by one from here could meet the list halfway through a redraw (the whole page
    runs again when the samples' import ends), which once read a list without it."""
    page.get_by_role("link", name="Refunded retry").first.wait_for(timeout=90_000)
    samples_in(page)  # the list redraws itself until the samples are in: read it after
    texts = page.wait_for_function(_ITEMS_JS, timeout=60_000, polling=100).json_value()
    return {t.split("\n")[0].strip(): " ".join(t.split()) for t in texts}


def test_the_list_shows_when_refunds_status_and_owner(app: tuple[str, str],
                                                      browser: Any) -> None:
    app, shown = app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{app}/")
    items = _items(page)
    refunded, other = items["Refunded retry"], items["Unrefunded redelivery"]
    # the incident's own time: its two attempts 34 s apart, not the save time (today)
    assert shown in refunded and "2025-" in shown, refunded
    assert " · refunded" in refunded and "not refunded" in other
    assert "**" not in refunded and "open" in refunded and "no owner" in refunded
    # newest incident first by default; oldest first on asking
    titles = list(items)
    assert titles.index("Unrefunded redelivery") < titles.index("Refunded retry"), titles
    choose(page, "Sort by", "Incident time, oldest first")
    page.wait_for_function(
        "() => { const t = [...document.querySelectorAll(\"[class*='st-key-incident-'] a\")]"
        ".map(a => a.innerText.trim());"
        " return t.indexOf('Refunded retry') >= 0"
        " && t.indexOf('Refunded retry') < t.indexOf('Unrefunded redelivery'); }",
        timeout=30_000)
    # status and owner, set on the investigation's page
    page.goto(f"{app}/?inv=refunded-retry&tab=verdict")
    page.get_by_text("Status: open · no owner").click(timeout=90_000)
    choose(page, "Status", "resolved")
    page.get_by_role("textbox", name="Owner").fill("ana <b>on call</b>")
    click_after_typing(page, page.get_by_role("button", name="Save status"))
    page.get_by_text("Status: resolved · owner ana <b>on call</b>").wait_for(timeout=30_000)
    page.goto(f"{app}/")
    items = _items(page)
    assert "resolved · owner ana <b>on call</b>" in items["Refunded retry"], items
    choose(page, "Status", "resolved")
    page.wait_for_function(
        "() => !document.body.innerText.includes('Unrefunded redelivery')", timeout=30_000)
    assert list(_items(page)) == ["Refunded retry"]
    page.close()
