"""`twice web` serves the app with twice's options (--port, --store) and streamlit's passed
through (its --help: tests/cli/test_startup.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.web.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_web_serves_on_the_port_with_streamlits_options_passed_through(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "twice.cli", "web", "--server.headless", "true", "--port",
         str(port), "--server.address", "127.0.0.1", "--store", str(tmp_path / "s.sqlite3")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                            timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "twice web did not start"
                time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
