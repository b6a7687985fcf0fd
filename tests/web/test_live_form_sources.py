"""The live form's trace backends: Jaeger, Tempo, Phoenix, LangSmith and Langfuse are choices,
and the backend's API key (Langfuse's two keys) is a password field used for one request. In
chromium against the local LangSmith server the real `langsmith` SDK fed
(tests/connectors/test_langsmith_live.py): the form's key reads the runs and the verdict names
the step retry; the key is on no page, in no field after the run, and in no file of the store.
The server's own LANGSMITH_API_KEY is never lent to the form: with the key field empty, the
LangSmith source fails (401) even though the server's variable holds the right key (Langfuse:
tests/web/test_live_form_langfuse.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.connectors.test_langsmith_live import LS_KEY, STRIPE_KEY, Store, traced  # noqa: F401
from tests.web.conftest import choose, chromium, investigate_in_browser, running_app, samples_in
from twice.store import open_store
from twice.web.forms import KEY_LABEL, PUBLIC_KEY_LABEL, TRACE_BACKENDS, trace_target

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's aiohttp


def _investigate(page: Any, url: str, customer: str, address: str, key: str, *,
                 backend: str = "LangSmith", public_key: str | None = None,
                 stripe_key: str = STRIPE_KEY) -> str:
    page.goto(url)
    page.get_by_text("Incidents").first.wait_for(timeout=120_000)
    samples_in(page)  # a fresh store: its last refresh could eat the Investigate click
    page.get_by_text("New investigation from live sources").click()
    page.get_by_role("textbox", name="Customer, payment intent or charge id").fill(customer)
    page.get_by_role("textbox", name="Around (UTC)").fill(
        datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    page.get_by_label("Stripe restricted key (used for this request only, never saved)") \
        .fill(stripe_key)
    offered = choose(page, "Trace backend", backend)
    assert offered == [label for label, _, _ in TRACE_BACKENDS.values()]
    page.get_by_role("textbox", name="Trace backend address (optional)").fill(address)
    field = page.get_by_label(KEY_LABEL)
    assert field.get_attribute("type") == "password"
    field.fill(key)
    if public_key is not None:
        public = page.get_by_label(PUBLIC_KEY_LABEL)
        assert public.get_attribute("type") == "password"
        public.fill(public_key)
    investigate_in_browser(page)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    return str(page.locator("body").inner_text())


def test_langsmith_from_the_live_form_finds_the_step_retry_and_keeps_no_key(
        traced: tuple[str, str, str, Store], tmp_path: Path) -> None:  # noqa: F811
    stripe_url, customer, ls_url, _ = traced
    store = tmp_path / "investigations.sqlite3"
    env = {"TWICE_STORE": str(store), "TWICE_STRIPE_BASE_URL": stripe_url,
           "TWICE_ACCESS_TOKEN": "", "TWICE_EVIDENCE_DIR": "", "LANGSMITH_API_KEY": LS_KEY}
    address = f"{ls_url}/billing%20agents"
    with running_app(env) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 2000})  # the whole form
        # the key field left empty: the server's own key is not lent
        text = _investigate(page, url, customer, address, "")
        assert "Partial:" in text and "HTTP 401" in text
        assert "two tool spans" not in text
        text = _investigate(page, url, customer, address, LS_KEY)
        assert "step_retry" in text and "Partial:" not in text
        page.get_by_text("two tool spans", exact=False).first.wait_for(timeout=60_000)
        assert LS_KEY not in page.content()
        page.get_by_text("New investigation from live sources").click()
        assert page.get_by_label(KEY_LABEL).input_value() == ""
    saved = [s for s in open_store(str(store)).list() if s.title.startswith("Live:")]
    assert sorted("partial" in s.tags for s in saved) == [False, True]
    for path in store.parent.glob("*"):
        if path.is_file():
            assert LS_KEY.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(("kind", "typed", "key", "url", "given"), [
    ("jaeger", "http://h:16686", "", "jaeger+http://h:16686", None),
    ("none", "tempo+http://u:p@h:3200", "", "tempo+http://u:p@h:3200", None),
    ("phoenix", "http://h:6006/proj", "k/y", "phoenix+http://:k%2Fy@h:6006/proj", None),
    ("langsmith", "my agents", "", "langsmith://my%20agents", ""),
    ("langsmith", "http://127.0.0.1:5/p", "lsv2", "langsmith+http://127.0.0.1:5/p", "lsv2"),
    ("none", "langsmith://p", "", "langsmith://p", ""),  # typed whole: still no lent key
    ("langsmith", "", "lsv2", None, None),
])
def test_the_forms_choice_address_and_key_make_the_backend_url(
        kind: str, typed: str, key: str, url: str | None, given: str | None) -> None:
    assert trace_target(kind, typed, key) == (url, given)


@pytest.mark.parametrize(("typed", "secret", "public", "url"), [
    ("https://cloud.langfuse.com", "sk-lf/1", "pk-lf-1",
     "langfuse+https://pk-lf-1:sk-lf%2F1@cloud.langfuse.com"),
    ("http://h:3000", "", "pk-lf-1", "langfuse+http://h:3000"),  # half the keys: none sent
    ("langfuse+http://h:3000", "sk", "pk", "langfuse+http://pk:sk@h:3000"),
    ("langfuse+http://a:b@h:3000", "sk", "pk", "langfuse+http://a:b@h:3000"),  # typed: kept
])
def test_langfuse_keys_go_in_the_url_and_the_servers_are_never_lent(
        typed: str, secret: str, public: str, url: str) -> None:
    # "" as the key: the backend reads no LANGFUSE_*_KEY of the server's environment
    assert trace_target("langfuse", typed, secret, public) == (url, "")
    assert trace_target("none", url, "", "") == (url, "")
