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
from typing import Any

import pytest

from tests.contract import contract
from twice.cli import main
from twice.connectors import registry
from twice.store import open_store
from twice.store.sweeps import list_sweeps

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data" / "step_retry"
CORPUS = ROOT / "tests" / "corpus"
INT64_MAX = 2**63 - 1


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
    assert contract(done.stdout)["groups"][0]["duplicates"][0]["layer"] == "step_retry"


# --- bad records inside files: a warning naming file and line, the rest analysed ------------

def _spans_with_a_time_at_int64_max(folder: Path) -> int:
    """The sample's spans with one export line's span starting at 2**63 - 1 ns (pandas' last
    nanosecond): once an OverflowError in the engine, OutOfBoundsDatetime in a sweep."""
    path = folder / "spans.jsonl"
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines):
        doc = json.loads(line)
        span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        if span["name"] != "POST":  # a span the engine reads beside the attempts
            span["startTimeUnixNano"] = str(INT64_MAX)
            lines[n] = json.dumps(doc)
            path.write_text("\n".join(lines) + "\n")
            return n + 1
    raise AssertionError("no span to change")


@pytest.mark.parametrize("command", ["analyze", "sweep"])
def test_a_span_time_past_2100_is_a_warning_naming_file_and_line(
        command: str, tmp_path: Path) -> None:
    folder = tmp_path / "incident"
    shutil.copytree(SAMPLE, folder)
    line = _spans_with_a_time_at_int64_max(folder)
    extra = ["--store", str(tmp_path / "s.sqlite3"), "--no-progress"] if command == "sweep" \
        else []
    done = twice(command, str(folder), "--format", "json", *extra)
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, Any] = contract(done.stdout)
    warnings = [w for w in report["warnings"]
                if w["source"] == f"{folder / 'spans.jsonl'}:{line}"]
    assert warnings and "after 2100" in warnings[0]["detail"], report["warnings"]
    if command == "analyze":
        assert report["groups"][0]["duplicates"][0]["layer"] == "step_retry"
    else:
        assert report["totals"]["groups"] == 1


def test_nan_in_a_json_document_is_named_by_its_line_and_the_rest_is_read(
        tmp_path: Path) -> None:
    events = tmp_path / "events.json"
    text = (SAMPLE / "events.json").read_text()
    at = text.index('"amount": ')  # the first event's amount, in a pretty-printed page
    end = text.index(",", at)
    events.write_text(text[:at] + '"amount": NaN' + text[end:])
    line = text[:at].count("\n") + 1
    done = twice("analyze", "--stripe-events", str(events), "--checkpoints",
                 str(SAMPLE / "checkpoints.sqlite"), "--spans", str(SAMPLE / "spans.jsonl"),
                 "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    report = contract(done.stdout)
    assert [w["source"] for w in report["warnings"]] == [f"{events}:{line}"]
    assert "NaN" in report["warnings"][0]["detail"]
    assert report["groups"][0]["duplicates"][0]["layer"] == "step_retry"


# --- the hostile corpus, through the command line -----------------------------------------

CORPUS_FILES = sorted(p for p in CORPUS.glob("*/*")
                      if p.parent.name in registry.MODULES
                      and not p.name.endswith(("-wal", "-shm")))


def test_the_corpus_is_there() -> None:
    assert len(CORPUS_FILES) >= 35


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_file_through_analyze(path: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Every hostile file ends `twice analyze` with its report (exit 0, its bad records named
    as warnings) or with one line naming it (exit 2): never a traceback."""
    copy = tmp_path / path.name  # SQLite may leave -wal/-shm files beside what it opens
    shutil.copyfile(path, copy)
    flag = f"--{path.parent.name.replace('_', '-')}"
    args = [flag, str(copy)] if path.parent.name != "timeline" else [str(copy)]
    code = main(["analyze", *args, "--format", "json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if code == 2:
        assert err.startswith("twice: ") and str(copy) in err, err
        return
    assert code == 0, err
    report = contract(out)
    assert all(w["source"] and w["detail"] for w in report["warnings"])
    assert all(str(copy) in w["source"] for w in report["warnings"]), report["warnings"]


@pytest.mark.parametrize(("content", "said"), [
    (b'{"id": "evt_1", \n', "1 unreadable line; line 1: "),
    (b"\n\nnot json at all\n{\"a\": [1,}\n", "2 unreadable lines; line 3: invalid literal"),
])
def test_a_file_that_is_not_json_lines_names_the_first_bad_line_and_why(
        tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(content)
    err = refused(twice("analyze", "--stripe-events", str(path)), str(path), said)
    assert "column" in err
