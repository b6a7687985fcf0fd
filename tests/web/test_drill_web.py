"""The drills page: in-process with AppTest, and one drill completed in a real browser."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.web.conftest import chromium, run_app, running_app
from twice import drills
from twice.drills.store import DrillStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def drill_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "drill-cache"


@pytest.fixture(scope="session")
def investigations(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # one investigation store for these tests: the app imports the samples into it once
    return tmp_path_factory.getbasetemp() / "drill-web-investigations.sqlite3"


@pytest.fixture
def env(tmp_path: Path, drill_cache: Path, investigations: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TWICE_STORE", str(investigations))
    monkeypatch.setenv("TWICE_DRILL_STORE", str(tmp_path / "drills.sqlite3"))
    monkeypatch.setenv("TWICE_DRILL_CACHE", str(drill_cache))
    st.cache_resource.clear()  # the app caches its stores per process
    yield tmp_path / "drills.sqlite3"
    st.cache_resource.clear()


def _run(params: dict[str, str]) -> AppTest:
    return run_app(params)


def _text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [h.value for h in at.header] + \
        [t.value for t in at.title] + [t.value for t in at.text] + [s.value for s in at.success] \
        + [s.value for s in at.subheader] \
        + [i.value for i in at.info] + [e.value for e in at.error] + [c.value for c in at.caption]
    return "\n".join(str(p) for p in parts)


def test_a_drill_link_opens_the_drill_and_an_answer_is_explained(env: Path) -> None:
    drill = drills.drill_for(1, "model_reemission")
    at = _run({"drill": drill.id, "trainee": "ana"})
    assert at.title[0].value == f"Drill {drill.id}"
    before = _text(at)
    assert "model_reemission" not in before and "What gave it away" not in before
    assert f"?drill={drill.id}" in at.code[-1].value  # the shareable link: the id, no answer
    at.radio(key="drill_layer").set_value("step_retry")  # a wrong layer ...
    at.radio(key="drill_fix").set_value("unknown_outcome")  # ... and the right fix
    at.button(key="drill_submit").click().run()
    assert not at.exception, at.exception
    after = _text(at)
    assert "Score 1/2" in after
    assert at.header[0].value.startswith("model_reemission")
    assert "What gave it away" in after and "What would have misled" in after
    [saved] = DrillStore(env).history("ana")
    assert (saved.drill_id, saved.layer_answer, saved.score) == (drill.id, "step_retry", 1)
    assert "Progress" in after and "Trainee: ana" in after


def test_the_drills_home_offers_a_new_drill_per_level(env: Path) -> None:
    at = _run({"drill": "new"})
    assert at.title[0].value == "Drills"
    assert [b.key for b in at.button if b.key and b.key.startswith("new_drill_")] == [
        f"new_drill_{n}" for n in drills.CURRICULUM]
    at.button(key="new_drill_2").click().run()
    opened = at.query_params["drill"]
    opened = opened[-1] if isinstance(opened, list) else opened
    assert drills.parse_id(opened).level == 2


def test_a_mangled_drill_id_is_said_plainly(env: Path) -> None:
    at = _run({"drill": "L2-step_retry-1"})
    assert "not a drill id" in at.error[0].value


# --- in a real browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory, drill_cache: Path,
            investigations: Path) -> Iterator[str]:
    base = tmp_path_factory.mktemp("drill-web")
    with running_app({"TWICE_STORE": str(investigations),
                      "TWICE_DRILL_STORE": str(base / "drills.sqlite3"),
                      "TWICE_DRILL_CACHE": str(drill_cache)}) as url:
        yield url


def test_a_trainee_completes_a_drill_in_the_browser(app_url: str) -> None:
    drill = drills.drill_for(1, "model_reemission")  # the one the AppTest generated
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{app_url}/?drill={drill.id}")
        page.get_by_text("Which layer repeated the call?").wait_for(timeout=90_000)
        page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
        page.get_by_label("Your name").fill("chris")
        page.get_by_text("model_reemission — ", exact=False).click()
        page.get_by_text(drills.FIX_CHOICES["unknown_outcome"]).click()
        page.get_by_role("button", name="Check my answer").click()
        page.get_by_text("What gave it away").wait_for(timeout=60_000)
        body = page.locator("body").inner_text()
        assert "Score 2/2" in body
        assert "What would have misled" in body
        ROOT.joinpath("test-artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(ROOT / "test-artifacts" / "drill.png"), full_page=True)

