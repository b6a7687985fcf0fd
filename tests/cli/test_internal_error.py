"""An error that is twice's own, not the input's: one line on stderr (what failed, on which
evidence, where the traceback was written), exit code 70, never a raw traceback; the file
holds the traceback, redacted."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from twice.cli.options import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    bad_input_ends_the_command,
    evidence_options,
    run,
)
from twice.connectors.base import SourceError


@click.command("probe")
@evidence_options
@bad_input_ends_the_command()
def probe(paths: tuple[str, ...], request_log_map: object, tool_attribute: object,
          **flags: object) -> int:
    """A command that fails the way its argument says (a real click command on the shared
    option helpers and error handling of every twice command)."""
    how = paths[0] if paths else ""
    if how.startswith("bad"):
        raise SourceError(how, "not a format twice reads")
    if how.startswith("bug"):
        # an engine bug that quotes a secret the evidence carried
        raise TypeError("boolean value of NA is ambiguous (key sk_live_51abcdefghijklmnop)")
    return 0


def test_an_internal_error_is_one_line_naming_the_evidence_and_the_traceback_file(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run(probe, ["bug-folder"], "twice") == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "internal error while analysing bug-folder: TypeError: boolean value" in err
    assert "sk_live_51abcdefghijklmnop" not in err
    path = Path(re.search(r"traceback in (\S+?)\)", err)[1])  # type: ignore[index]
    try:
        text = path.read_text()
        assert "Traceback (most recent call last)" in text and "TypeError" in text
        assert "sk_live_51abcdefghijklmnop" not in text
        assert path.stat().st_mode & 0o077 == 0  # readable by its owner only
    finally:
        path.unlink()


def test_bad_input_keeps_its_own_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(probe, ["bad-file"], "twice") == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.strip() == "twice: bad-file: not a format twice reads"
