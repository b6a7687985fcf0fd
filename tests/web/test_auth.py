"""Serving twice to a team: the shared-secret gate in a real browser, and the OIDC wiring.

With `TWICE_ACCESS_TOKEN` set, a shared investigation link shows the token prompt, not the
data; a wrong token is refused; the right one opens the linked view. The token never appears in
the URL, the page, cookies or storage, and a new browser session asks again. With an `[auth]`
section in secrets.toml the page asks to sign in (st.login) before anything; signing in itself
needs an identity provider, which these tests do not have.
"""

from __future__ import annotations

import importlib.util
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import chromium, click_after_typing, running_app, settled
from twice.connectors import registry
from twice.store import open_store
from twice.web.auth import token_matches

ROOT = Path(__file__).resolve().parents[2]
TITLE = "Quarterly double charge at Initech"
INV = "shared-one"
TOKEN = "twice-team-" + secrets.token_urlsafe(24)


def _store(folder: Path) -> Path:
    path = folder / "investigations.sqlite3"
    found, _ = registry.scan_folder(ROOT / "sample_data" / "step_retry")
    rows = registry.load_all([(n, p, {}) for n, p in found]).rows
    open_store(str(path)).create(TITLE, rows, id=INV)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def token_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store = _store(tmp_path_factory.mktemp("store"))
    with running_app({"TWICE_STORE": str(store), "TWICE_ACCESS_TOKEN": TOKEN}) as url:
        yield url


def _prompt(page: Any) -> None:
    page.get_by_role("textbox", name="Access token").wait_for(timeout=90_000)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    page.wait_for_timeout(500)


def _submit(page: Any, token: str) -> None:
    page.get_by_role("textbox", name="Access token").fill(token)
    click_after_typing(page, page.get_by_role("button", name="Open"))


def _no_data(page: Any) -> None:
    body = page.locator("body").inner_text()
    for shown in (TITLE, "Sample: step retry", "Incidents", "Evidence", "New investigation"):
        assert shown not in body


def test_a_shared_link_asks_for_the_token_first(token_app: str, browser: Any) -> None:
    context = browser.new_context()
    page = context.new_page()
    link = f"{token_app}/?inv={INV}&tab=verdict"
    page.goto(link)
    _prompt(page)
    _no_data(page)

    _submit(page, TOKEN[:-1] + ("x" if TOKEN[-1] != "x" else "y"))
    page.get_by_text("That is not the access token.").wait_for(timeout=30_000)
    _no_data(page)
    _submit(page, "")
    page.get_by_text("That is not the access token.").wait_for(timeout=30_000)
    settled(page)  # the error above is the first submit's until this one's run has ended
    _no_data(page)

    _submit(page, TOKEN)
    page.locator("h2#verdict, [id='verdict']").first.wait_for(timeout=90_000)
    page.get_by_text(TITLE).first.wait_for(timeout=30_000)
    # the heading and the title are the store's preview while the evidence is read: the page
    # itself (its tabs) once that run has ended
    settled(page, timeout=120_000)
    assert page.url == link  # the view the link named, and nothing added to it
    assert TOKEN not in page.content()
    assert TOKEN not in str(context.cookies())
    assert TOKEN not in page.evaluate("JSON.stringify({...localStorage, ...sessionStorage})")
    # moving around inside the app (same session) does not ask again
    page.get_by_text("Notes", exact=True).click()
    page.get_by_role("button", name="Add note").wait_for(timeout=90_000)
    assert "tab=notes" in page.url and TOKEN not in page.url
    # a reload is a new session, as is another browser: the prompt again
    page.reload()
    _prompt(page)
    _no_data(page)
    context.close()
    other = browser.new_context()
    page = other.new_page()
    page.goto(f"{token_app}/")
    _prompt(page)
    _no_data(page)
    other.close()


def test_oidc_sign_in_is_asked_for_when_auth_is_configured(
        tmp_path: Path, browser: Any) -> None:
    home = tmp_path / "home"
    (home / ".streamlit").mkdir(parents=True)
    # placeholder provider: the page must ask to sign in before showing anything
    (home / ".streamlit" / "secrets.toml").write_text(
        '[auth]\nredirect_uri = "http://127.0.0.1:1/oauth2callback"\n'
        f'cookie_secret = "{secrets.token_urlsafe(32)}"\nclient_id = "twice-test"\n'
        'client_secret = "not-a-real-secret"\n'
        'server_metadata_url = "http://127.0.0.1:1/.well-known/openid-configuration"\n')
    store = _store(tmp_path)
    with running_app({"TWICE_STORE": str(store), "HOME": str(home)}) as url:
        page = browser.new_page()
        page.goto(f"{url}/?inv={INV}&tab=verdict")
        page.get_by_role("button", name="Sign in").wait_for(timeout=90_000)
        page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
        _no_data(page)
        if importlib.util.find_spec("authlib") is None:
            # without the auth extra, signing in says what to install instead of failing
            page.get_by_role("button", name="Sign in").click()
            page.get_by_text("pip install 'twice[auth]'").wait_for(timeout=60_000)
            assert "Traceback" not in page.locator("body").inner_text()
            _no_data(page)
        page.close()


def test_token_comparison() -> None:
    assert token_matches(TOKEN, TOKEN)
    assert not token_matches(TOKEN[:-1], TOKEN)
    assert not token_matches("", TOKEN)
    assert token_matches("clé-ünïcode", "clé-ünïcode")  # compare_digest alone refuses non-ASCII
    assert not token_matches("clé", "cle")
