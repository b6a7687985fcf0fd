"""Helpers the browser tests share: the app served headless on a free port, Debian's chromium."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_app(env: dict[str, str]) -> Iterator[str]:
    """`streamlit run twice/web/main.py` headless on a free port with `env` added; yields its
    URL."""
    port = free_port()
    # the server's output goes to a file: a pipe nobody reads while the server runs fills after
    # 64 KiB of log and then blocks the server mid-page
    log = tempfile.TemporaryFile()
    # TWICE_TEST_TWICE=/path/to/venv/bin/twice: the app as `twice web` of another install (a
    # fresh venv with only `pip install -e .`), to prove the first command is enough
    start = ([os.environ["TWICE_TEST_TWICE"], "web"] if os.environ.get("TWICE_TEST_TWICE")
             else [sys.executable, "-m", "streamlit", "run",
                   str(ROOT / "twice" / "web" / "main.py")])
    proc = subprocess.Popen(
        [*start, "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    out = log.read().decode(errors="replace")
                    raise RuntimeError(f"streamlit did not start:\n{out}") from None
                time.sleep(0.3)
        try:
            yield url
        except BaseException:  # a failing test: what the server said is printed beside it
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 20_000))
            print("streamlit's log (its end):\n" + log.read().decode(errors="replace"))
            raise
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Debian chromium driven by Playwright (no browser download)."""
    assert Path(CHROMIUM).exists(), "Debian's chromium is installed by scripts/test"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# Screen positions of a chart's data points, from plotly's own axes (the timeline's points are
# WebGL, so there is no element per point to aim at; sweeping the mouse blindly was flaky).
_POINTS_JS = """
gd => {
  const fl = gd._fullLayout, box = gd.getBoundingClientRect(), out = [];
  for (const t of gd._fullData || []) {
    if (t.visible !== true || !t.x || !t.y) continue;
    const xa = fl[t.xaxis.replace('x', 'xaxis')], ya = fl[t.yaxis.replace('y', 'yaxis')];
    for (let i = 0; i < Math.min(t.x.length, 50); i++) {
      const px = xa.d2p(t.x[i]), py = ya.d2p(t.y[i]);
      if (!isFinite(px) || !isFinite(py) || px < 0 || px > xa._length || py < 0
          || py > ya._length) continue;
      out.push([box.left + xa._offset + px, box.top + ya._offset + py]);
    }
  }
  return out;
}
"""


def hover_points(page: Any) -> int:
    """Aim the mouse at each chart's data points and count the charts for which plotly drew a
    hover label (it carries evidence text). Labels are drawn after a throttle, so each aim waits
    for one, and a chart gets several points before it counts as unlabelled."""
    page.locator(".js-plotly-plot .nsewdrag").first.wait_for(state="attached", timeout=60_000)
    labels = page.locator(".hoverlayer .hovertext")
    charts = page.locator(".js-plotly-plot")
    hovered = 0
    for c in range(charts.count()):
        charts.nth(c).scroll_into_view_if_needed()
        for x, y in charts.nth(c).evaluate(_POINTS_JS)[:8]:
            page.mouse.move(1, 1)  # leave the chart so the next move is a fresh hover
            page.mouse.move(x, y, steps=4)
            try:
                labels.first.wait_for(state="attached", timeout=3_000)
            except Exception:  # noqa: BLE001 - playwright's TimeoutError: aim at the next point
                continue
            hovered += 1
            break
    return hovered


def run_app(params: dict[str, str] | None = None, timeout: float = 120) -> AppTest:
    """The web app's script run once in-process by Streamlit's AppTest, with these URL query
    parameters; fails on any exception the page raised."""
    at = AppTest.from_file(str(ROOT / "twice" / "web" / "main.py"), default_timeout=timeout)
    for k, v in (params or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


# Streamlit has finished drawing the page: no script run under way (the app's own run state,
# which Streamlit keeps on stApp for its tests, says so from the run's first message; the status
# widget shows only once a run has lasted half a second), no element left from the run before
# (stale), every chart drawn by plotly.
_SETTLED_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  const w = document.querySelector('[data-testid="stStatusWidget"]');
  if (w && w.checkVisibility()) return false;
  if (document.querySelector('[data-stale="true"]')) return false;
  for (const c of document.querySelectorAll('[data-testid="stPlotlyChart"]')) {
    const g = c.querySelector('.js-plotly-plot');
    if (!(g && g._fullLayout && g._fullData && g.querySelector('.main-svg'))) return false;
  }
  return !!document.querySelector('[data-testid="stMain"]');
}"""


# A new store's bundled samples are in and the page drawn after them has settled: nothing says
# the samples are being analysed, the incidents list (where the page is that list) was drawn to
# its end (its download button, or the line saying nothing matches), and `_SETTLED_JS` holds.
# The list's heading alone is no sign: on a loaded machine it can be drawn before the import's
# caption, so a page read between the two looks done.
_SAMPLES_IN_JS = """() => {
  const text = document.body.innerText;
  if (text.includes('Analysing the bundled samples')) return false;
  const list = [...document.querySelectorAll('h1')].some(h => h.innerText.trim() === 'Incidents');
  if (list && !(text.includes('Download this list (CSV)')
                || text.includes('No investigation matches'))) return false;
  return (""" + _SETTLED_JS + """)();
}"""


def samples_in(page: Any, timeout: float = 300_000) -> None:
    """Wait until a new store's bundled samples are all in and the page drawn after them has
    settled (`_SAMPLES_IN_JS`): a click on the page while that last run redraws it can be
    lost, and on a loaded machine the import outlasts the page's first draw. If that does not
    come, fail saying what the page shows."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(_SAMPLES_IN_JS, timeout=timeout, polling=100)
    except PlaywrightTimeout:
        raise AssertionError(f"the page did not settle with the samples in within "
                             f"{timeout / 1000:.0f} s: {page_state(page)}") from None


def page_errors(page: Any) -> list[str]:
    """The errors thrown in the page from now on, as they come. Streamlit's browser side
    blanks the whole page on one (e.g. "Bad delta path index")."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def wait_watching(locator: Any, errors: list[str], timeout: float = 300) -> None:
    """`locator.wait_for`, failing at once, with the error, if the page throws meanwhile (a
    blanked page would only time out, minutes later)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    deadline = time.monotonic() + timeout
    while not errors:
        try:
            locator.wait_for(timeout=2_000)
            return
        except PlaywrightTimeout:
            assert time.monotonic() < deadline, f"not shown within {timeout:.0f} s: {locator}"
    raise AssertionError(f"the page threw, which blanks it: {errors}")


def investigate_in_browser(page: Any, timeout: float = 180_000) -> None:
    """Click the live form's Investigate once the page has settled, and wait for the verdict;
    if none comes, fail saying what the page shows (an error, a form still waiting) instead of
    a bare timeout."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    click_after_typing(page, page.get_by_role("button", name="Investigate"))
    try:
        page.locator("[id='verdict']").first.wait_for(timeout=timeout)
    except PlaywrightTimeout:
        shown = page.locator("body").inner_text()
        raise AssertionError(f"no verdict {timeout / 1000:.0f} s after Investigate; the page "
                             f"shows:\n{shown[-4000:]}") from None


# Why `_SETTLED_JS` is false, said when a wait for it fails.
_UNSETTLED_JS = """() => {
  const w = document.querySelector('[data-testid="stStatusWidget"]');
  const charts = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')];
  const drawn = charts.filter(c => { const g = c.querySelector('.js-plotly-plot');
    return g && g._fullLayout && g._fullData && g.querySelector('.main-svg'); }).length;
  const app = document.querySelector('[data-testid="stApp"]');
  return `run state: ${app && app.getAttribute('data-test-script-state')}; `
    + `script running: ${!!(w && w.checkVisibility())}; `
    + `stale elements: ${document.querySelectorAll('[data-stale="true"]').length}; `
    + `charts drawn: ${drawn} of ${charts.length}; `
    + `main shown: ${!!document.querySelector('[data-testid="stMain"]')}; `
    + `at ${location.href} (${document.readyState}, ${document.body.innerHTML.length} `
    + `characters of HTML)`;
}"""


def page_state(page: Any) -> str:
    """What a failing wait saw: why the page is not settled, and the end of its text."""
    try:
        return (f"{page.evaluate(_UNSETTLED_JS)}; the page shows:\n"
                f"{page.locator('body').inner_text()[-3000:]}")
    except Exception as e:  # noqa: BLE001 - the page may be gone: say so, keep the failure
        return f"(the page could not be read: {e})"


def shown(page: Any, locator: Any, timeout: float = 60_000) -> None:
    """`locator.wait_for`; if it does not come, fail saying what the page shows (an error, a
    form still waiting, a run that never ended) instead of a bare timeout."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        locator.wait_for(timeout=timeout)
    except PlaywrightTimeout:
        raise AssertionError(f"not shown within {timeout / 1000:.0f} s: {locator}; "
                             f"{page_state(page)}") from None


def settled(page: Any, timeout: float = 60_000) -> None:
    """Wait until the page has settled (`_SETTLED_JS`); if it does not, fail saying why."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(_SETTLED_JS, timeout=timeout, polling=50)
    except PlaywrightTimeout:
        raise AssertionError(f"the page did not settle within {timeout / 1000:.0f} s: "
                             f"{page_state(page)}") from None


def click_after_typing(page: Any, button: Any, timeout: float = 60_000) -> None:
    """Click `button` (a locator) once the field typed into has been left and the page has
    settled. Leaving a Streamlit text field redraws it (its "Press Enter" hint goes, a field
    outside a form sends its value), and when the click's own mouse-down is what leaves it,
    the page can move between mouse-down and mouse-up: the browser then sends no click
    (streamlit/streamlit#8725). Seen here as a live form whose Investigate never reached the
    script, on a settled page, its key still in its field."""
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    settled(page, timeout)
    button.click()


def choose(page: Any, label: str, option: str) -> list[str]:
    """Pick `option` in the selectbox `label`; the options the list offered, as shown.

    The list opens from the keyboard (a click alone may not), and a rerun still drawing the
    page (the incidents list refreshes itself each second while a new store's samples are
    imported) can close it again: open it until the option shows, for at most a minute."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    picker = page.get_by_role("combobox", name=label, exact=True)
    options = page.get_by_role("option")
    wanted = page.get_by_role("option", name=option, exact=True)
    deadline = time.monotonic() + 60
    while True:
        page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
        picker.click()
        picker.press("ArrowDown")
        try:
            wanted.wait_for(timeout=5_000)
            offered = [o.strip() for o in options.all_inner_texts()]
            wanted.click(timeout=5_000)
            break
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                raise
            page.keyboard.press("Escape")
    expect(picker).to_have_value(option, timeout=30_000)  # the choice took
    return offered
