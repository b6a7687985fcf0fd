"""The gate against clients that are not Streamlit's browser code, and what it lets out.

Downloads: Streamlit serves a download's bytes at /media/<id> to any client that asks, with no
session and no token, so the export tab makes no file until a session that passed the gate
clicks, and what a click made is gone after the session (checked with a plain HTTP client).

A hand-made websocket session (Streamlit's own BackMsg / ForwardMsg protobufs over
`/_stcore/stream`) sends widget values the browser never would: under the gate's own session
key, under ids no widget has, with the wrong type for a real widget. None of it opens the gate,
and no exception type, message or traceback reaches the client.
"""

from __future__ import annotations

import re
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import ClientConnection, connect

from tests.web.conftest import chromium, click_after_typing, running_app
from twice.connectors import registry
from twice.store import open_store

ROOT = Path(__file__).resolve().parents[2]
TITLE = "Quarterly double charge at Initech"
INV = "gate-one"
TOKEN = "twice-gate-" + secrets.token_urlsafe(24)
GENERIC = "This app has encountered an error"

Widget = tuple[str, str, Any]  # (widget id, WidgetState value field, value)


def _store(folder: Path) -> Path:
    path = folder / "investigations.sqlite3"
    found, _ = registry.scan_folder(ROOT / "sample_data" / "step_retry")
    rows = registry.load_all([(n, p, {}) for n, p in found]).rows
    open_store(str(path)).create(TITLE, rows, id=INV)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def token_app(store: Path) -> Iterator[str]:
    with running_app({"TWICE_STORE": str(store), "TWICE_ACCESS_TOKEN": TOKEN}) as url:
        yield url


@pytest.fixture(scope="module")
def open_app(store: Path) -> Iterator[str]:
    with running_app({"TWICE_STORE": str(store), "TWICE_ACCESS_TOKEN": ""}) as url:
        yield url


class Session:
    """One websocket session speaking Streamlit's protocol by hand."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    def run(self, widgets: Sequence[Widget] = (), query: str = "") -> list[ForwardMsg]:
        """Ask for a script run with these widget values; the messages until it finished."""
        msg = BackMsg()
        msg.rerun_script.query_string = query
        for widget_id, field, value in widgets:
            state = msg.rerun_script.widget_states.widgets.add()
            state.id = widget_id
            setattr(state, field, value)
        self.ws.send(msg.SerializeToString())
        out: list[ForwardMsg] = []
        while True:
            fm = ForwardMsg()
            fm.ParseFromString(self.ws.recv(timeout=120))
            out.append(fm)
            if fm.WhichOneof("type") == "script_finished":
                return out


def session(url: str) -> Any:
    return connect(url.replace("http://", "ws://") + "/_stcore/stream",
                   subprotocols=["streamlit"])  # type: ignore[list-item]


def elements(msgs: list[ForwardMsg]) -> list[Any]:
    return [fm.delta.new_element for fm in msgs
            if fm.WhichOneof("type") == "delta" and fm.delta.WhichOneof("type") == "new_element"]


def exceptions(msgs: list[ForwardMsg]) -> list[Any]:
    return [e.exception for e in elements(msgs) if e.WhichOneof("type") == "exception"]


def widget_ids(msgs: list[ForwardMsg], kind: str) -> list[str]:
    return [getattr(e, kind).id for e in elements(msgs) if e.WhichOneof("type") == kind]


def shown(msgs: list[ForwardMsg]) -> str:
    return "\n".join(str(fm) for fm in msgs if fm.WhichOneof("type") == "delta")


FORGED: list[list[Widget]] = [
    [("twice_access", "bool_value", True)],  # the gate's own session key
    [("twice_access", "string_value", "granted")],
    [("twice_access_granted", "bool_value", True)],  # the key the gate once used
    [("twice_access_granted", "string_value", "x"), ("twice_access_failures", "int_value", -1)],
    [("anything-at-all", "int_value", 7), ("_live_stripe_key", "string_value", "sk_forged")],
]


@pytest.mark.parametrize("widgets", FORGED, ids=lambda w: "+".join(i for i, _, _ in w))
def test_forged_session_values_open_nothing_and_raise_nothing(
        token_app: str, widgets: list[Widget]) -> None:
    with session(token_app) as ws:
        msgs = Session(ws).run(widgets, query=f"inv={INV}&tab=verdict")
        assert exceptions(msgs) == []
        page = shown(msgs)
        assert "enter the access token" in page
        for secret_view in (TITLE, "Sample: step retry", "Incidents", "step_retry"):
            assert secret_view not in page
        # the prompt still works in that session: a wrong token is refused, plainly
        token_box = widget_ids(msgs, "text_input")[0]
        submit = widget_ids(msgs, "button")[0]
        msgs = Session(ws).run([*widgets, (token_box, "string_value", "not-the-token"),
                           (submit, "trigger_value", True)])
        assert exceptions(msgs) == [] and "That is not the access token." in shown(msgs)
        assert TITLE not in shown(msgs)


def test_a_value_of_the_wrong_type_for_the_gates_widgets_opens_nothing(token_app: str) -> None:
    with session(token_app) as ws:
        s = Session(ws)
        msgs = s.run()
        token_box, submit = widget_ids(msgs, "text_input")[0], widget_ids(msgs, "button")[0]
        for field, value in (("int_value", 5), ("bool_value", True), ("double_value", 1.5)):
            msgs = s.run([(token_box, field, value), (submit, "trigger_value", True)])
            assert TITLE not in shown(msgs) and "Incidents" not in shown(msgs)
            for exc in exceptions(msgs):
                assert not exc.stack_trace and GENERIC in exc.message


def test_an_error_in_a_page_shows_no_details_to_the_client(open_app: str) -> None:
    """A file uploader given a number instead of files fails inside Streamlit itself: the
    served app's `client.showErrorDetails = "none"` (twice/web/.streamlit/config.toml) keeps
    the type, message and traceback in the server's log."""
    with session(open_app) as ws:
        s = Session(ws)
        msgs = s.run()
        assert exceptions(msgs) == [] and TITLE in shown(msgs)
        uploaders = widget_ids(msgs, "file_uploader")
        assert uploaders
        msgs = s.run([(uploaders[0], "int_value", 999)])
        failed = exceptions(msgs)
        if not failed:
            pytest.skip("this Streamlit reads a number sent for a file uploader without failing")
        for exc in failed:
            assert GENERIC in exc.message
            assert not exc.type and not list(exc.stack_trace)
        page = shown(msgs)
        for detail in ("Traceback", "AttributeError", str(ROOT), "site-packages", ".py"):
            assert detail not in page


# -- downloads ---------------------------------------------------------------------------------
EXPORTS = ("Analysis JSON", "Incident folder", "Self-contained HTML report")
MEDIA_URL = re.compile(r"(?<!static)/media/[0-9a-f]")  # Streamlit's media, not its own fonts


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _status(url: str) -> int:
    """A plain HTTP GET, as any client without the token (no cookies, no session) sends it."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _gated_export_tab(browser: Any, url: str) -> tuple[Any, Any]:
    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    page.goto(f"{url}/?inv={INV}&tab=export")
    page.get_by_role("textbox", name="Access token").wait_for(timeout=90_000)
    page.get_by_role("textbox", name="Access token").fill(TOKEN)
    click_after_typing(page, page.get_by_role("button", name="Open"))
    for label in EXPORTS:
        page.get_by_role("button", name=label).wait_for(timeout=90_000)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    return context, page


def _download(page: Any, label: str) -> tuple[str, bytes]:
    with page.expect_download(timeout=90_000) as info:
        page.get_by_role("button", name=label).click()
    path = info.value.path()
    return str(info.value.url), Path(path).read_bytes()


def _until_gone(url: str, app: str, deadline_s: float = 120) -> int:
    """Streamlit drops a generated download at the second cleanup of unused media after it was
    made; a cleanup runs when any session's script run ends. So: one more script run (a
    session without the token, which only sees the prompt) until the URL answers 404."""
    deadline = time.monotonic() + deadline_s
    runs = 0
    while _status(url) != 404:
        assert time.monotonic() < deadline, f"{url} still served after {runs} script runs"
        with session(app) as ws:
            Session(ws).run()
        runs += 1
    return runs


def test_downloads_exist_only_after_a_gated_click_and_go_with_the_session(
        token_app: str, browser: Any) -> None:
    context, page = _gated_export_tab(browser, token_app)
    # drawn, not made: the page names no file on the server
    assert not MEDIA_URL.search(page.content())
    json_url, data = _download(page, "Analysis JSON")
    assert MEDIA_URL.search(json_url) and orjson.loads(data)["version"] == 1
    zip_url, data = _download(page, "Incident folder")
    assert data.startswith(b"PK") and zip_url != json_url
    html_url, data = _download(page, "Self-contained HTML report")
    assert TITLE.encode() in data and b"<html" in data.lower()
    context.close()  # the session ends; what it generated goes at the next cleanups
    for url in (json_url, zip_url, html_url):
        _until_gone(url, token_app)

    # another session that passed the gate shows the same export tab: the same analysis, so
    # the same bytes, which Streamlit would serve at the same URL (it names files by their
    # content) had the tab made them; it did not, so a client without the token gets nothing
    context, page = _gated_export_tab(browser, token_app)
    assert not MEDIA_URL.search(page.content())
    assert _status(json_url) == 404
    again, _ = _download(page, "Analysis JSON")
    assert again == json_url  # the URL probed above is where the tab's JSON would have been
    context.close()
    _until_gone(json_url, token_app)


def test_a_session_without_the_token_gets_no_download_at_all(token_app: str) -> None:
    with session(token_app) as ws:
        msgs = Session(ws).run(query=f"inv={INV}&tab=export")
        kinds = {e.WhichOneof("type") for e in elements(msgs)}
        assert "download_button" not in kinds and TITLE not in shown(msgs)
