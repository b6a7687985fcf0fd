"""How long the web app takes to show the timeline and the gap chart of a large incident.

    python benchmarks/web_render_bench.py [--rows 50000] [--out benchmarks/results/web_render.json]

Generates an incident in the real formats (benchmarks/analyze_bench.generate), saves it to a
fresh store, starts the app headless and, in Debian's chromium driven by Playwright, measures
from navigation to the plotly chart being drawn (its SVG/WebGL layers present), for the timeline
and the gaps views: the first visit (analysis computed and cached) and a second one (cached).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from analyze_bench import generate  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000, help="about this many timeline rows")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/web_render.json")
    args = ap.parse_args()
    from twice.connectors import registry
    from twice.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "incident"
        folder.mkdir()
        # events + spans + checkpoint rows: ~0.45 / 0.45 / 0.1 of the rows
        sizes = generate(folder, int(args.rows * 0.45), int(args.rows * 0.45),
                         int(args.rows * 0.04), seed=7)
        found, _ = registry.scan_folder(folder)
        loaded = registry.load_all([(n, p, {}) for n, p in found])
        store_path = Path(tmp) / "store.sqlite3"
        open_store(str(store_path)).create("benchmark", loaded.rows, id="bench")
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "twice" / "web" / "main.py"),
             "--server.headless", "true", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
            env={**os.environ, "TWICE_STORE": str(store_path)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(200):
                try:
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                    break
                except OSError:
                    time.sleep(0.3)
            results = _measure(url)
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    doc = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "timeline_rows": len(loaded.rows), "input": sizes, "seconds": results,
           "target_s": 3.0, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


def _measure(url: str) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    out: dict[str, float] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/")  # the app starts, imports the samples
        page.get_by_text("Incidents").first.wait_for(timeout=120_000)
        for visit in ("first", "second"):
            for tab in ("timeline", "gaps"):
                start = time.perf_counter()
                page.goto(f"{url}/?inv=bench&tab={tab}")
                page.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=120_000)
                page.wait_for_function(
                    "() => { const g = document.querySelector('.js-plotly-plot');"
                    " return g && g._fullLayout && g._fullData && g._fullData.length > 0; }",
                    timeout=120_000)
                out[f"{tab}_{visit}"] = round(time.perf_counter() - start, 2)
        browser.close()
    return out


if __name__ == "__main__":
    main()
