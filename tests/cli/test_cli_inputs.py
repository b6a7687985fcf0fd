"""Hostile command-line input (issue 13): every bad value, file or URL ends the command with one
message naming the option or source and why, exit code 2 and no traceback; a bad record inside
a file is a warning naming file and line, and the rest is still analysed.

The commands run as a user runs them (`python -m twice.cli ...` in a process of its own), so a
traceback, a hang or a run-away read would show as one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data" / "step_retry"


def twice(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TWICE_WORKERS": "1"}
    return subprocess.run([sys.executable, "-m", "twice.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def refused(done: subprocess.CompletedProcess[str], *named: str) -> str:
    """The command ended with exit 2, no traceback, and a message naming each of `named`."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    for name in named:
        assert name in done.stderr, (name, done.stderr)
    return done.stderr


# --- files that are not files: refused up front, never read or waited on --------------------

@pytest.mark.skipif(not Path("/dev/zero").is_char_device(), reason="needs /dev/zero")
@pytest.mark.parametrize("args", [["--stripe-events", "/dev/zero"], ["--spans", "/dev/zero"],
                                  ["--checkpoints", "/dev/zero"], ["/dev/zero"]],
                         ids=lambda a: " ".join(a))
def test_a_device_is_refused_up_front(args: list[str]) -> None:
    err = refused(twice("analyze", *args), "/dev/zero", "character device")
    assert err.startswith("twice: ")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("flag", ["--stripe-events", "--spans", "--sqs", "--checkpoints",
                                  "--request-log", None])
def test_a_fifo_is_refused_up_front_not_waited_on(flag: str | None, tmp_path: Path) -> None:
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    args = [flag, str(fifo)] if flag else [str(fifo)]
    # nothing ever writes to it: reading it would wait forever (the timeout catches that)
    refused(twice("analyze", *args, timeout=60), str(fifo), "FIFO")


def test_a_fifo_in_a_folder_is_left_out_of_the_scan(tmp_path: Path) -> None:
    folder = tmp_path / "incident"
    shutil.copytree(SAMPLE, folder)
    os.mkfifo(folder / "spans-live.jsonl")
    done = twice("analyze", str(folder), "--format", "json", timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["groups"][0]["duplicates"][0]["layer"] == "step_retry"
