"""Evidence text on a terminal is shown, never obeyed.

A Stripe export whose thread id carries an OSC 52 clipboard write and a screen clear, whose
request ids carry a colour, NUL, a right-to-left override and the 8-bit CSI, whose customer
carries rich markup (a terminal hyperlink), beside a file whose name holds a screen clear. `twice
analyze` runs under a real pseudo-terminal (so rich styles its output as for a person); nothing
of the evidence may reach the terminal as a control, and each control is named instead
(`<U+001B>`). The JSON contract keeps the data exact.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from tests.contract import contract
from tests.hostile import (
    CLEAR,
    NEVER_ON_A_TERMINAL,
    OSC52,
    REQUEST,
    RICH_LINK,
    SAMPLES,
    honest_analysis,
)
from twice.cli.drill import show_page, show_result, show_source
from twice.cli.sweep import _print_table
from twice.cli.table import render
from twice.clocks import THIN_LABEL
from twice.drills.curriculum import Drill
from twice.drills.explain import Explanation, Point
from twice.drills.grading import Answer, Grade, Key
from twice.drills.question import Gap, Question
from twice.layers import Band
from twice.store.sweeps import SweepGroup, SweepRecord

ROOT = Path(__file__).resolve().parents[2]
THREAD = f"t{OSC52}{CLEAR}"
CUSTOMER = f"cus_{RICH_LINK}\u202e"
SKIPPED = f"notes{CLEAR}.csv"
RLO_BYTES = "\u202e".encode()


def hostile_folder(folder: Path) -> Path:
    """The step retry's Stripe events (two charges, one thread) with the payloads planted
    consistently, so the duplicate is still found and printed."""
    folder.mkdir()
    doc = json.loads((SAMPLES / "step_retry" / "events.json").read_text())
    for event in doc["data"]:
        obj = event["data"]["object"]
        if isinstance(obj.get("metadata"), dict) and "thread_id" in obj["metadata"]:
            obj["metadata"]["thread_id"] += THREAD
        if obj.get("customer"):
            obj["customer"] += CUSTOMER
        request = event.get("request")
        if isinstance(request, dict) and request.get("id"):
            request["id"] += REQUEST
            if request.get("idempotency_key"):
                request["idempotency_key"] = REQUEST + request["idempotency_key"]
    (folder / "events.json").write_text(json.dumps(doc))  # JSON escapes: "\u001b", "\u0000"
    (folder / SKIPPED).write_text("not evidence\n")
    return folder


def _run_in_pty(args: list[str]) -> tuple[int, str]:
    """`python -m twice.cli ARGS` (this checkout's code) with a pseudo-terminal as stdin, stdout
    and stderr, 300 columns wide; everything it wrote to the terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 300, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "300"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "twice.cli", *args], cwd=ROOT,
                            stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError as exc:  # EIO: the child closed the terminal
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        code = proc.wait(timeout=120)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def _safe(out: str) -> None:
    for seq in NEVER_ON_A_TERMINAL:
        assert seq not in out, f"{seq!r} reached the terminal"


def test_analyze_on_a_terminal_names_the_controls_and_obeys_none(tmp_path: Path) -> None:
    folder = hostile_folder(tmp_path / "incident")
    code, out = _run_in_pty(["analyze", str(folder)])
    assert code == 0, out
    assert "\x1b[" in out, "rich styled nothing: the terminal was not seen as one"
    _safe(out)
    assert "step_retry" in out  # the duplicate was printed
    assert "<U+001B>]52;c;aGVsbG8=<U+001B>\\<U+001B>[2J" in out  # the thread id, in the title
    assert "<U+001B>[31m<U+0000><U+202E><U+009B>2J" in out  # the request ids
    assert "notes<U+001B>[2J.csv: not a format twice reads; skipped" in out


def test_an_error_quoting_the_evidence_names_its_controls(tmp_path: Path) -> None:
    code, out = _run_in_pty(["analyze", str(tmp_path / f"gone{OSC52}{CLEAR}")])
    assert code == 2
    _safe(out)
    assert "gone<U+001B>]52;c;aGVsbG8=<U+001B>\\<U+001B>[2J" in out


def test_the_json_contract_keeps_the_evidence_exact(tmp_path: Path) -> None:
    folder = hostile_folder(tmp_path / "incident")
    done = subprocess.run([sys.executable, "-m", "twice.cli", "analyze", str(folder),
                           "--format", "json"], cwd=ROOT, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # JSON escapes every C0 control: the bytes hold none, the data holds them all
    assert b"\x1b" not in done.stdout and b"\x00" not in done.stdout
    assert b"\\u001b]52" in done.stdout and b"\\u0000" in done.stdout
    # ... and the C1 CSI and the bidi override too (JSON allows them raw; a terminal obeys them)
    assert "\x9b".encode() not in done.stdout and RLO_BYTES not in done.stdout
    assert b"\\u009b" in done.stdout and b"\\u202e" in done.stdout
    (group,) = contract(done.stdout)["groups"]
    assert group["thread_id"].endswith(THREAD)
    assert all(a["request_id"].endswith(REQUEST) for a in group["attempts"])
    assert all(a["subject"].endswith(CUSTOMER) for a in group["attempts"])


def _terminal() -> tuple[Console, io.StringIO]:
    """A console that styles as for a terminal: rich markup, if read, would emit controls."""
    out = io.StringIO()
    return Console(file=out, width=300, force_terminal=True, color_system="truecolor"), out


def test_sweep_table_shows_a_hostile_customer_as_text() -> None:
    console_out = io.StringIO()
    at = datetime(2025, 3, 4, 14, 5, tzinfo=UTC)
    record = SweepRecord("sw1", at, at, {"since": "a", "until": "b"}, 1, 1, 1,
                         [{"source": f"events{CLEAR}.json", "detail": REQUEST}])
    group = SweepGroup("g_1", 0, "inv1", at, at, "step_retry", 0.8, False, {"usd": 2900},
                       CUSTOMER, "charge", THREAD, 2)
    stdout = sys.stdout
    sys.stdout = console_out
    try:
        _print_table(record, [group], "http://localhost:8501/")
    finally:
        sys.stdout = stdout
    out = console_out.getvalue()
    _safe(out)
    assert RICH_LINK in out  # shown as typed, not read as rich markup
    assert "<U+202E>" in out and "events<U+001B>[2J.json" in out


def test_drill_question_and_feedback_show_hostile_text_as_text() -> None:
    console, out = _terminal()
    provider = pd.DataFrame({"request id": ["req_1" + REQUEST], "customer": [CUSTOMER],
                             "amount": ["49.00 USD"]})
    agent = pd.DataFrame({"record": ["tool call"], "thread": [THREAD],
                          "arguments / result": [RICH_LINK]})
    q = Question(Drill(1, "step_retry", 7), CUSTOMER, "49.00 USD",
                 f"Customer {CUSTOMER} may have been charged twice",
                 {"provider": None, "checkpoints": None, "spans": None, "queue": None},
                 {"provider": provider, "checkpoints": agent, "spans": None, "queue": None},
                 [Gap("req_1" + REQUEST, "req_2" + REQUEST, 31.0, Band.TENS_OF_SECONDS)],
                 [f"the provider's clock runs 1.000 s ahead of the spans of {THREAD}"],
                 None, (pd.Timestamp(0), pd.Timestamp(1)))  # type: ignore[arg-type]
    show_page(console, q)
    for source in ("provider", "checkpoints", "spans"):
        show_source(console, q, source)
    key = Key("step_retry", frozenset({"step_retry"}), frozenset({"derived_key"}),
              ("provider",), False, "refund_second", frozenset({"agent_team"}), "charged_twice")
    grade = Grade(Answer("step_retry", "derived_key", ("provider",)), key, True, True, True)
    show_result(console, grade, Explanation(
        "step_retry", f"headline {RICH_LINK}", f"happened {THREAD}",
        (Point("provider", f"gave {REQUEST}"),), (Point("provider", f"misled {CUSTOMER}"),),
        f"fix {CLEAR}", (f"1. path {OSC52}",)), [f"said {RICH_LINK}"])
    text = out.getvalue()
    _safe(text)
    assert text.count(RICH_LINK) >= 5  # page, table, headline, misled, feedback: as typed
    for shown in ("<U+001B>]52;c;aGVsbG8=", "<U+202E>", "<U+0000>", "fix <U+001B>[2J"):
        assert shown in text


def test_table_shows_alternatives_and_clocks() -> None:
    """The layers the evidence cannot rule out, and each clock's offset with its reference,
    range, support and thin flag, in the terminal's words; evidence text in them named."""
    analysis = honest_analysis()
    console, out = _terminal()
    render(analysis, [("stripe_events", "events.json")], [], console=console)
    text = out.getvalue()
    _safe(text)
    (dup,) = analysis.groups[0].duplicates
    assert "could also be: gateway_retry, a proxy or gateway between the agent and the " \
           f"provider resent the request — {dup.alternatives[0].why}" in " ".join(text.split())
    (offset,) = analysis.offsets
    assert f"provider runs {offset.seconds:+.3f} s against spans of worker-a<U+001B>[2J" in text
    assert f"(its evidence allows {offset.low:+.3f} … {offset.high:+.3f} s)" in text
    assert f"; {offset.pairs} records support it: " in text
    assert THIN_LABEL in text
    assert "off the spans" not in text


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


def test_a_library_logging_the_evidence_names_its_controls(tmp_path: Path) -> None:
    """A checkpoint blob naming a module with an OSC 52 clipboard write: LangGraph's own logger
    quotes the name on stderr (its warning about a type off the allow-list); it arrives named,
    as twice's own output does. (The record holds another one, so the file is read with
    LangGraph's serializer, whose logger speaks, not by the raw msgpack path.)"""
    import shutil
    import sqlite3

    import ormsgpack

    path = tmp_path / "checkpoints.sqlite"
    shutil.copyfile(SAMPLES / "step_retry" / "checkpoints.sqlite", path)
    inner = ormsgpack.Ext(0, ormsgpack.packb(["uuid", "UUID", "0" * 32]))
    blob = ormsgpack.packb([ormsgpack.Ext(0, ormsgpack.packb([f"evil{OSC52}", "Thing",
                                                              {"a": inner}]))])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE writes SET value = ? WHERE rowid = (SELECT min(rowid) FROM writes "
                   "WHERE type = 'msgpack')", (blob,))
    db.close()
    code, out = _run_in_pty(["analyze", "--checkpoints", str(path)])
    assert code == 0, out
    _safe(out)
    assert "Blocked deserialization of evil<U+001B>]52;c;aGVsbG8=" in out  # LangGraph's words


def test_a_newline_in_an_id_draws_no_line_of_its_own(tmp_path: Path) -> None:
    """A request id and an idempotency key with a newline (and a carriage return) in them:
    the table shows them named, on their own row, not as a fake line of the table."""
    folder = tmp_path / "incident"
    folder.mkdir()
    doc = json.loads((SAMPLES / "step_retry" / "events.json").read_text())
    fake = "\n│ req_FAKE  2025-03-04 00:00:00.000  (none)  -  created  pi_FAKE │\r"
    for event in doc["data"]:
        request = event.get("request")
        if isinstance(request, dict) and request.get("id"):
            request["id"] += fake
            if request.get("idempotency_key"):
                request["idempotency_key"] = fake + request["idempotency_key"]
    (folder / "events.json").write_text(json.dumps(doc))
    code, out = _run_in_pty(["analyze", str(folder)])
    assert code == 0, out
    assert "step_retry" in out
    assert not [row for row in out.splitlines() if row.lstrip("│ ").startswith("req_FAKE")]
    assert "<U+000A>│ req_FAKE" in out
