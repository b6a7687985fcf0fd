"""How a `twice` command ends: its exit codes (README, Exit codes) and `run`, which turns what
a command returned or raised into one of them.

    0    analysed: nothing found, or duplicates found without --exit-code
    1    duplicates found, with --exit-code (a gate, like a linter's)
    2    usage error (click), or no evidence could be read: nothing was analysed
    3    partial result: some source could not be read; the report says `partial: true`
    69   a part of twice whose extra is not installed (sysexits' EX_UNAVAILABLE)
    70   twice itself failed, not the input (sysexits' EX_SOFTWARE)
    130  interrupted (Ctrl-C, or end of input at a prompt)

This module imports click and the standard library only: `twice --help` and `--version` load
nothing else.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from twice.extras import MissingExtra, extra_for

EXIT_OK = 0
EXIT_DUPLICATES = 1
EXIT_BAD_INPUT = 2
EXIT_PARTIAL = 3
EXIT_MISSING_EXTRA = 69  # sysexits' EX_UNAVAILABLE: install the extra the message names
EXIT_INTERNAL = 70  # sysexits' EX_SOFTWARE: twice itself failed, not the input
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it

CODES = {
    EXIT_OK: "analysed: nothing found, or duplicates found without --exit-code",
    EXIT_DUPLICATES: "duplicates found, with --exit-code",
    EXIT_BAD_INPUT: "usage error, or no evidence could be read (nothing analysed)",
    EXIT_PARTIAL: "partial result: some source could not be read (`partial: true`)",
    EXIT_MISSING_EXTRA: "a part of twice whose extra is not installed",
    EXIT_INTERNAL: "internal error: a bug in twice, not in the evidence",
    EXIT_INTERRUPTED: "interrupted",
}


def report_code(*, partial: bool, found: bool, gate: bool) -> int:
    """The exit code of a command that printed a report: 3 when the report is partial
    (`partial: true`, whatever it found), else 1 when it found duplicates and the user asked
    for a gate (--exit-code), else 0."""
    if partial:
        return EXIT_PARTIAL
    return EXIT_DUPLICATES if gate and found else EXIT_OK


def missing_extra(prefix: str, exc: MissingExtra) -> int:
    print(f"{prefix}: {exc}", file=sys.stderr)
    return EXIT_MISSING_EXTRA


def run(command: click.Command, argv: Sequence[str] | None, prog_name: str,
        obj: Any = None) -> int:
    """Run `command` on `argv` (the process's own when None) and return its exit code; a
    command line it cannot parse prints click's usage message and exits 2; a missing extra
    is one line naming it (69), an interruption 130."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False, obj=obj)
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except click.Abort:  # click's word for Ctrl-C and for end of input at a prompt
        print(f"{prog_name}: interrupted", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except KeyboardInterrupt:
        print(f"\n{prog_name}: interrupted", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except MissingExtra as exc:
        raise SystemExit(missing_extra(prog_name, exc)) from None
    except ImportError as exc:
        needed = extra_for(exc)
        if needed is None:
            raise
        raise SystemExit(missing_extra(prog_name, needed)) from None
    return int(code or 0)
