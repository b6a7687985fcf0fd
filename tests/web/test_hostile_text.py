"""Evidence that Streamlit's markdown would turn into live links and icons, or that a spreadsheet
would run: in chromium, none of it is a link or an icon, and the grids' "Download as CSV" writes
formula cells as text.

Streamlit links `www.` names, `user@host` addresses and `scheme://` URLs, and draws `:skull:`
and `:material/warning:` as an emoji and an icon, in text it has already unescaped (a backslash
does not stop them). The URLs here point where a link would do harm: a host written with an
ideographic full stop (the browser reads it as `evil.example`), 127.0.0.1 written as one number,
a local admin port. A title that starts `=HYPERLINK(...)` is a formula once the grid's CSV is
opened in a spreadsheet.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.hostile import honest_analysis, honest_timeline
from tests.web.conftest import chromium, running_app, samples_in
from twice.store import Note, open_store

LINKS = ("https://evil\u3002example/login http://2130706433/ http://localhost:8080/admin "
         "www.evil.example ops@evil.example mailto:ops@evil.example")
ICONS = ":material/warning: :skull: :red_circle:"
FORMULA = '=HYPERLINK("https://evil.example/x","open")'
TITLE = f"{FORMULA} {LINKS} {ICONS}"
TOOL = f"charge {LINKS} {ICONS}"
INV = "hostile-text"
# what a link from the evidence would point at (the app's own links name its port)
EVIL_HREFS = ("evil.example", "//127.0.0.1/", "localhost:8080", "mailto:")
JOINER = "\u2060"


@dataclass
class App:
    url: str
    store: Path


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    store_path = tmp_path_factory.mktemp("store") / "investigations.sqlite3"
    store = open_store(str(store_path))
    timeline = honest_timeline(worker_suffix=f" {LINKS}", tool_name=TOOL)
    analysis = honest_analysis(worker_suffix=f" {LINKS}", tool_name=TOOL)
    store.create(TITLE, timeline, id=INV, analysis=analysis, tags=[ICONS])
    store.add_note(INV, Note(author=LINKS, text=f"{LINKS} {ICONS}", at=analysis.groups[0]
                             .attempts["at"].iloc[0].to_pydatetime(),
                             group_id=analysis.groups[0].group_id))
    with running_app({"TWICE_STORE": str(store_path)}) as url:
        yield App(url, store_path)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _open(browser: Any, url: str, heading: str, *, save_as_download: bool = False) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    if save_as_download:  # the grid saves through the file picker where there is one
        page.add_init_script("delete window.showSaveFilePicker")
    page.goto(url)
    page.get_by_text(heading, exact=True).first.wait_for(timeout=90_000)
    samples_in(page)  # the list redraws itself until the samples are in: read it after
    page.wait_for_timeout(1000)
    return page


VIEWS = [("", "Incidents"), (f"?inv={INV}&tab=verdict", "Evidence"),
         (f"?inv={INV}&tab=notes", "Note"), (f"?inv={INV}&tab=timeline", "Timeline")]


@pytest.mark.parametrize(("query", "heading"), VIEWS, ids=[q or "incidents" for q, _ in VIEWS])
def test_no_link_or_icon_comes_from_the_evidence(app: App, browser: Any, query: str,
                                                 heading: str) -> None:
    page = _open(browser, f"{app.url}/{query}", heading)
    hrefs = page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)")
    assert not [h for h in hrefs if any(evil in h for evil in EVIL_HREFS)], hrefs
    icons = page.evaluate("[...document.querySelectorAll('[data-testid=stIconMaterial]')]"
                          ".map(i => i.innerText)")
    assert "warning" not in icons, icons
    body = page.locator("body").inner_text()
    assert "\U0001f480" not in body and "\U0001f534" not in body  # skull, red circle
    # and the evidence is on the page as the text it is
    assert "https://evil\u3002example/login" in body.replace(JOINER, "")
    assert ":skull:" in body.replace(JOINER, "")
    page.close()


def test_the_list_downloads_a_formula_title_as_text(app: App, browser: Any) -> None:
    page = _open(browser, app.url, "Incidents", save_as_download=True)
    button = page.get_by_role("button", name="Download this list (CSV)")
    button.wait_for(timeout=30_000)
    with page.expect_download() as info:
        button.click()
    csv_text = Path(info.value.path()).read_text(encoding="utf-8-sig")
    (line,) = [row for row in csv_text.splitlines() if "HYPERLINK" in row]
    first_cell = line.split(",", 1)[0].strip('"')
    assert first_cell.startswith("'=HYPERLINK"), line
    assert not [row for row in csv_text.splitlines()[1:] if row.startswith(("=", '"='))]
    page.close()
