"""The exit codes a script can rely on (README, Exit codes), each from a real `twice` process:

    0 analysed   1 duplicates found with --exit-code   2 usage error / nothing readable
    3 partial result   69 missing extra (test_extras)   70 internal error (test_internal_error)
    130 interrupted
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.contract import contract
from twice.cli import exits

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data"
DUPLICATED = SAMPLES / "step_retry"
CONTROL = SAMPLES / "control_new_turn"  # a true repeat by the user: no duplicate


def twice(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twice.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_the_codes_are_the_documented_ones() -> None:
    assert (exits.EXIT_OK, exits.EXIT_DUPLICATES, exits.EXIT_BAD_INPUT, exits.EXIT_PARTIAL,
            exits.EXIT_MISSING_EXTRA, exits.EXIT_INTERNAL, exits.EXIT_INTERRUPTED) == (
        0, 1, 2, 3, 69, 70, 130)
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in exits.CODES:
        assert f"| {code} |" in table, code


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_duplicates_found_exit_0_without_the_gate_and_1_with_it(fmt: str) -> None:
    plain = twice("analyze", str(DUPLICATED), "--format", fmt)
    assert plain.returncode == 0, plain.stderr
    gated = twice("analyze", str(DUPLICATED), "--format", fmt, "--exit-code")
    assert gated.returncode == 1, gated.stderr
    assert gated.stdout == plain.stdout  # the same report either way


def test_nothing_found_exits_0_with_the_gate() -> None:
    done = twice("analyze", str(CONTROL), "--format", "json", "--exit-code")
    assert done.returncode == 0, done.stderr
    report = contract(done.stdout)
    assert not [d for g in report["groups"] for d in g["duplicates"]]


@pytest.mark.parametrize("args", [
    ["analyze", str(DUPLICATED), "--bands", "2m,10s"],  # an option out of range
    ["analyse", str(DUPLICATED)],  # no such command
    ["analyze", str(DUPLICATED), "--no-such-option"],
])
def test_a_usage_error_exits_2(args: list[str]) -> None:
    done = twice(*args)
    assert done.returncode == 2
    assert "Usage:" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_evidence_that_cannot_be_read_exits_2_with_no_report(tmp_path: Path) -> None:
    done = twice("analyze", str(tmp_path / "missing"), "--format", "json", "--exit-code")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().endswith("no such file or folder")


def test_a_partial_live_result_exits_3_and_says_partial() -> None:
    """The provider cannot be reached: the report is printed, labelled partial, exit 3
    (with or without --exit-code)."""
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    for gate in ([], ["--exit-code"]):
        done = twice("investigate", "--customer", "cus_1", "--around", "2024-06-03T14:21Z",
                     "--stripe-base-url", f"http://127.0.0.1:{port}", "--format", "json",
                     *gate, env={"STRIPE_API_KEY": "sk_test_not_a_real_key"})
        assert done.returncode == 3, done.stderr
        report = contract(done.stdout)
        assert report["partial"] is True and report["errors"]


def test_an_interrupt_exits_130_without_a_traceback() -> None:
    """Ctrl-C while twice waits on a provider that never answers."""
    accepted = threading.Event()
    held: list[socket.socket] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def hold() -> None:
            conn, _ = server.accept()  # and never answer
            held.append(conn)
            accepted.set()

        threading.Thread(target=hold, daemon=True).start()
        child = subprocess.Popen(
            [sys.executable, "-m", "twice.cli", "investigate", "--customer", "cus_1",
             "--around", "2024-06-03T14:21Z", "--stripe-base-url", f"http://127.0.0.1:{port}",
             "--format", "json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "PYTHONPATH": str(ROOT),
                            "STRIPE_API_KEY": "sk_test_not_a_real_key"})
        try:
            assert accepted.wait(120), "twice never called the provider"
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()
            for conn in held:
                conn.close()
    assert child.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().endswith("twice: interrupted")
    assert out == ""
