"""The investigation page in a real browser (Debian's chromium driven by Playwright): links
reproduce the verdict they were made with, search lands on the duplicate asked about, an
analysis that fails keeps the page, warnings are shown, the timeline opens on the call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.web.conftest import chromium, running_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _twice(*args: str) -> str:
    """The command line, as a user runs it."""
    done = subprocess.run([sys.executable, "-m", "twice.cli", *args], capture_output=True,
                          text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _verdict(page: Any) -> tuple[str, str]:
    """The verdict's heading (its layer first) and the confidence shown beside it."""
    heading = page.locator("h2#verdict, [id='verdict']").first
    heading.wait_for(timeout=90_000)
    confidence = page.locator("[data-testid='stMetricValue']").first
    confidence.wait_for(timeout=30_000)
    return str(heading.inner_text()), str(confidence.inner_text())


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    store = tmp_path_factory.mktemp("sweep_store") / "investigations.sqlite3"
    doc = json.loads(_twice("sweep", "sample_data/step_retry", "--bands", "5s,10s",
                            "--store", str(store), "--format", "json", "--no-progress"))
    return store, doc["groups"]


def test_a_sweeps_link_reopens_the_sweeps_verdict(
        swept: tuple[Path, list[dict[str, Any]]], browser: Any) -> None:
    store, groups = swept
    assert groups, "the sweep found the step retry's duplicate"
    group = groups[0]
    # narrow bands: not the verdict the default bands give (step_retry, tens of seconds)
    default = json.loads(_twice("analyze", "sample_data/step_retry", "--format", "json"))
    assert default["groups"][0]["duplicates"][0]["band"] != "minutes"
    with running_app({"TWICE_STORE": str(store)}) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        link = urlsplit(group["link"])
        page.goto(f"{url}/?{link.query}")
        heading, confidence = _verdict(page)
        assert heading.startswith(f"{group['layer']}:"), heading
        assert confidence == f"{group['confidence']:.2f}"
        page.wait_for_function("document.body.innerText.includes('minutes')", timeout=30_000)
        page.close()
