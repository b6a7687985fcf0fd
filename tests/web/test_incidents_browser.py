"""The incidents list and the page's smaller details, as a user meets them in a real browser
(Debian's chromium driven by Playwright): a new store's first visit lists the incidents while
the samples are analysed, one list whose links stay in the tab and session, "1 group", no
Deploy button, the live form's words for a key left out, the verdict form's confirmation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.web.conftest import (
    chromium,
    click_after_typing,
    page_errors,
    running_app,
    samples_in,
    settled,
    shown,
    wait_watching,
)

ROOT = Path(__file__).resolve().parents[2]
INV = "checkout-double"
FIRST_OPEN = "opened-once"  # an investigation only one test opens
TITLE = "Checkout double charge"
SAMPLES = sum(1 for p in (ROOT / "sample_data").iterdir() if (p / "truth.json").exists())


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app on a store holding one step retry (one duplicate group) beside the samples."""
    from twice.connectors import registry
    from twice.store import open_store

    path = tmp_path_factory.mktemp("incidents") / "investigations.sqlite3"
    found, _ = registry.scan_folder(ROOT / "sample_data" / "step_retry")
    rows = registry.load_all([(n, p, {}) for n, p in found]).rows
    open_store(str(path)).create(TITLE, rows, id=INV)
    open_store(str(path)).create("Checkout double charge, reported again", rows, id=FIRST_OPEN)
    # nothing analysed ahead: one test here opens an investigation the server has not analysed
    with running_app({"TWICE_STORE": str(path), "TWICE_WARM_UP": "0"}) as url:
        yield url


TABS = 6  # pages that watch one import: each is a chance for a crossing of runs to blank it


def test_a_new_stores_first_visit_lists_incidents_while_the_samples_are_analysed(
        tmp_path: Path, browser: Any) -> None:
    """Every tab open while the samples are analysed ends on the whole list, and Streamlit's
    browser side never throws on the way (which blanks the page)."""
    with running_app({"TWICE_STORE": str(tmp_path / "new.sqlite3")}) as url:
        first = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors = page_errors(first)
        first.goto(f"{url}/")
        first.get_by_role("heading", name="Incidents").first.wait_for(timeout=90_000)
        # the list is on the page while the samples' analysis is still under way ...
        first.get_by_text("Analysing the bundled samples").first.wait_for(timeout=30_000)
        pages = [(first, errors)]
        for _ in range(TABS - 1):  # more tabs, opened while the import goes on
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            pages.append((page, page_errors(page)))
            page.goto(f"{url}/", wait_until="commit")
        for page, errors in pages:
            # ... and each sample joins it, without a reload, until all are in
            wait_watching(page.get_by_role("heading", name=f"{SAMPLES} incidents"), errors)
            # (the last sample is listed a moment before its import ends: its note is added
            # after; the caption goes on the run after that)
            samples_in(page, timeout=60_000)
            links = page.locator("[data-testid='stPageLink-NavLink']")
            expect(links).to_have_count(SAMPLES)
        first.wait_for_timeout(2_000)  # a late run's failure would blank a page now
        for page, errors in pages:
            assert errors == [], "the browser side threw, which blanks the page"
            expect(page.locator("[data-testid='stMain']")).to_have_count(1)
            page.close()


def test_the_list_is_shown_once_and_its_links_stay_in_this_tab_and_session(
        app: str, browser: Any) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(f"{app}/")
    link = page.get_by_role("link", name=TITLE, exact=True)
    link.wait_for(timeout=90_000)
    # the samples' import reruns the list each second: the link is clicked once that is over
    samples_in(page)
    expect(link).to_have_count(1)  # one list: no grid of the same incidents above it
    expect(page.locator("[data-testid='stMain'] [data-testid='stDataFrame']")).to_have_count(0)
    item = page.locator(f".st-key-incident-{INV}")
    expect(item).to_contain_text("1 group ·")
    assert "1 groups" not in item.inner_text()
    assert link.get_attribute("target") in (None, "", "_self")
    # something only this session knows: a title typed into the sidebar's upload form
    page.get_by_text("New investigation from files").click()
    page.get_by_role("textbox", name="Title").fill("kept in this session")
    page.get_by_role("textbox", name="Title").press("Enter")
    settled(page)
    link.click()
    page.locator("h2#verdict").wait_for(timeout=90_000)
    settled(page, timeout=120_000)  # the heading is the store's preview until the page is drawn
    assert len(context.pages) == 1 and f"inv={INV}" in page.url
    expect(page.get_by_text("1 duplicate group ·")).to_have_count(1)
    assert "1 duplicate groups" not in page.locator("body").inner_text()
    page.get_by_role("button", name="All incidents").click()
    page.get_by_role("link", name=TITLE, exact=True).wait_for(timeout=60_000)
    title = page.get_by_role("textbox", name="Title")
    if not title.is_visible():  # the expander as this session left it, or closed again
        page.get_by_text("New investigation from files").click()
    expect(title).to_have_value("kept in this session")
    context.close()


def test_there_is_no_deploy_button(app: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{app}/?inv={INV}&tab=verdict")
    page.locator("h2#verdict").wait_for(timeout=90_000)
    settled(page)
    page.locator("[data-testid='stToolbar']").wait_for(state="attached", timeout=30_000)
    expect(page.locator("[data-testid='stAppDeployButton']")).to_have_count(0)
    expect(page.get_by_role("button", name="Deploy")).to_have_count(0)
    page.close()


def test_the_live_form_asks_for_the_key_it_was_not_given(app: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{app}/")
    page.get_by_text("Incidents").first.wait_for(timeout=120_000)
    samples_in(page)  # the store's samples: their last refresh could eat the click
    page.get_by_text("New investigation from live sources").click(timeout=90_000)
    page.get_by_role("textbox", name="Customer, payment intent or charge id").fill("cus_Q1")
    page.get_by_role("textbox", name="Around (UTC)").fill("2024-06-03T14:21Z")
    click_after_typing(page, page.get_by_role("button", name="Investigate"))
    shown(page, page.get_by_text("Stripe restricted key: give the key"))
    assert "environment variable" not in page.locator("body").inner_text()
    page.close()


def test_a_saved_verdict_is_confirmed_and_the_form_emptied(app: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{app}/?inv={INV}&tab=notes")
    reason = page.get_by_role("textbox", name="Reason")
    reason.wait_for(timeout=90_000)
    settled(page)
    page.get_by_role("button", name="Save verdict").click()  # no reason: said, nothing saved
    page.get_by_text("The verdict was not saved: give a reason").wait_for(timeout=30_000)
    reason.fill("the second charge has a new request id and key")
    page.locator(".stForm").filter(has=reason).get_by_role(
        "textbox", name="Your name").fill("ana")
    click_after_typing(page, page.get_by_role("button", name="Save verdict"))
    page.get_by_text("Saved: ana confirmed the verdict").wait_for(timeout=30_000)
    expect(reason).to_have_value("")
    page.get_by_text("Verdict", exact=True).click()
    page.get_by_text("Investigator ana confirmed").wait_for(timeout=60_000)
    page.close()


def test_a_link_the_server_has_not_analysed_yet_says_its_saved_verdict_first(app: str) -> None:
    """The first time the server shows an investigation it reads and analyses it (seconds on
    a large one): the store's own account of it (the title, the verdict saved with it) is sent
    before that, then the page. The next session gets the page at once, not analysed again."""
    from tests.web.test_gate import Session, elements, exceptions, session

    with session(app) as ws:
        msgs = Session(ws).run(query=f"inv={FIRST_OPEN}&tab=verdict")
    assert exceptions(msgs) == []
    texts = [str(e) for e in elements(msgs)]
    saved = [i for i, t in enumerate(texts) if "the verdict as saved" in t]
    heading = [i for i, t in enumerate(texts) if "step_retry: " in t and "verdict" in t]
    confidence = [i for i, t in enumerate(texts) if "Confidence" in t]
    assert saved and heading and confidence, texts
    assert heading[0] < saved[0] < confidence[0]  # the saved verdict, before the analysis's
    with session(app) as ws:
        again = [str(e) for e in elements(Session(ws).run(
            query=f"inv={FIRST_OPEN}&tab=verdict"))]
    assert not any("the verdict as saved" in t for t in again)
    assert any("Confidence" in t for t in again)


def test_the_list_the_verdict_and_the_notes_fit_a_phone(app: str, browser: Any) -> None:
    """At 390 px nothing is wider than the screen (no sideways scrolling to read a line)."""
    from tests.web.test_web_browser import _shot

    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                  has_touch=True, device_scale_factor=2)
    page = context.new_page()
    wide = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    page.goto(f"{app}/")
    page.get_by_role("link", name=TITLE, exact=True).wait_for(timeout=90_000)
    page.get_by_role("heading", name=f"{SAMPLES + 2} incidents").wait_for(timeout=300_000)
    settled(page)
    expect(page.locator(f".st-key-incident-{INV}")).to_contain_text("1 group ·")
    assert page.evaluate(wide) <= 0
    _shot(page, "incidents_phone")
    page.goto(f"{app}/?inv={INV}&tab=verdict")
    page.locator("h2#verdict").wait_for(timeout=90_000)
    settled(page)
    assert page.evaluate(wide) <= 0
    _shot(page, "verdict_phone")
    page.goto(f"{app}/?inv={INV}&tab=notes")
    page.get_by_role("button", name="Save verdict").wait_for(timeout=90_000)
    settled(page)
    page.get_by_role("textbox", name="Reason").fill("a new request id and key per attempt")
    click_after_typing(page, page.get_by_role("button", name="Save verdict"))
    page.get_by_text("confirmed the verdict").wait_for(timeout=30_000)
    settled(page)
    page.get_by_text("confirmed the verdict").scroll_into_view_if_needed()
    assert page.evaluate(wide) <= 0
    _shot(page, "notes_phone")
    context.close()
