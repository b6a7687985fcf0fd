"""The drills pages: in-process with AppTest, and in a real browser a full drill with gradual
reveal and the team lead's cohort view with its CSV."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import streamlit as st
from playwright.sync_api import expect
from streamlit.testing.v1 import AppTest

from tests.web.conftest import chromium, click_after_typing, run_app, running_app, settled, shown
from twice import drills
from twice.drills.store import DrillStore

ROOT = Path(__file__).resolve().parents[2]
DRILL = drills.drill_for(1, "step_retry")  # the drill the terminal test plays too


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


def _text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [h.value for h in at.header] + \
        [t.value for t in at.title] + [t.value for t in at.text] + [s.value for s in at.success] \
        + [s.value for s in at.subheader] \
        + [i.value for i in at.info] + [e.value for e in at.error] + [c.value for c in at.caption]
    return "\n".join(str(p) for p in parts)


def _named(at: AppTest, name: str) -> AppTest:
    at.text_input(key="drill_name_input").set_value(name)
    return at.button(key="drill_name_submit").click().run()


def test_a_drill_link_reveals_sources_on_request_and_explains_the_answer(env: Path) -> None:
    at = run_app({"drill": DRILL.id, "trainee": "mallory"})  # a link never names the trainee
    assert at.title[0].value == f"Drill {DRILL.id}"
    before = _text(at)
    assert "step_retry" not in before and "What gave it away" not in before
    assert "may have been charged" in before and not at.dataframe  # the page only
    assert f"?drill={DRILL.id}" in at.code[-1].value  # the shareable link: the id, no answer
    at = _named(at, " Ana ")
    at.button(key="open_provider").click().run()
    assert len(at.dataframe) == 1 and "Gaps between the customer's requests" in _text(at)
    at.button(key="open_checkpoints").click().run()
    assert len(at.dataframe) == 2
    at.radio(key="drill_confidence").set_value(2)
    at.radio(key="drill_layer").set_value("model_reemission")  # a wrong layer ...
    at.radio(key="drill_fix").set_value("derived_key")  # ... and the right fix
    at.button(key="drill_submit").click().run()
    assert not at.exception, at.exception
    after = _text(at)
    assert "Score 2/3" in after
    assert "You said model_reemission. One tool call id" in after
    assert at.header[0].value.startswith("step_retry")
    assert "What gave it away" in after and "The expert's path" in after
    [saved] = DrillStore(env).history("ana")
    assert (saved.drill_id, saved.layer_answer, saved.opened, saved.confidence, saved.score) == (
        DRILL.id, "model_reemission", ("provider", "checkpoints"), 2, 2)
    assert DrillStore(env).history("mallory") == []
    assert "Progress" in after and "Answering as ana" in after


def test_the_drills_home_offers_a_new_drill_per_level(env: Path) -> None:
    at = run_app({"drill": "new"})
    assert at.title[0].value == "Drills"
    assert [b.key for b in at.button if b.key and b.key.startswith("new_drill_")] == [
        f"new_drill_{n}" for n in drills.CURRICULUM]
    at.button(key="new_drill_2").click().run()
    opened = at.query_params["drill"]
    opened = opened[-1] if isinstance(opened, list) else opened
    assert drills.parse_id(opened).level == 2


def test_a_mangled_drill_id_is_said_plainly(env: Path) -> None:
    at = run_app({"drill": "L2-step_retry-1"})
    assert "not a drill id" in at.error[0].value


# --- in a real browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, drill_cache: Path,
        investigations: Path) -> Iterator[tuple[str, Path]]:
    drills.generate(DRILL, drill_cache)  # before the app starts: no wait in the browser
    base = tmp_path_factory.mktemp("drill-web")
    scores = base / "drills.sqlite3"
    with running_app({"TWICE_STORE": str(investigations), "TWICE_DRILL_STORE": str(scores),
                      "TWICE_DRILL_CACHE": str(drill_cache)}) as url:
        yield url, scores


def test_a_trainee_completes_a_drill_with_gradual_reveal_in_the_browser(
        app: tuple[str, Path]) -> None:
    url, scores = app
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/?drill={DRILL.id}")
        page.get_by_label("Your name (your answers are kept under it)").fill("Chris")
        click_after_typing(page, page.get_by_role("button", name="Use this name"))
        page.get_by_text("Answering as chris").wait_for(timeout=90_000)
        body = page.locator("body").inner_text()
        assert "request id" not in body  # nothing but the page yet
        page.get_by_role("button", name="Show the provider's payment requests").click()
        page.get_by_text("Gaps between the customer's requests").first.wait_for(timeout=60_000)
        reveal = page.get_by_role("button", name="Show the traces")
        reveal.click()
        # the traces' run drawn and ended before the answer: the provider's chart is on the
        # page already, so a chart is no sign of it
        expect(reveal).to_be_disabled(timeout=60_000)
        settled(page)
        page.get_by_text("fairly sure").click()
        page.get_by_text(drills.LAYER_CHOICES["step_retry"]).click()
        page.get_by_text(drills.FIX_CHOICES["derived_key"]).click()
        page.get_by_text(drills.MITIGATION_CHOICES["refund_second"]).click()
        page.get_by_role("button", name="Check my answer").click()
        shown(page, page.get_by_text("What gave it away"))
        settled(page)  # the rest of the answer, and its timeline, drawn after it
        body = page.locator("body").inner_text()
        # the answer needs the checkpoints, which were not opened
        assert "Score 2/3" in body and "You answered without the agent's checkpoints" in body
        assert "The expert's path through the evidence" in body
        ROOT.joinpath("test-artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(ROOT / "test-artifacts" / "drill.png"), full_page=True)
    [saved] = DrillStore(scores).history("chris")
    assert saved.opened == ("provider", "spans") and saved.confidence == 3


def test_a_team_lead_assigns_a_set_and_reads_the_cohort_in_the_browser(
        app: tuple[str, Path], drill_cache: Path) -> None:
    url, scores = app
    store = DrillStore(scores)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000},
                                accept_downloads=True)
        page.goto(f"{url}/?drill=lead")
        page.get_by_label("Cohort", exact=True).first.fill("night shift")
        page.get_by_label("Trainees (one a line, or comma-separated)").fill("dana\nEli")
        page.get_by_label("… and/or these drill ids (comma-separated)").fill(
            f"{DRILL.id}, L2-6")
        click_after_typing(page, page.get_by_role("button", name="Assign"))
        page.get_by_text("2 trainees: dana, eli").wait_for(timeout=60_000)
        assert store.cohort("night shift") == (["dana", "eli"], [DRILL.id, "L2-6"])
        # dana answers the first drill of the set (as the drill page would record it)
        folder = drills.generate(DRILL, drill_cache)
        g = drills.grade(DRILL, folder, drills.Answer("redelivery", "derived_key",
                                                      ("provider", "checkpoints")))
        store.record("dana", DRILL, g, cohort="night shift", at=datetime.now(UTC))
        page.reload()
        page.get_by_text("Per layer (first tries)").wait_for(timeout=60_000)
        page.get_by_text("Per drill").wait_for()
        with page.expect_download() as download:
            page.get_by_role("button", name="Download the results (CSV)").click()
        rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
        assert len(rows) == 4  # two trainees, two drills
        dana = next(r for r in rows if r["trainee"] == "dana" and r["drill"] == DRILL.id)
        assert (dana["layer"], dana["first_answer"], dana["first_score"]) == (
            "step_retry", "redelivery", "2")
        page.screenshot(path=str(ROOT / "test-artifacts" / "drill-cohort.png"), full_page=True)
