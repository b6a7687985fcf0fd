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

from twice.store import open_store
from twice.store.sweeps import list_sweeps

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


# --- option values: click's usage error names the option, before anything is read ------------

BAD_OPTIONS = [
    (["analyze", str(SAMPLE), "--request-log-map", "foo"], "--request-log-map", "foo"),
    (["analyze", str(SAMPLE), "--request-log-map", "colour=Red"], "--request-log-map", "colour"),
    (["sweep", str(SAMPLE), "--request-log-map", "foo"], "--request-log-map", "foo"),
    (["analyze", str(SAMPLE), "--bands", "nan,inf"], "--bands", "nan"),
    (["analyze", str(SAMPLE), "--bands", "2m,10s"], "--bands", "2m,10s"),
    (["analyze", str(SAMPLE), "--bands", "0s,2m"], "--bands", "0s"),
    (["analyze", str(SAMPLE), "--bands", "10s"], "--bands", "10s"),
    (["analyze", str(SAMPLE), "--bands", "fast,slow"], "--bands", "fast"),
    (["analyze", str(SAMPLE), "--provider", "paypal", "--bands", "10s,7h"], "--bands",
     "retention"),
    (["analyze", str(SAMPLE), "--window=-5m"], "--window", "-5m"),
    (["analyze", str(SAMPLE), "--window", "inf"], "--window", "inf"),
    (["analyze", str(SAMPLE), "--window", "30d"], "--window", "30d"),
    (["sweep", str(SAMPLE), "--chunk", "nan"], "--chunk", "nan"),
    (["sweep", str(SAMPLE), "--chunk", "1e-9s"], "--chunk", "1e-9s"),
    (["sweep", str(SAMPLE), "--chunk", "1e30h"], "--chunk", "1e30h"),
    (["sweep", str(SAMPLE), "--overlap", "inf"], "--overlap", "inf"),
    (["sweep", str(SAMPLE), "--since", "1700-01-01"], "--since", "1700-01-01"),
    (["sweep", str(SAMPLE), "--until", "soon"], "--until", "soon"),
    (["investigate", "--customer", "cus_1", "--around", "2024-06-03T14:21Z",
      "--window", "1e30h"], "--window", "1e30h"),
    (["investigate", "--customer", "cus_1", "--around", "2024-06-03T14:21Z",
      "--window=-5m"], "--window", "-5m"),
    (["investigate", "--customer", "cus_1", "--around", "9999-01-01"], "--around", "9999"),
    (["investigate", "--customer", "cus_1", "--around", "2024-06-03T14:21Z",
      "--traces", "jaeger+http://[::1:bad"], "--traces", "jaeger+http://[::1:bad"),
    (["investigate", "--customer", "cus_1", "--around", "2024-06-03T14:21Z",
      "--traces", "jaeger+http://reader:s3cret@[::1:bad"], "--traces", "Invalid IPv6 URL"),
]


@pytest.mark.parametrize(("args", "option", "value"), BAD_OPTIONS,
                         ids=[" ".join(a[0:1] + a[-2:]) for a, _, _ in BAD_OPTIONS])
def test_a_bad_option_value_is_one_usage_error_naming_it(
        args: list[str], option: str, value: str, tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    extra = ["--store", str(store)] if args[0] == "sweep" else []
    # investigate: no Stripe key is needed to be told the command line is wrong
    err = refused(twice(*args, *extra), option, value)
    assert "s3cret" not in err
    assert not store.exists()  # refused before the store was opened


def test_the_tests_own_ids_are_unique() -> None:
    ids = [" ".join(a[0:1] + a[-2:]) for a, _, _ in BAD_OPTIONS]
    assert len(set(ids)) == len(ids)


def test_a_sweep_of_more_chunks_than_it_takes_is_refused_before_reading(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    err = refused(twice("sweep", str(SAMPLE), "--since", "2025-01-01", "--until", "2025-03-01",
                        "--chunk", "1s", "--store", str(store), "--no-progress"), "--chunk")
    assert "5,097,600 chunks" in err
    assert list_sweeps(open_store(str(store))) == []


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
