"""The investigation page in a real browser (Debian's chromium driven by Playwright): links
reproduce the verdict they were made with, search lands on the duplicate asked about, an
analysis that fails keeps the page, warnings are shown, the timeline opens on the call."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.web.conftest import chromium, click_after_typing, running_app, samples_in, settled

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
    """The verdict's heading (its layer first) and the confidence shown beside it, read by
    the metric's label once the page has drawn it (Streamlit draws a page in pieces, and a
    metric of the run before may stand where the confidence will be)."""
    heading = page.locator("h2#verdict, [id='verdict']").first
    heading.wait_for(timeout=90_000)
    confidence = page.locator("[data-testid='stMetric']").filter(
        has=page.locator("[data-testid='stMetricLabel']", has_text="Confidence")
    ).locator("[data-testid='stMetricValue']").first
    confidence.wait_for(timeout=30_000)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
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


BUSY_DAY = "busy-day"
BUSY_DAY_SAMPLES = ("step_retry", "redelivery", "sdk_retry", "gateway_retry",
                    "model_reemission")


def _load(name: str):  # type: ignore[no-untyped-def]
    from twice.connectors import registry

    found, _ = registry.scan_folder(ROOT / "sample_data" / name)
    return registry.load_all([(n, p, {}) for n, p in found]).rows


@pytest.fixture(scope="module")
def busy_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """The app on a store holding a busy day: five incidents of five customers uploaded as one
    investigation (five duplicate groups), beside the bundled samples."""
    from twice.engine import analyze
    from twice.store import open_store
    from twice.timeline import concat

    path = tmp_path_factory.mktemp("busy") / "investigations.sqlite3"
    timeline = concat([_load(n) for n in BUSY_DAY_SAMPLES])
    analysis = analyze(timeline)
    store = open_store(str(path))
    store.create("Busy day upload", timeline, id=BUSY_DAY, analysis=analysis)
    from tests.web.test_figures import changed_amount

    step = _load("step_retry")
    store.create("Changed amount", changed_amount(step, analyze(step)), id="changed-amount")
    with running_app({"TWICE_STORE": str(path)}) as url:
        yield url, analysis


def _search(page: Any, url: str, term: str) -> list[str]:
    """Type `term` into the incidents search; the links of the duplicates it lists."""
    page.goto(f"{url}/")
    box = page.get_by_role("textbox", name="Search")
    box.wait_for(timeout=60_000)
    samples_in(page)  # a fresh store: the list redraws itself each second until they are in
    box.fill(term)
    box.press("Enter")
    page.get_by_text("Duplicates", exact=True).wait_for(timeout=30_000)
    # the page says how many duplicates it found: wait until it shows a link to each
    page.wait_for_function(
        "() => { const t = document.body.innerText;"
        " if (t.includes(\"No duplicate's attempts\")) return true;"
        " const m = t.match(/(\\d+) duplicates? hold every word/); if (!m) return false;"
        " const links = new Set([...document.querySelectorAll('a[href*=\"dup=\"]')]"
        ".map(a => a.href)); return links.size >= Number(m[1]); }", timeout=30_000)
    hrefs = page.locator("a[href*='dup=']").evaluate_all("els => els.map(e => e.href)")
    # the investigation a hit is in links to that hit too: each link once
    return list(dict.fromkeys(unquote(h) for h in hrefs if f"inv={BUSY_DAY}&" in h))


def test_search_lands_on_the_duplicate_asked_about(busy_app: tuple[str, Any],
                                                    browser: Any) -> None:
    url, analysis = busy_app
    by_layer = {g.worst_layer.value: g for g in analysis.groups}
    redelivery = by_layer["redelivery"]
    assert analysis.groups[0] is not redelivery  # not the newest: the old links opened that
    key = f"{redelivery.group_id}:{redelivery.duplicates[0].second}"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # by customer, by amount written either way, by a charge id only the events name
    second = next(r for r in redelivery.records
                  if r["attempt_id"] == redelivery.duplicates[0].second)
    charge = str(second["object_id"]).replace("pi_", "ch_")
    for term in ("cus_ZBAwnAjde5AD75", "29.00", "2900", charge, str(second["request_id"])):
        hits = _search(page, url, term)
        assert len(hits) == 1, (term, hits)
        assert f"dup={key}" in hits[0] and "tab=verdict" in hits[0], (term, hits)
    # the investigation found through it opens on it too, not on its newest duplicate
    # (the list is drawn after the duplicates' links: wait for it, then read every link of it)
    page.wait_for_function(
        "key => [...document.querySelectorAll('a')].some(a => a.innerText.includes("
        "'Busy day upload') && decodeURIComponent(a.href).includes('dup=' + key))", arg=key,
        timeout=30_000)
    settled(page)  # the list before the search, stale, gone
    listed = page.get_by_role("link", name="Busy day upload")
    assert all(f"dup={key}" in unquote(str(h)) for h in listed.evaluate_all(
        "els => els.map(e => e.getAttribute('href'))")), "the list links to the newest"
    page.goto(hits[0])
    heading, _ = _verdict(page)
    assert heading.startswith("redelivery:"), heading
    picker = page.locator("[data-testid='stSelectbox']").filter(has_text="Duplicate")
    shown = picker.evaluate("el => el.innerText + ' ' + [...el.querySelectorAll('input')]"
                            ".map(i => i.value).join(' ')")
    assert "cus_ZBAwnAjde5AD75 · 29.00 USD" in shown, shown
    # and the tool call, as the evidence names it (issue 20: customer · amount · tool · ...)
    assert redelivery.tool_name and f"29.00 USD · {redelivery.tool_name} · " in shown, shown
    # "9.00" is two customers' amount (both 900 usd), not the 49.00 of a third
    hits = _search(page, url, "9.00")
    assert {h.split("dup=")[1].split(":")[0] for h in hits} == {
        by_layer["step_retry"].group_id, by_layer["sdk_retry"].group_id}
    page.close()


def test_an_analysis_that_fails_keeps_the_page(tmp_path: Path, browser: Any) -> None:
    """A real failing shape: a saved investigation whose clock tolerance (1e12 s, as a store
    written by hand or by another version may hold) overflows the engine's time arithmetic."""
    from twice.engine import Options
    from twice.store import open_store

    path = tmp_path / "investigations.sqlite3"
    store = open_store(str(path))
    timeline = _load("step_retry")
    inv_id = store.create("Broken options", timeline, id="broken",
                          options=Options(tolerance_s=1e12))
    saved = store.get(inv_id)
    # saved anyway: what loaded, and the failure as its warning
    assert saved is not None and len(saved.timeline) == len(timeline)
    assert any("The analysis failed on" in w["detail"] for w in saved.warnings)
    with running_app({"TWICE_STORE": str(path)}) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/?inv=broken&tab=verdict")
        page.wait_for_function("document.body.innerText.includes('The analysis failed on')",
                               timeout=90_000)
        body = page.locator("body").inner_text()
        assert "OutOfBoundsTimedelta" in body  # the reason
        assert "events.json" in body  # the inputs, by their file names
        assert "What loaded is kept and saved" in body and "No verdict" in body
        assert "Traceback" not in body
        assert page.locator("[data-testid='stException']").count() == 0
        # what loaded is still drawn
        page.goto(f"{url}/?inv=broken&tab=timeline")
        page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
        assert page.locator("[data-testid='stException']").count() == 0
        page.close()


def test_loader_warnings_are_on_the_page_in_the_export_and_the_report(
        tmp_path: Path, browser: Any) -> None:
    import shutil

    import orjson

    from twice.connectors import registry
    from twice.report import to_contract
    from twice.store import open_store
    from twice.web.cache import analysis_of
    from twice.web.report_html import build_report

    folder = tmp_path / "evidence"
    shutil.copytree(ROOT / "sample_data" / "step_retry", folder)
    with (folder / "stripe_logs.jsonl").open("a") as f:  # two lines the loader skips
        f.write('{"not": "a log line"}\nnot json <script>alert(1)</script>\n')
    found, _ = registry.scan_folder(folder)
    loaded = registry.load_all([(n, p, {}) for n, p in found])
    assert len(loaded.warnings) == 2
    path = tmp_path / "investigations.sqlite3"
    store = open_store(str(path))
    store.create("With warnings", loaded.rows, id="warned", warnings=loaded.warnings)
    snap = store.get("warned")
    assert snap is not None
    analysis, failure = analysis_of(snap)
    assert failure is None
    exported = orjson.loads(orjson.dumps(to_contract(analysis)))
    assert [w["detail"] for w in exported["warnings"]] == [w.detail for w in loaded.warnings]
    report = build_report(snap, analysis)
    assert "Warnings (2)" in report and "not valid JSON" in report
    assert "<script>alert(1)" not in report
    with running_app({"TWICE_STORE": str(path)}) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/?inv=warned&tab=verdict")
        _verdict(page)
        expander = page.get_by_text("Warnings (2)")
        expander.click()
        page.wait_for_function("document.body.innerText.includes('not valid JSON')",
                               timeout=30_000)
        assert "stripe_logs.jsonl:18" in page.locator("body").inner_text()
        page.close()


def test_the_timeline_opens_on_the_selected_call(busy_app: tuple[str, Any],
                                                 browser: Any) -> None:
    url, analysis = busy_app
    group = next(g for g in analysis.groups if g.worst_layer.value == "step_retry")
    key = f"{group.group_id}:{group.duplicates[0].second}"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv={BUSY_DAY}&dup={key}&tab=timeline")
    chart = page.locator(".js-plotly-plot").first
    chart.wait_for(timeout=90_000)
    page.wait_for_function("() => { const gd = document.querySelector('.js-plotly-plot');"
                           " return gd && gd._fullLayout && gd._fullLayout.xaxis; }",
                           timeout=30_000)
    shown = chart.evaluate("""gd => {
        const xa = gd._fullLayout.xaxis, ring = gd._fullData.find(
            t => t.name === 'selected group');
        return {span: xa.r2l(xa.range[1]) - xa.r2l(xa.range[0]),
                lo: xa.range[0], hi: xa.range[1],
                ring: ring ? ring.marker.color : null};
    }""")
    gap_ms = group.duplicates[0].gap_seconds * 1000
    # five incidents over three days are in the data; the view is the call's 34 s and context
    assert gap_ms < shown["span"] < gap_ms * 2 + 120_000, shown
    assert shown["ring"] == "#000000"
    page.close()


def test_a_control_sample_lists_the_pairs_it_dismissed(busy_app: tuple[str, Any],
                                                       browser: Any) -> None:
    url, _ = busy_app
    truth = json.loads((ROOT / "sample_data" / "control_renewal" / "truth.json").read_text())
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv=sample-control-renewal&tab=verdict")
    page.get_by_text("Not a duplicate", exact=True).wait_for(timeout=90_000)
    page.wait_for_function(f"document.body.innerText.includes('{truth['customer']}')",
                           timeout=30_000)
    body = page.locator("body").inner_text()
    assert "look-alike pair(s) dismissed" in body
    assert "30.0 d apart, beyond the 15.0 min" in body  # the renewal, a month later
    assert "nothing to explain" not in body
    page.close()


def test_the_verdict_warns_when_the_attempts_disagree(busy_app: tuple[str, Any],
                                                      browser: Any) -> None:
    url, _ = busy_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv=changed-amount&tab=verdict")
    _verdict(page)
    page.wait_for_function("document.body.innerText.includes('do not agree on')",
                           timeout=30_000)
    alert = page.locator("[data-testid='stAlert']").filter(has_text="do not agree on")
    assert "amount (900, 1900)" in alert.inner_text()
    page.close()


def test_a_raw_record_is_shown_with_its_file_and_line(busy_app: tuple[str, Any],
                                                      browser: Any) -> None:
    url, _ = busy_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv=sample-step-retry&tab=verdict")
    page.get_by_text("Raw records", exact=True).wait_for(timeout=90_000)
    code = page.locator("[data-testid='stCode']").filter(has_text='"origin"').first
    code.wait_for(timeout=30_000)
    text = code.inner_text()
    assert "sample_data/step_retry/checkpoints.sqlite" in text and '"subject"' in text
    code.hover()
    assert code.locator("button").count() >= 1  # copy
    page.close()


def test_uploaded_evidence_opens_and_its_records_name_the_uploaded_files(
        busy_app: tuple[str, Any], browser: Any) -> None:
    url, _ = busy_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/")
    page.get_by_text("Incidents").first.wait_for(timeout=120_000)
    samples_in(page)  # the store's samples: their last refresh could eat the upload's click
    page.get_by_text("New investigation from files").click()
    folder = ROOT / "sample_data" / "step_retry"
    files = [str(p) for p in sorted(folder.iterdir()) if p.name not in ("truth.json",
                                                                         "README.md")]
    page.locator("[data-testid='stFileUploaderDropzoneInput']").first.set_input_files(files)
    page.get_by_role("button", name="Analyse files").click(timeout=60_000)
    heading, _ = _verdict(page)
    assert heading.startswith("step_retry:") and "inv=" in page.url
    page.get_by_text("Raw records", exact=True).wait_for(timeout=30_000)
    code = page.locator("[data-testid='stCode']").filter(has_text='"origin"').first
    text = code.inner_text()
    assert '"origin": "checkpoints.sqlite' in text, text  # as uploaded, not a server path
    assert "/tmp" not in page.locator("body").inner_text()
    page.close()


def test_a_box_drawn_on_the_timeline_is_the_links_window(busy_app: tuple[str, Any],
                                                         browser: Any) -> None:
    from urllib.parse import parse_qs

    url, _ = busy_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv=sample-step-retry&tab=timeline")
    chart = page.locator(".js-plotly-plot").first
    chart.wait_for(timeout=90_000)
    drag = page.locator(".js-plotly-plot .nsewdrag").first
    drag.wait_for(state="attached", timeout=30_000)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    box = drag.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, y + 5, steps=8)
    page.mouse.up()
    page.wait_for_url(lambda u: "t0=" in u and "t1=" in u, timeout=30_000)
    query = parse_qs(urlsplit(page.url).query)
    assert query["inv"] == ["sample-step-retry"] and query["tab"] == ["timeline"]
    # the link reopens that window: the axis is the box's stretch of time
    page.goto(page.url)
    page.locator(".js-plotly-plot").first.wait_for(timeout=90_000)
    page.get_by_role("button", name="Fit to the call again").wait_for(timeout=30_000)
    page.close()


def test_the_attempts_diff_highlights_the_fields_that_differ(busy_app: tuple[str, Any],
                                                             browser: Any) -> None:
    url, _ = busy_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv=changed-amount&tab=verdict")
    _verdict(page)
    table = page.locator("table.twice-diff")
    table.wait_for(timeout=30_000)
    cells = table.evaluate("""t => Object.fromEntries([...t.querySelectorAll('tbody tr')].map(
        r => [r.dataset.field, {cls: r.querySelector('td').className,
                               values: [...r.querySelectorAll('td')].slice(0, 2).map(
                                   c => c.innerText),
                               bg: getComputedStyle(r.querySelector('td')).backgroundColor}]))""")
    amount = cells["amount"]
    assert amount["values"] == ["900", "1900"] and "must-agree" in amount["cls"], amount
    assert cells["idempotency key"]["cls"] == "differ"  # a retry's own key: differs, expected
    assert cells["customer"]["cls"] == ""  # the same customer: not marked
    # marked cells are drawn in colour, unmarked ones are not
    assert amount["bg"] != cells["customer"]["bg"] != cells["idempotency key"]["bg"]
    page.close()


# the timeline chart: the one the page listens on for pans and zooms (not the waterfall below)
TIMELINE = ".js-plotly-plot[data-twice-range]"


def _axis(page: Any) -> list[float]:
    """The timeline's x range now, in ms since the epoch (plotly's own axis)."""
    page.wait_for_function(f"() => {{ const gd = document.querySelector('{TIMELINE}');"
                           " return gd && gd._fullLayout && gd._fullLayout.xaxis; }",
                           timeout=60_000)
    return list(page.locator(TIMELINE).first.evaluate(
        "gd => gd._fullLayout.xaxis.range.map(v => gd._fullLayout.xaxis.r2l(v))"))


def _window(page_url: str) -> tuple[Any, Any]:
    from urllib.parse import parse_qs

    import pandas as pd

    query = parse_qs(urlsplit(page_url).query)
    return pd.Timestamp(query["t0"][0]), pd.Timestamp(query["t1"][0])


def test_a_pan_and_a_typed_range_are_the_links_window(busy_app: tuple[str, Any],
                                                      browser: Any) -> None:
    import pandas as pd

    url, _ = busy_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv=sample-step-retry&tab=timeline")
    page.locator(".js-plotly-plot .nsewdrag").first.wait_for(state="attached", timeout=90_000)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    before = _axis(page)
    # the pan tool of the chart's toolbar, then a drag to the right: earlier times come in
    chart = page.locator(TIMELINE).first
    chart.hover()
    chart.locator(".modebar-btn[data-val='pan']").click()
    drag = chart.locator(".nsewdrag").first
    box = drag.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=8)
    page.mouse.up()
    page.wait_for_url(lambda u: "t0=" in u and "t1=" in u, timeout=30_000)
    t0, t1 = _window(page.url)
    span_ms = before[1] - before[0]
    shift_ms = before[0] - t0.value / 1e6
    # a pan keeps the span and moves the window a third of it (the drag) to the past
    assert abs((t1 - t0).total_seconds() * 1000 - span_ms) < span_ms * 0.01
    assert span_ms * 0.2 < shift_ms < span_ms * 0.4, (shift_ms, span_ms)
    # the link reopens that window
    page.goto(page.url)
    page.get_by_role("button", name="Fit to the call again").wait_for(timeout=90_000)
    reopened = _axis(page)
    assert abs(reopened[0] - t0.value / 1e6) < 2 and abs(reopened[1] - t1.value / 1e6) < 2
    # a typed range: From / To, then Show (the fitted view's first 50 s: the first attempt)
    start = pd.Timestamp(before[0], unit="ms").floor("s")
    end = start + pd.Timedelta(seconds=50)
    page.get_by_role("textbox", name="From (UTC)").fill(f"{start:%Y-%m-%d %H:%M:%S}")
    page.get_by_role("textbox", name="To (UTC)").fill(f"{end:%Y-%m-%d %H:%M:%S}")
    click_after_typing(page, page.get_by_role("button", name="Show this range"))
    page.wait_for_url(lambda u: f"t0={start:%Y-%m-%d}" in unquote(u)
                      and _window(u)[1] - _window(u)[0] == pd.Timedelta(seconds=50),
                      timeout=30_000)
    page.goto(page.url)
    page.get_by_role("button", name="Fit to the call again").wait_for(timeout=90_000)
    axis = _axis(page)
    assert abs(axis[0] - start.value / 1e6) < 2 and abs(axis[1] - axis[0] - 50_000) < 2, axis
    # a range that is not one says so and keeps the view
    page.get_by_role("textbox", name="To (UTC)").fill("yesterday-ish")
    click_after_typing(page, page.get_by_role("button", name="Show this range"))
    page.get_by_text("The time range was not changed").wait_for(timeout=30_000)
    page.close()


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def test_the_gaps_band_labels_do_not_overprint_on_a_phone(busy_app: tuple[str, Any],
                                                          browser: Any) -> None:
    url, _ = busy_app
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True,
                            has_touch=True, device_scale_factor=3)
    page.goto(f"{url}/?inv={BUSY_DAY}&tab=gaps")
    labels = page.locator(".js-plotly-plot .annotation")
    labels.first.wait_for(timeout=90_000)
    page.wait_for_function("() => document.querySelectorAll("
                           "'.js-plotly-plot .annotation').length >= 4", timeout=30_000)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    texts = labels.locator(".annotation-text")
    boxes = [texts.nth(i).bounding_box() for i in range(texts.count())]
    names = texts.all_inner_texts()
    assert len(boxes) == 4 and all(b is not None for b in boxes), names
    for i, a in enumerate(boxes):
        assert a["x"] >= 0 and a["x"] + a["width"] <= 390, (names[i], a)  # on the screen
        for j in range(i + 1, len(boxes)):
            assert not _overlap(a, boxes[j]), (names[i], names[j], a, boxes[j])
    # nor over the chart's title
    title = page.locator(".js-plotly-plot .gtitle").first.bounding_box()
    assert title is not None and not any(_overlap(title, b) for b in boxes)
    page.close()


def test_the_calls_spans_are_a_waterfall_under_their_parents(busy_app: tuple[str, Any],
                                                             browser: Any) -> None:
    url, analysis = busy_app
    group = next(g for g in analysis.groups if g.worst_layer.value == "sdk_retry")
    key = f"{group.group_id}:{group.duplicates[0].second}"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv={BUSY_DAY}&dup={key}&tab=timeline")
    page.get_by_text("Spans of the selected call", exact=True).wait_for(timeout=90_000)
    chart = page.locator(".js-plotly-plot").nth(1)
    chart.locator(".barlayer .point").first.wait_for(timeout=30_000)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    # the bars on screen: one per span, by row; the tool span's row first, its two HTTP
    # attempts (the SDK's retry) indented under it, each bar inside its parent's stretch
    bars = chart.evaluate("""gd => [...gd.querySelectorAll('.barlayer .trace')].flatMap(t =>
        [...t.querySelectorAll('.point')].map((p, i) => {
            const b = p.getBoundingClientRect(), tr = t.__data__[0].trace;
            return {lane: tr.name, row: tr.y[i], left: b.left, right: b.right,
                    outlined: Array.isArray(tr.marker.line.width)
                              ? tr.marker.line.width[i] > 0 : tr.marker.line.width > 0};
        }))""")
    ticks = chart.locator(".ytick text").evaluate_all("els => els.map(e => e.textContent)")
    by_row = sorted(bars, key=lambda b: b["row"])
    assert [b["lane"] for b in by_row] == ["tool spans", "HTTP spans", "HTTP spans"], by_row
    assert not ticks[0].startswith("\u2003") and all(t.startswith("\u2003") for t in ticks[1:])
    parent = by_row[0]
    for child in by_row[1:]:
        assert parent["left"] - 1 <= child["left"] < child["right"] <= parent["right"] + 1
        assert child["outlined"]  # an attempt's own span
    assert by_row[1]["right"] <= by_row[2]["left"] + 1  # the retry after the first try
    page.close()


def test_a_zoom_of_the_waterfall_is_not_the_timelines_window(busy_app: tuple[str, Any],
                                                             browser: Any) -> None:
    """Only the timeline's pans and zooms go in the link: the waterfall of the call's spans
    below it zooms on its own, even after a moment when it was the page's first chart (the
    timeline taken off the page and put back, as a redraw does)."""
    url, _ = busy_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv=sample-step-retry&tab=timeline")
    page.get_by_text("Spans of the selected call").wait_for(timeout=90_000)
    page.locator(TIMELINE).first.wait_for(state="attached", timeout=60_000)
    settled(page)
    assert page.locator(".js-plotly-plot").count() == 2
    # the timeline off the page for a second (the listener looks every 100 ms), then back
    page.evaluate("""() => new Promise(done => {
        const gd = document.querySelector('.js-plotly-plot[data-twice-range]');
        const parent = gd.parentNode, next = gd.nextSibling;
        parent.removeChild(gd);
        setTimeout(() => { parent.insertBefore(gd, next); done(); }, 1000);
    })""")
    assert page.locator(TIMELINE).count() == 1  # the waterfall is not listened on
    waterfall = page.locator(".js-plotly-plot:not([data-twice-range])").first
    before = waterfall.evaluate("gd => gd._fullLayout.xaxis.range.slice()")
    shown = page.url
    waterfall.hover()
    waterfall.locator(".modebar-btn[data-attr='zoom'][data-val='out']").click()
    page.wait_for_timeout(3000)  # a zoom heard would be in the link within this
    settled(page)
    assert waterfall.evaluate("gd => gd._fullLayout.xaxis.range.slice()") != before
    assert page.url == shown and "t0=" not in page.url
    page.close()


def _zoom_out(page: Any, width_ms: float) -> float:
    """The timeline toolbar's zoom out, until the link's window is wider than `width_ms` (the
    view before: the window in the link, or the opened view); returns the new width.

    Only a wider window counts as heard: a change of the link alone may have another cause,
    and a zoom taken as heard that was not leaves the view one doubling short. A chart the
    page has just drawn again may be replaced between the hover and the click (seen on a
    machine under load), and that click is not heard: it is clicked again, at most three
    times. The button is the timeline's own: while the timeline is drawn again the page's
    first toolbar can be the waterfall's."""
    for attempt in range(3):
        # the page listens on each timeline it draws (a zoom before that is not heard)
        chart = page.locator(f"[data-testid='stPlotlyChart'] {TIMELINE}").first
        chart.wait_for(state="attached", timeout=30_000)
        page.mouse.move(1, 1)  # a fresh hover shows the redrawn chart's toolbar
        chart.hover()
        chart.locator(".modebar-btn[data-attr='zoom'][data-val='out']").click()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            width = _window_ms(page.url)
            if width is not None and width > width_ms * 1.5:
                return width
            page.wait_for_timeout(200)
        if attempt == 2:
            raise AssertionError(f"no zoom out heard: the link is {page.url}, the view was "
                                 f"{width_ms / 1000:.1f} s wide")
        settled(page)
    raise AssertionError("unreachable")


def _window_ms(page_url: str) -> float | None:
    """How wide the link's window is, in ms; None when it names none."""
    if "t0=" not in page_url or "t1=" not in page_url:
        return None
    t0, t1 = _window(page_url)
    return float((t1 - t0).total_seconds() * 1000)


_DRAWN_X = """gd => gd._fullData.filter(t => t.type !== 'heatmap' && t.x)
  .flatMap(t => Array.from(t.x, v => gd._fullLayout.xaxis.d2l(v)))"""


def test_a_large_timeline_opens_near_the_call_and_zooming_out_draws_the_rest(
        tmp_path: Path, browser: Any) -> None:
    """Past 3,000 rows the first view carries the rows near the call; a zoom out is a window
    of its own (in the link), drawn with the rows in it."""
    import pandas as pd

    from twice.store import open_store
    from twice.timeline import concat

    # the incident among copies of itself every 7 s before and after (fresh ids: no attempts)
    base = _load("step_retry")
    copies = [base]
    for i in range(1, 12_000 // len(base) + 1):
        c = base.copy()
        for col in ("at", "at_aligned", "end"):
            c[col] = c[col] + pd.Timedelta(seconds=7 * (i // 2 + 1) * (-1) ** i)
        for col in ("request_id", "span_id", "tool_call_id", "thread_id", "idempotency_key",
                    "object_id", "event_id"):
            c[col] = c[col] + f"-copy{i}"
        copies.append(c)
    timeline = concat(copies)
    path = tmp_path / "investigations.sqlite3"
    open_store(str(path)).create("Large", timeline, id="large")
    with running_app({"TWICE_STORE": str(path)}) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/?inv=large&tab=timeline")
        page.get_by_text("opened on the rows near the call").wait_for(timeout=120_000)
        page.locator(".js-plotly-plot .nsewdrag").first.wait_for(state="attached",
                                                                  timeout=60_000)
        settled(page)
        view = _axis(page)
        first = page.locator(TIMELINE).first.evaluate(_DRAWN_X)
        assert first and len(first) < len(timeline) // 4
        near_lo = min(first)
        width = view[1] - view[0]
        for _ in range(3):  # each zoom out doubles the view: past the rows first sent
            width = _zoom_out(page, width)
            settled(page)
        expect(page.get_by_text("opened on the rows near the call")).to_have_count(0)
        assert width > (view[1] - view[0]) * 4
        try:
            page.wait_for_function(
                f"lo => {{ const gd = document.querySelector('{TIMELINE}'); return gd"
                " && gd._fullData && gd._fullData.some(t => t.type !== 'heatmap' && t.x"
                " && Array.from(t.x).some(v => gd._fullLayout.xaxis.d2l(v) < lo)); }",
                arg=near_lo, timeout=60_000)
        except PlaywrightTimeout:
            drawn = page.locator(TIMELINE).first.evaluate(_DRAWN_X)
            raise AssertionError(
                f"nothing drawn left of {near_lo} (the rows first sent) after zooming out to "
                f"{page.url}: {len(drawn)} points drawn, from {min(drawn, default=None)}; "
                f"{page.locator(TIMELINE).count()} timeline chart(s) on the page") from None
        page.close()


def test_an_evidence_line_opens_the_records_it_names(busy_app: tuple[str, Any],
                                                     browser: Any) -> None:
    url, _ = busy_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv=sample-step-retry&tab=verdict")
    line = page.locator("li").filter(has_text="both executions belong to one trace").first
    line.wait_for(timeout=90_000)
    trace = line.inner_text().split("(")[1].split(")")[0]
    # the page is drawn in pieces: every evidence line and its button come before this
    page.get_by_text("Raw records", exact=True).wait_for(timeout=60_000)
    settled(page)
    # the popover drawn right after that line: its button names how many records it holds
    buttons = page.locator("[data-testid='stPopover'] button")
    index = page.evaluate("""trace => {
        const items = [...document.querySelectorAll('li')];
        const li = items.find(e => e.innerText.includes(trace));
        const pops = [...document.querySelectorAll("[data-testid='stPopover'] button")];
        return pops.findIndex(b => li.compareDocumentPosition(b)
                              & Node.DOCUMENT_POSITION_FOLLOWING);
    }""", trace)
    assert index >= 0
    assert "records" in buttons.nth(index).inner_text()
    buttons.nth(index).click()
    body = page.locator("[data-testid='stPopoverBody']:visible")
    codes = body.locator("[data-testid='stCode']")
    codes.first.wait_for(timeout=30_000)
    texts = [codes.nth(i).inner_text() for i in range(codes.count())]
    assert len(texts) >= 2 and all(f'"trace_id": "{trace}"' in t for t in texts), texts
    assert all('"origin"' in t for t in texts)
    page.close()


def test_a_point_clicked_on_the_timeline_shows_its_record(busy_app: tuple[str, Any],
                                                          browser: Any) -> None:
    url, _ = busy_app
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/?inv=sample-step-retry&tab=timeline")
    page.wait_for_function("() => { const gd = document.querySelector('.js-plotly-plot');"
                           " return gd && gd._fullLayout && gd._fullLayout.xaxis; }",
                           timeout=90_000)
    settled(page)
    # a tool span's mark, where the page draws it (plotly hears the click on its drag layer)
    where = page.evaluate("""() => {
        const gd = document.querySelector('.js-plotly-plot');
        const t = gd._fullData.findIndex(d => d.name === 'tool spans');
        const plot = gd.querySelector('.nsewdrag').getBoundingClientRect();
        const r = [...gd.querySelectorAll('.scatterlayer .trace')[t].querySelectorAll('.point')]
            .map(p => p.getBoundingClientRect())
            .find(r => r.x > plot.x && r.x + r.width < plot.x + plot.width);
        return {x: r.x + r.width / 2, y: r.y + r.height / 2};
    }""")
    page.mouse.move(where["x"], where["y"])  # plotly picks the point under a hover
    page.mouse.click(where["x"], where["y"])
    page.get_by_text("Clicked record", exact=True).wait_for(timeout=30_000)
    code = page.locator("[data-testid='stCode']").filter(has_text='"kind": "tool_span"').first
    code.wait_for(timeout=30_000)
    assert "sample_data/step_retry/" in code.inner_text()
    page.close()


def test_a_customer_with_several_duplicates_has_a_page_of_them(busy_app: tuple[str, Any],
                                                                browser: Any) -> None:
    """The step retry's customer was charged twice in the busy day and in the changed-amount
    upload: the search links their page, and each duplicate there opens its own verdict."""
    url, _ = busy_app
    customer = "cus_WrcAXdGAH5bSQW"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _search(page, url, customer)
    page.get_by_role("link", name=re.compile(r"all \d+ duplicates on one page")).click()
    page.get_by_role("heading", name=f"Customer {customer}").wait_for(timeout=60_000)
    # the page is drawn in pieces (the heading first): wait for its list of duplicates
    page.wait_for_function("() => document.querySelectorAll('a[href*=\"dup=\"]').length >= 2",
                           timeout=60_000)
    settled(page)
    listed = page.locator("a[href*='dup=']")
    hrefs = [unquote(str(h)) for h in listed.evaluate_all(
        "els => els.map(e => e.getAttribute('href'))")]
    assert len(hrefs) >= 2 and any(f"inv={BUSY_DAY}&" in h for h in hrefs), hrefs
    listed.first.click()
    heading, _ = _verdict(page)
    assert heading.startswith("step_retry:"), heading
    page.close()
