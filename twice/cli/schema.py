"""`twice schema`: the JSON Schema of the `--format json` contract (twice/contract.schema.json,
package data), for a consumer to validate what it reads."""

from __future__ import annotations

import sys
from importlib.resources import files

import click

from twice.cli.exits import EXIT_OK

SCHEMA = "contract.schema.json"


def schema_text() -> str:
    return files("twice").joinpath(SCHEMA).read_text(encoding="utf-8")


@click.command("schema")
def schema_command() -> int:
    """Print the JSON Schema (draft 2020-12) of what `twice analyze`, `investigate` and `sweep`
    print with --format json."""
    sys.stdout.write(schema_text())
    return EXIT_OK
