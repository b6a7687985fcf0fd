"""Langfuse in the live form, in chromium, against the local Langfuse-compatible server the real
`langfuse` SDK fed (tests/connectors/test_langfuse_live.py): the form's two password fields (the
public and the secret key) read the observations and the verdict names the step retry; neither
key is on a page, in a field after the run, or in any file of the store. The server's own
LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY are never lent to the form: with the fields empty, the
Langfuse source fails even though the server's variables hold the right keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.connectors.test_langfuse_live import (  # noqa: F401 (traced: a fixture)
    PUBLIC_KEY,
    SECRET_KEY,
    STRIPE_KEY,
    Store,
    traced,
)
from tests.web.conftest import chromium, running_app
from tests.web.test_live_form_sources import _investigate
from twice.store import open_store
from twice.web.forms import KEY_LABEL, PUBLIC_KEY_LABEL

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's aiohttp


def test_langfuse_from_the_live_form_finds_the_step_retry_and_keeps_no_key(
        traced: tuple[str, str, str, Store], tmp_path: Path) -> None:  # noqa: F811
    stripe_url, customer, lf_url, _ = traced
    store = tmp_path / "investigations.sqlite3"
    env = {"TWICE_STORE": str(store), "TWICE_STRIPE_BASE_URL": stripe_url,
           "TWICE_ACCESS_TOKEN": "", "TWICE_EVIDENCE_DIR": "",
           "LANGFUSE_PUBLIC_KEY": PUBLIC_KEY, "LANGFUSE_SECRET_KEY": SECRET_KEY}
    with running_app(env) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 2200})  # the whole form
        # the key fields left empty: the server's own keys are not lent
        text = _investigate(page, url, customer, lf_url, "", backend="Langfuse",
                            public_key="", stripe_key=STRIPE_KEY)
        assert "Partial:" in text and "no Langfuse keys" in text
        assert "two tool spans" not in text
        text = _investigate(page, url, customer, lf_url, SECRET_KEY, backend="Langfuse",
                            public_key=PUBLIC_KEY, stripe_key=STRIPE_KEY)
        assert "step_retry" in text and "Partial:" not in text
        page.get_by_text("two tool spans", exact=False).first.wait_for(timeout=60_000)
        content = page.content()
        assert PUBLIC_KEY not in content and SECRET_KEY not in content
        page.get_by_text("New investigation from live sources").click()
        assert page.get_by_label(KEY_LABEL).input_value() == ""
        assert page.get_by_label(PUBLIC_KEY_LABEL).input_value() == ""
    saved = [s for s in open_store(str(store)).list() if s.title.startswith("Live:")]
    assert sorted("partial" in s.tags for s in saved) == [False, True]
    for path in store.parent.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert PUBLIC_KEY.encode() not in data and SECRET_KEY.encode() not in data, path
