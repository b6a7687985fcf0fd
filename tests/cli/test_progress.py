"""Progress on stderr: a spinner on a terminal, nothing on a pipe (a script's stderr holds only
warnings and errors), a line per step with -v, nothing with -q; stdout is the same either way."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contract import contract

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(ROOT / "sample_data" / "step_retry")


def _piped(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twice.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _on_a_terminal(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, what a terminal on stderr was sent)."""
    terminal, child_end = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "twice.cli", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=child_end,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm"})
    os.close(child_end)
    sent = []
    while True:
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        sent.append(chunk)
    os.close(terminal)
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, out.decode(), b"".join(sent).decode(errors="replace")


@pytest.fixture(scope="module")
def plain_report() -> str:
    done = _piped("analyze", SAMPLE, "--format", "json")
    assert done.returncode == 0
    assert done.stderr == ""  # a pipe: no progress at all
    contract(done.stdout)
    return done.stdout


def test_verbose_says_each_step_on_a_pipe_and_keeps_stdout(plain_report: str) -> None:
    done = _piped("analyze", SAMPLE, "--format", "json", "-v")
    assert done.returncode == 0
    assert done.stdout == plain_report
    steps = [r"analyze: reading \d+ sources", r"analyze: analysing [\d,]+ records",
             r"analyze: 1 logical calls executed more than once, 0 warnings"]
    lines = done.stderr.splitlines()
    assert len(lines) == len(steps), lines
    for line, step in zip(lines, steps, strict=True):
        assert re.fullmatch(r"\[ *[0-9.]+s\] " + step, line), line


def test_a_terminal_gets_a_spinner_and_quiet_silences_it(plain_report: str) -> None:
    code, out, sent = _on_a_terminal("analyze", SAMPLE, "--format", "json")
    assert code == 0 and out == plain_report
    assert re.search(r"reading \d+ sources", sent)
    code, out, sent = _on_a_terminal("analyze", SAMPLE, "--format", "json", "-q")
    assert code == 0 and out == plain_report
    assert sent == ""


def test_quiet_keeps_the_errors() -> None:
    done = _piped("analyze", str(ROOT / "no-such-folder"), "-q")
    assert done.returncode == 2
    assert done.stderr.strip().endswith("no such file or folder")
