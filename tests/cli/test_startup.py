"""`twice --help` and `twice --version` start fast: they load click, not the engine (no
pandas, no rich, no connector), and say what a user asks for; `twice web --help` is twice's
own (the store, token and evidence folder the app reads, the port), not streamlit's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "numpy", "rich", "pyarrow", "streamlit", "twice.engine", "twice.connectors")

_CHILD = """
import json, sys
from twice.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": sorted(sys.modules)}), file=sys.stderr)
"""


def _run(*args: str) -> tuple[int, str, set[str]]:
    done = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], done.stdout, set(report["loaded"])


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["web", "--help"], ["schema"]])
def test_help_and_version_load_no_engine(args: list[str]) -> None:
    code, out, loaded = _run(*args)
    assert code == 0
    assert not [m for m in HEAVY if m in loaded], sorted(m for m in HEAVY if m in loaded)
    assert out


def test_help_lists_every_command_and_the_exit_codes() -> None:
    _, out, _ = _run("--help")
    for command in ("analyze", "investigate", "sweep", "drill", "lab", "web"):
        assert f"\n  {command} " in out
    assert "Exit codes: 0 analysed, 1 duplicates found" in out


def test_version_is_the_installed_one() -> None:
    _, out, _ = _run("--version")
    assert out.strip() == f"twice {version('twice')}"


def test_a_command_loads_what_it_needs() -> None:
    """The lazy tree still runs a command: its module is imported when it is asked for."""
    code, out, loaded = _run("analyze", "--help")
    assert code == 0 and "--format" in out
    assert "twice.cli.analyze" in loaded and "twice.cli.sweep" not in loaded


def test_web_help_is_twices_own_and_loads_no_streamlit() -> None:
    code = ("import json, sys\n"
            "from twice.cli import main\n"
            "try:\n    main(['web', '--help'])\n"
            "except SystemExit:\n    pass\n"
            "print(json.dumps('streamlit' in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert json.loads(done.stderr.strip().splitlines()[-1]) is False
    out = done.stdout
    assert out.startswith("Usage: twice web [OPTIONS]")
    for name in ("--store", "--evidence-dir", "--port", "streamlit run --help"):
        assert name in out, name

    from twice.store.location import ENV_VAR
    from twice.web.auth import TOKEN_ENV
    from twice.web.evidence import EVIDENCE_DIR_ENV

    for env in (ENV_VAR, TOKEN_ENV, EVIDENCE_DIR_ENV):  # the names the app really reads
        assert f"\n    {env} " in out, env


def test_shell_completion_names_commands_and_options() -> None:
    """click's completion (README, Install extras): `_TWICE_COMPLETE=bash_source twice`."""
    def complete(words: str) -> str:
        done = subprocess.run([sys.executable, "-m", "twice.cli"], capture_output=True,
                              text=True, timeout=120, cwd=ROOT,
                              env={**os.environ, "_TWICE_COMPLETE": "bash_complete",
                                   "COMP_WORDS": words,
                                   "COMP_CWORD": str(len(words.split()) - 1)})
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert complete("twice an").split() == ["plain,analyze"]
    assert "plain,--exit-code" in complete("twice analyze --exit").split()
