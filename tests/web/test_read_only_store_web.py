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

from tests.store.test_read_only_store import immutable
from tests.web.conftest import chromium, running_app
from twice.connectors import registry
from twice.store import open_store

ROOT = Path(__file__).resolve().parents[2]
INV = "read-only-web"
NOTE = "visibility timeout 6 min < run time 9 min: raise it to 15"


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    store = tmp_path / "store" / "investigations.sqlite3"
    found, _ = registry.scan_folder(ROOT / "sample_data" / "redelivery")
    open_store(str(store)).create("Queue redelivered the refund",
                                  registry.load_all([(n, p, {}) for n, p in found]).rows, id=INV)
    with running_app({"TWICE_STORE": str(store), "TWICE_ACCESS_TOKEN": ""}) as url:
        yield url, store


def _settle(page: Any) -> None:
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    page.wait_for_timeout(500)


def test_a_note_typed_while_the_store_is_read_only_is_kept_and_saved_later(
        app: tuple[str, Path]) -> None:
    url, store = app
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{url}/?inv={INV}&tab=notes")
        page.get_by_role("button", name="Add note").wait_for(timeout=90_000)
        _settle(page)
        page.get_by_role("textbox", name="Your name").first.fill("ana")
        box = page.get_by_role("textbox", name="Note", exact=True)
        box.fill(NOTE)
        with immutable(store):
            page.get_by_role("button", name="Add note").click()
            page.get_by_text("The note was not saved: the investigation store is read-only "
                             "right now.").wait_for(timeout=60_000)
            _settle(page)
            body = page.locator("body").inner_text()
            assert box.input_value() == NOTE  # still there to try again
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
