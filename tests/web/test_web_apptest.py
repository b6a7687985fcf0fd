"""Page flow and URL state with Streamlit's AppTest (the app's script run in-process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.web.conftest import run_app
from twice.store import open_store
from twice.web.cache import sample_import


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "investigations.sqlite3"
    monkeypatch.setenv("TWICE_STORE", str(path))
    st.cache_resource.clear()  # the app caches its store per process
    yield path
    st.cache_resource.clear()


def run(params: dict[str, str] | None = None) -> AppTest:
    return run_app(params)


def text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [h.value for h in at.header] + \
        [t.value for t in at.title] + [e.value for e in at.error] + [c.value for c in at.caption] \
        + [t.value for t in at.text] + [s.value for s in at.subheader] \
        + [f"{p.proto.label} ({p.proto.query_string})" for p in at.get("page_link")]
    return "\n".join(str(p) for p in parts)


def test_opens_on_the_bundled_samples(store_path: Path) -> None:
    """A new store's first visit ends on every sample. AppTest follows the page's own reruns
    (each second while the samples are analysed in the background) until the last one, so
    the list drawn at once, each sample joining it, is checked in a real browser
    (tests/web/test_incidents_browser.py)."""
    at = run()
    assert at.title[0].value == "Incidents"
    assert not sample_import().running, "the page ran again until the samples were in"
    page = text(at)
    assert "Analysing the bundled samples" not in page
    for name in ["step retry", "redelivery", "model reemission", "control new turn"]:
        assert f"Sample: {name}" in page
    assert "9 incidents" in page and "(inv=sample-step-retry&tab=verdict)" in page
    assert ":blue[**Sample: step retry**] (inv=sample-step-retry&tab=verdict)" in page


def test_a_shared_link_reproduces_the_verdict_view(store_path: Path) -> None:
    at = run({"inv": "sample-step-retry", "tab": "verdict"})
    assert at.header[0].value.startswith("step_retry")
    page = text(at)
    assert "key_regenerated" in page
    assert "What really happened" not in page  # notes live on the notes tab
    assert "?inv=sample-step-retry" in at.code[-1].value
    assert "tab=verdict" in at.code[-1].value


def test_missing_investigation_is_said_plainly(store_path: Path) -> None:
    at = run({"inv": "no-such-investigation"})
    assert "was not found" in at.error[0].value


def test_changing_tab_rewrites_the_url(store_path: Path) -> None:
    at = run({"inv": "sample-model-reemission", "tab": "verdict"})
    at.radio[0].set_value("notes").run()
    assert at.query_params["tab"] == ["notes"] or at.query_params["tab"] == "notes"
    assert "What really happened" in text(at)


def test_a_note_is_saved_with_the_investigation(store_path: Path) -> None:
    at = run({"inv": "sample-redelivery", "tab": "notes"})
    # by label: the header's status form has a text box and a button too
    next(t for t in at.text_input if t.label == "Your name").set_value("ana")
    at.text_area[0].set_value("visibility timeout 6 min < run time 9 min")
    next(b for b in at.button if b.label == "Add note").click().run()
    notes = open_store(str(store_path)).get("sample-redelivery").notes  # type: ignore[union-attr]
    assert any(n.author == "ana" and "visibility timeout" in n.text for n in notes)


def test_controls_have_no_verdict(store_path: Path) -> None:
    at = run({"inv": "sample-control-new-turn", "tab": "verdict"})
    assert any("No logical call executed more than once" in s.value for s in at.success)
    assert not at.header  # no verdict heading
    assert [h.value for h in at.subheader] == ["Not a duplicate"]
    assert any("look-alike pair(s) dismissed" in m.value for m in at.markdown)


def test_the_exported_incident_folder_reloads_to_the_same_verdicts(
        store_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import json
    import zipfile

    from twice.cli import main
    from twice.engine import analyze
    from twice.web.export import incident_zip

    run()  # imports the samples into the store, in the background
    assert sample_import().wait(timeout=600)
    snap = open_store(str(store_path)).get("sample-redelivery")
    assert snap is not None
    with zipfile.ZipFile(io.BytesIO(incident_zip(snap, analyze(snap.timeline)))) as z:
        z.extractall(tmp_path)
    folder = tmp_path / "twice-sample-redelivery"
    exported = json.loads((folder / "analysis.json").read_text())
    capsys.readouterr()
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    reloaded = json.loads(capsys.readouterr().out)
    assert [(g["group_id"], [d["layer"] for d in g["duplicates"]]) for g in reloaded["groups"]] \
        == [(g["group_id"], [d["layer"] for d in g["duplicates"]]) for g in exported["groups"]] \
        == [(exported["groups"][0]["group_id"], ["redelivery"])]


def test_an_investigation_saved_here_opens_with_the_analysis_it_was_saved_with(
        store_path: Path) -> None:
    """Saving analyses the evidence once (the store's summary is made of it); its page opens
    with that analysis, the same as analysing the saved snapshot again would give."""
    from twice.connectors import registry
    from twice.report import to_contract
    from twice.web.cache import analysis_of, get_analysis, get_store, save_analysed

    found, _ = registry.scan_folder(Path(__file__).resolve().parents[2] / "sample_data"
                                    / "redelivery")
    loaded = registry.load_all([(n, p, {}) for n, p in found])
    store = get_store()
    warnings = [{"source": w.source, "detail": w.detail} for w in loaded.warnings]
    inv = save_analysed(store, "Saved here", loaded.rows, sources=["x"], warnings=warnings)
    kept = get_analysis(inv, store)
    again = analysis_of(open_store(str(store_path)).get(inv))  # type: ignore[arg-type]
    assert kept[1] is None and again[1] is None
    assert to_contract(kept[0]) == to_contract(again[0])
    assert kept[0] is not again[0] and get_analysis(inv, store) is kept  # not made again
    at = run({"inv": inv, "tab": "verdict"})
    assert at.header[0].value.startswith("redelivery")
