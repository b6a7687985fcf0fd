"""Run `twice` in a child process in which some packages cannot be imported, as in an
install without the extra that brings them (a test-only helper: the child's import system
refuses the names, twice itself is not touched)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the packages only the `lab` extra installs (pyproject.toml), by their import names
# (a dotted name blocks that module and its submodules only)
LAB_ONLY = ("opentelemetry", "openinference", "time_machine", "moto", "boto3", "botocore")

_CHILD = """
import sys

BLOCKED = set(sys.argv[1].split(","))


class Uninstalled:
    # ahead of every other finder: these packages are not there
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Uninstalled())
for loaded in [m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED)]:
    del sys.modules[loaded]
"""
_TWICE = """
sys.argv = ["twice", *sys.argv[2:]]
from twice.cli import main

raise SystemExit(main())
"""


def twice_without(blocked: Sequence[str], *args: str, timeout: float = 300,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`twice ARGS...` in a child process where the `blocked` packages cannot be imported."""
    child_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", _CHILD + _TWICE, ",".join(blocked), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=child_env)


def python_without(blocked: Sequence[str], code: str, timeout: float = 300,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Python `code` in a child process where the `blocked` packages cannot be imported."""
    child_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", _CHILD + code, ",".join(blocked)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=child_env)
