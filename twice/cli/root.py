"""`twice` on the command line: one click command tree.

    twice analyze       exported evidence of an incident
    twice investigate   the evidence pulled live for a customer, payment intent or charge
    twice sweep         every duplicate in a month of evidence, chunked, stored, resumable
    twice drill         practise on a lab incident with the verdict hidden
    twice lab           reproduce a layer with real libraries (run, build-samples, eval)
    twice web           the web app
    twice schema        the JSON Schema of the --format json contract

Each command's module is imported when that command runs (or shows its own help), never for
`twice --help` or `twice --version`, which load click only. How a command ends, and with which
exit code, is `twice.cli.exits`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import Any

import click

from twice.cli.exits import run

# name: (module, attribute, the line `twice --help` shows for it)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "analyze": ("twice.cli.analyze", "analyze_command",
                "analyse exported evidence of an incident"),
    "investigate": ("twice.cli.investigate", "investigate_command",
                    "pull the evidence live for a customer, payment intent or charge"),
    "sweep": ("twice.cli.sweep", "sweep_command",
              "every duplicate in a month of evidence, chunked, stored and resumable: "
              "`twice sweep DIR --chunk 1d`, `twice sweep --list`"),
    "drill": ("twice.cli.drill", "drill_group",
              "practise on a lab incident with the verdict hidden: `twice drill --level 2`, "
              "`twice drill --drill L2-4711` (needs twice[lab])"),
    "lab": ("twice.cli.lab", "lab_group",
            "reproduce a layer with real libraries: `twice lab run SCENARIO --out DIR`, "
            "`twice lab build-samples` (needs twice[lab])"),
    "web": ("twice.cli.web", "web_command",
            "the web app on the bundled samples and saved investigations"),
    "schema": ("twice.cli.schema", "schema_command",
               "print the JSON Schema of the --format json contract"),
}


class LazyGroup(click.Group):
    """A group whose commands are imported by name when one is asked for; its listing is
    read from COMMANDS, so `twice --help` imports none of them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute, short_help = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attribute)
        command.short_help = short_help  # one home for the line: COMMANDS
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> object:
        # a library's log line quoting evidence obeys no control character either
        # (twice.formats.log_visibly, installed at the first record: formats loads pandas)
        if logging.getLogRecordFactory() is logging.LogRecord:
            logging.setLogRecordFactory(_visible_at_first_record)
        return super().invoke(ctx)


def _visible_at_first_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
    from twice.formats import log_visibly

    logging.setLogRecordFactory(logging.LogRecord)
    log_visibly()
    return logging.getLogRecordFactory()(*args, **kwargs)


@click.group(name="twice", cls=LazyGroup,
             help="Find where one intended call of an AI agent became two.",
             epilog="Exit codes: 0 analysed, 1 duplicates found (with --exit-code), 2 usage "
                    "error or no evidence readable, 3 partial result, 69 missing extra, "
                    "70 internal error, 130 interrupted.")
@click.version_option(package_name="twice", prog_name="twice", message="%(prog)s %(version)s")
def cli() -> None:
    pass


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, "twice")
