"""`twice` on the command line: one click command tree.

    twice analyze       exported evidence of an incident
    twice investigate   the evidence pulled live for a customer, payment intent or charge
    twice sweep         every duplicate in a month of evidence, chunked, stored, resumable
    twice drill         practise on a lab incident with the verdict hidden
    twice lab           reproduce a layer with real libraries (run, build-samples, eval)
    twice web           the web app

Bad input ends a command with one message naming the source and exit code 2; a command line
click cannot parse exits 2 too, with its usage.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from twice.cli.analyze import analyze_command
from twice.cli.drill import drill_group
from twice.cli.investigate import investigate_command
from twice.cli.lab import lab_group
from twice.cli.options import run
from twice.cli.sweep import sweep_command
from twice.cli.web import web_command
from twice.formats import log_visibly


@click.group(name="twice", help="Find where one intended call of an AI agent became two.")
def cli() -> None:
    pass


for command in (analyze_command, investigate_command, web_command, lab_group, sweep_command,
                drill_group):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    log_visibly()  # a library's log line quoting evidence obeys no control character either
    return run(cli, argv, "twice")
