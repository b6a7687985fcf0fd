"""`twice analyze`: the engine on exported evidence, as a table or the JSON contract."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from twice.cli.options import (
    EXIT_OK,
    bad_input_ends_the_command,
    engine,
    engine_options,
    evidence,
    evidence_options,
    format_option,
)
from twice.cli.text import json_out
from twice.connectors import manifest, registry
from twice.connectors.base import redact
from twice.engine import Analysis, analyze
from twice.report import to_contract


@click.command("analyze", short_help="analyse exported evidence of an incident")
@evidence_options
@format_option
@engine_options
@bad_input_ends_the_command()
def analyze_command(paths: Sequence[str], request_log_map: dict[str, str] | None,
                    tool_attribute: str | None, fmt: str, provider: str,
                    bands: tuple[float, float], window: float, **flags: Sequence[str]) -> int:
    """Analyse exported evidence of an incident: folders or files (twice recognises the
    formats it reads), or --<source> flags."""
    options = engine(provider, bands, window)
    sources, notes = evidence(paths, flags, request_log_map, tool_attribute)
    # a folder `twice investigate --out` saved says which of its sources failed
    manifests, unreadable = manifest.of_folders(paths)
    loaded = registry.load_all(sources)
    analysis = analyze(loaded.rows, [*unreadable, *loaded.warnings], options)
    extra: dict[str, Any] | None = None
    if manifests or unreadable:
        errors = [e for m in manifests for e in m.errors]
        extra = {"partial": any(m.partial for m in manifests) or bool(unreadable),
                 "errors": errors}
        notes = [*notes, *(f"PARTIAL (saved by the investigation): {e}" for e in errors)]
        if extra["partial"] and not errors:
            notes.append("PARTIAL: the saved folder's manifest says so, or cannot be read")
    emit(analysis, fmt, [(n, redact(str(t))) for n, t, _ in sources], notes, extra)
    return EXIT_OK


def emit(analysis: Analysis, fmt: str, sources: list[tuple[str, str]], notes: list[str],
         extra: dict[str, Any] | None = None) -> None:
    """The analysis on stdout: the JSON contract (with `extra` fields), or the table."""
    if fmt == "json":
        doc = {**to_contract(analysis), **(extra or {})}
        sys.stdout.buffer.write(json_out(doc))
    else:
        from twice.cli.table import render

        render(analysis, sources=sources, notes=notes)
