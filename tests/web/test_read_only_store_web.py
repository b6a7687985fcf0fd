"""The store becomes read-only while someone is typing a note (chromium, the app as served).

The SQLite file is marked immutable mid-session (`chattr +i`: root, which the tests run as,
ignores file modes but not that). "Add note" then says plainly that the store is read-only,
shows no path and no traceback, and leaves the note in its box; once the store can be written
again, the same click saves it and empties the box.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.store.test_full_disk import full, small_disk_in
from tests.store.test_read_only_store import immutable
from tests.web.conftest import chromium, click_after_typing, running_app
from twice.connectors import registry
from twice.store import open_store

ROOT = Path(__file__).resolve().parents[2]
INV = "read-only-web"
NOTE = "visibility timeout 6 min < run time 9 min: raise it to 15"


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    store = tmp_path / "store" / "investigations.sqlite3"
    store.parent.mkdir()
    _saved_investigation(store)
    with running_app({"TWICE_STORE": str(store), "TWICE_ACCESS_TOKEN": ""}) as url:
        yield url, store


def _settle(page: Any) -> None:
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    page.wait_for_timeout(500)


def _type_note(page: Any, url: str) -> Any:
    """Open the investigation's notes, type a name and NOTE; the note's box."""
    page.goto(f"{url}/?inv={INV}&tab=notes")
    page.get_by_role("button", name="Add note").wait_for(timeout=90_000)
    _settle(page)
    page.get_by_role("textbox", name="Your name").first.fill("ana")
    box = page.get_by_role("textbox", name="Note", exact=True)
    box.fill(NOTE)
    return box


def _refused(page: Any, box: Any, said: str) -> None:
    """Add note, which is refused as `said`; the note stays in its box to try again."""
    page.get_by_role("button", name="Add note").click()
    page.get_by_text(said).wait_for(timeout=60_000)
    _settle(page)
    assert box.input_value() == NOTE


def _saved_investigation(store: Path) -> None:
    found, _ = registry.scan_folder(ROOT / "sample_data" / "redelivery")
    open_store(str(store)).create("Queue redelivered the refund",
                                  registry.load_all([(n, p, {}) for n, p in found]).rows, id=INV)


def test_a_note_typed_while_the_store_is_read_only_is_kept_and_saved_later(
        app: tuple[str, Path]) -> None:
    url, store = app
    with chromium() as browser:
        page = browser.new_page()
        box = _type_note(page, url)
        with immutable(store):
            _refused(page, box, "The note was not saved: the investigation store is read-only "
                                "right now.")
            body = page.locator("body").inner_text()
            for leak in ("Traceback", str(store.parent), "sqlite", "readonly database"):
                assert leak not in body
            snap = open_store(str(store)).get(INV)
            assert snap is not None and NOTE not in [n.text for n in snap.notes]
        page.get_by_role("button", name="Add note").click()
        page.get_by_text(NOTE).first.wait_for(timeout=60_000)  # listed with the notes
        _settle(page)
        assert box.input_value() == ""
        assert "The note was not saved" not in page.locator("body").inner_text()
    snap = open_store(str(store)).get(INV)
    assert snap is not None and [(n.author, n.text) for n in snap.notes][-1] == ("ana", NOTE)


def test_a_note_typed_while_the_disk_is_full_is_kept_and_the_page_still_reads(
        tmp_path: Path) -> None:
    """The store's disk fills while a note is typed: the page still shows the investigation,
    "Add note" says the disk is full, the note stays in its box; once there is room, saved."""
    with small_disk_in(tmp_path) as disk:
        store = disk / "investigations.sqlite3"
        _saved_investigation(store)
        with running_app({"TWICE_STORE": str(store), "TWICE_ACCESS_TOKEN": ""}) as url, \
                chromium() as browser:
            page = browser.new_page()
            box = _type_note(page, url)
            with full(disk):
                _refused(page, box, "The note was not saved: the disk holding the "
                                    "investigation store is full")
                page.reload()  # a new page, read while the disk is still full
                page.get_by_role("button", name="Add note").wait_for(timeout=90_000)
                _settle(page)
                body = page.locator("body").inner_text()
                assert "Queue redelivered the refund" in body and "cannot be shown" not in body
                page.get_by_role("textbox", name="Note", exact=True).fill(NOTE)
            click_after_typing(page, page.get_by_role("button", name="Add note"))
            page.get_by_text(NOTE).first.wait_for(timeout=60_000)
        snap = open_store(str(store)).get(INV)
        assert snap is not None and [n.text for n in snap.notes][-1] == NOTE
