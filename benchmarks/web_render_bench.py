"""What a user of the web app waits for, measured in a real browser.

    python benchmarks/web_render_bench.py [--rows 215000] [--busy-day DIR] [--repeat 3]
                                          [--store PATH] [--out PATH]

Results: benchmarks/results/web_render_issue20.json, and `_before` for the code before issue
20's last session on the same store (this script copied into the older tree and run there with
`PYTHONPATH=that/tree ... --store S` builds S; this tree's run with `--store S` reuses it).

Two incidents are saved to a fresh store (or `--store`, reused when it exists): a
production-shaped busy day (1,295 rows: the independent corpus's `field_busy_day`, Stripe
events, OTLP spans and a SqliteSaver file) and a generated one of about `--rows` rows
(benchmarks/analyze_bench.generate: events, spans and checkpoints in the real formats). The app
is served headless (`streamlit run`), and Debian's chromium, driven by Playwright, measures:

- `first_visit_empty_store`: a new, empty store's first visit: until the incidents list is
  shown (`list_s`), and until every bundled sample is listed (`samples_s`);
- per incident:
  - `cold_link`: a link (`?inv=...&tab=verdict`) the first time the server shows that incident
    (read from the store and analysed), until the verdict's heading is shown (`heading_s`) and
    until the page has settled (`settle_s`);
  - then on a warm server, each the median of `--repeat` (all values under `all`):
  - `shared_link`: the same link opened in a new browser profile (heading, settled): every
    script of Streamlit's front end is fetched (~100 files);
  - `shared_link_cached`: the same link in a new tab of a browser that has opened the app
    before (a new Streamlit session, its scripts cached);
  - `tabs`: each tab switch (a click on the view picker), until the page has settled; the
    first round of a session loads plotly.js, later ones have it;

"Settled": Streamlit's running indicator is gone, no element is stale (left from the run
before), every chart on the page has been drawn by plotly, and each tab's own content is shown
(the verdict's Confidence metric, the timeline's caption, ...: `TAB_MARK`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from analyze_bench import generate  # noqa: E402

BUSY_DAY = Path("/work/shared/corpus/independent/set-610000/field/field_busy_day")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-gpu"]
TABS = ("timeline", "gaps", "verdict", "notes", "export")
# what each tab shows once drawn (absent from every other tab)
TAB_MARK = {
    "verdict": "[data-testid='stMetricLabel']:has-text('Confidence')",
    "timeline": "[data-testid='stCaptionContainer']:has-text('Draw a box over a stretch')",
    "gaps": "[data-testid='stMarkdownContainer']:has-text('Selected:')",
    "notes": "button:has-text('Add note')",
    "export": "button:has-text('Analysis JSON')",
}
SETTLED_JS = """() => {
  const w = document.querySelector('[data-testid="stStatusWidget"]');
  if (w && w.checkVisibility()) return false;
  if (document.querySelector('[data-stale="true"]')) return false;
  for (const c of document.querySelectorAll('[data-testid="stPlotlyChart"]')) {
    const g = c.querySelector('.js-plotly-plot');
    if (!(g && g._fullLayout && g._fullData && g.querySelector('.main-svg'))) return false;
  }
  return !!document.querySelector('[data-testid="stMain"]');
}"""
TIMEOUT_MS = 300_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(store_path: Path, log: Path) -> Iterator[str]:
    port = _free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "twice" / "web" / "main.py"),
             "--server.headless", "true", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
            env={**os.environ, "TWICE_STORE": str(store_path)}, stdout=out,
            stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(400):
                try:
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                    break
                except OSError:
                    time.sleep(0.25)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def settle(page: Any) -> None:
    page.wait_for_function(SETTLED_JS, timeout=TIMEOUT_MS, polling=50)


def timed(step: Callable[[], None]) -> float:
    start = time.perf_counter()
    step()
    return round(time.perf_counter() - start, 2)


def open_link(browser: Any, url: str, context: Any = None) -> dict[str, float]:
    """A link opened in a new Streamlit session: until the verdict heading, until settled. In
    a new browser profile (nothing cached: every script of Streamlit's is fetched), or in a new
    tab of `context` (a browser that has opened the app before)."""
    own = context is None
    if own:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    start = time.perf_counter()
    page.goto(url)
    page.locator("h2#verdict").first.wait_for(timeout=TIMEOUT_MS)
    heading = time.perf_counter() - start
    page.locator(TAB_MARK["verdict"]).first.wait_for(timeout=TIMEOUT_MS)
    settle(page)
    done = time.perf_counter() - start
    page.close()
    if own:
        context.close()
    return {"heading_s": round(heading, 2), "settle_s": round(done, 2)}


def switch_tabs(browser: Any, url: str, rounds: int) -> dict[str, list[float]]:
    """Each tab switch by a click on the view picker, as a user does, from the verdict, in one
    browser session, `rounds` times (the first round loads the chart library)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(url)
    page.locator(TAB_MARK["verdict"]).first.wait_for(timeout=TIMEOUT_MS)
    settle(page)
    labels = {"timeline": "Timeline", "gaps": "Gaps against the bands", "verdict": "Verdict",
              "notes": "Notes", "export": "Export"}
    out: dict[str, list[float]] = {}
    for _ in range(rounds):
        for tab in (*TABS[:2], *TABS[3:], "verdict"):

            def step(tab: str = tab) -> None:
                page.locator("[data-testid='stRadio'] label").filter(
                    has_text=labels[tab]).first.click()
                page.wait_for_function(f"() => location.search.includes('tab={tab}')",
                                       timeout=TIMEOUT_MS, polling=50)
                page.locator(TAB_MARK[tab]).first.wait_for(timeout=TIMEOUT_MS)
                settle(page)

            out.setdefault(tab, []).append(timed(step))
    context.close()
    return out


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def first_visit(browser: Any, tmp: Path) -> dict[str, float]:
    """A new, empty store's first visit: the incidents list, then every sample in it."""
    samples = sum(1 for p in (ROOT / "sample_data").iterdir() if (p / "truth.json").exists())
    with served(tmp / "empty.sqlite3", tmp / "empty.log") as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        start = time.perf_counter()
        page.goto(f"{url}/")
        page.get_by_role("heading", name="Incidents").first.wait_for(timeout=TIMEOUT_MS)
        shown = time.perf_counter() - start
        # the samples appear as they are analysed (the page refreshes itself)
        page.wait_for_function(
            f"() => document.body.innerText.split('Sample: ').length > {samples}",
            timeout=TIMEOUT_MS, polling=100)
        listed = time.perf_counter() - start
        page.close()
    return {"list_s": round(shown, 2), "samples_s": round(listed, 2)}


def build_store(store_path: Path, tmp: Path, rows: int, busy_day: Path) -> dict[str, Any]:
    from twice.connectors import registry
    from twice.store import open_store

    store = open_store(str(store_path))
    found, _ = registry.scan_folder(busy_day)
    loaded = registry.load_all([(n, p, {}) for n, p in found])
    store.create("Busy day (field corpus)", loaded.rows, id="busy-day",
                 sources=sorted({n for n, _ in found}), warnings=loaded.warnings)
    sizes: dict[str, Any] = {"busy-day": {"rows": len(loaded.rows), "folder": str(busy_day)}}
    folder = tmp / "generated"
    folder.mkdir()
    # events + spans + checkpoint rows: ~0.45 / 0.45 / 0.1 of the rows
    made = generate(folder, int(rows * 0.45), int(rows * 0.45), int(rows * 0.04), seed=7)
    found, _ = registry.scan_folder(folder)
    loaded = registry.load_all([(n, p, {}) for n, p in found])
    store.create("Generated", loaded.rows, id="large", sources=sorted({n for n, _ in found}),
                 warnings=loaded.warnings)
    sizes["large"] = {"rows": len(loaded.rows), "input": made}
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000, help="about this many timeline rows")
    ap.add_argument("--busy-day", type=Path, default=BUSY_DAY,
                    help="an incident folder of about 1,300 rows")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "benchmarks/results/web_render_issue20.json")
    ap.add_argument("--skip-first-visit", action="store_true")
    ap.add_argument("--store", type=Path, help="the store to measure on: built there when it "
                    "does not exist, reused when it does (to compare two trees on one store, "
                    "build it with the older one)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="times each warm measurement is taken (the median is reported)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp_name, sync_playwright() as p:
        tmp = Path(tmp_name)
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        if not args.skip_first_visit:
            results["first_visit_empty_store"] = first_visit(browser, tmp)
            print(json.dumps(results), flush=True)
        store_path = args.store or tmp / "store.sqlite3"
        sizes_file = store_path.with_suffix(".sizes.json")
        if store_path.exists() and sizes_file.exists():
            sizes = json.loads(sizes_file.read_text())
        else:
            started = time.perf_counter()
            sizes = build_store(store_path, tmp, args.rows, args.busy_day)
            sizes_file.write_text(json.dumps(sizes))
            print(f"store built in {time.perf_counter() - started:.0f} s", flush=True)
        load_at_start = [round(x, 2) for x in os.getloadavg()]
        with served(store_path, tmp / "app.log") as url:
            warm = browser.new_page()
            warm.goto(f"{url}/")  # the samples imported before anything is measured
            warm.get_by_role("heading", name="Incidents").first.wait_for(timeout=TIMEOUT_MS)
            settle(warm)
            warm.close()
            for inv in ("busy-day", "large"):
                link = f"{url}/?inv={inv}&tab=verdict"
                cold = open_link(browser, link)
                shared = [open_link(browser, link) for _ in range(args.repeat)]
                returning = browser.new_context(viewport={"width": 1400, "height": 1000})
                open_link(browser, link, returning)  # the browser has opened twice before
                cached = [open_link(browser, link, returning) for _ in range(args.repeat)]
                returning.close()
                tabs = switch_tabs(browser, link, args.repeat)
                results[inv] = {
                    "rows": sizes[inv]["rows"], "cold_link": cold,
                    "shared_link": {k: median([s[k] for s in shared]) for k in cold},
                    "shared_link_cached": {k: median([s[k] for s in cached]) for k in cold},
                    "tabs": {tab: median(v) for tab, v in tabs.items()},
                    "all": {"shared_link": shared, "shared_link_cached": cached,
                            "tabs": tabs}}
                print(json.dumps({inv: results[inv]}), flush=True)
        browser.close()
    doc = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "what": "seconds a user waits, in chromium (warm: the median of --repeat); see the "
                   "script's docstring",
           "targets_s": {"view": 2.0, "shared_link": 3.0}, "incidents": sizes,
           "seconds": results, "cpus": os.cpu_count(), "load_avg_at_start": load_at_start,
           "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
