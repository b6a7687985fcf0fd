"""`twice analyze`: the engine on exported evidence, as a table or the JSON contract."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from twice.cli.options import (
    bad_input_ends_the_command,
    engine,
    engine_options,
    evidence,
    evidence_options,
    exit_code_option,
    format_option,
    report_code,
)
from twice.cli.progress import Steps, verbosity_options
from twice.cli.text import json_out
from twice.connectors import manifest, registry
from twice.connectors.base import redact
from twice.engine import Analysis, analyze
from twice.report import to_contract


@click.command("analyze", short_help="analyse exported evidence of an incident")
@evidence_options
@format_option
@exit_code_option
@engine_options
@verbosity_options
@bad_input_ends_the_command()
def analyze_command(paths: Sequence[str], request_log_map: dict[str, str] | None,
                    tool_attribute: str | None, fmt: str, gate: bool, provider: str,
                    bands: tuple[float, float], window: float, **flags: Sequence[str]) -> int:
    """Analyse exported evidence of an incident: folders or files (twice recognises the
    formats it reads), or --<source> flags."""
    options = engine(provider, bands, window)
    sources, notes = evidence(paths, flags, request_log_map, tool_attribute)
    # a folder `twice investigate --out` saved says which of its sources failed
    manifests, unreadable = manifest.of_folders(paths)
    steps = Steps("analyze")
    with steps.step(f"reading {len(sources)} source{'s' * (len(sources) != 1)}"):
        loaded = registry.load_all(sources)
    with steps.step(f"analysing {len(loaded.rows):,} records"):
        analysis = analyze(loaded.rows, [*unreadable, *loaded.warnings], options)
    steps.say(f"{len(analysis.groups)} logical calls executed more than once, "
              f"{len(analysis.warnings)} warnings")
    extra: dict[str, Any] | None = None
    if manifests or unreadable:
        errors = [e for m in manifests for e in m.errors]
        extra = {"partial": any(m.partial for m in manifests) or bool(unreadable),
                 "errors": errors}
        notes = [*notes, *(f"PARTIAL (saved by the investigation): {e}" for e in errors)]
        if extra["partial"] and not errors:
            notes.append("PARTIAL: the saved folder's manifest says so, or cannot be read")
    return emit(analysis, fmt, [(n, redact(str(t))) for n, t, _ in sources], notes, extra,
                gate=gate)


def emit(analysis: Analysis, fmt: str, sources: list[tuple[str, str]], notes: list[str],
         extra: dict[str, Any] | None = None, *, gate: bool = False) -> int:
    """The analysis on stdout: the JSON contract (with `extra` fields), or the table; returns
    the exit code the report calls for (`twice.cli.exits.report_code`: 3 when `extra` says
    the report is partial, 1 for duplicates found under --exit-code, else 0)."""
    if fmt == "json":
        doc = {**to_contract(analysis), **(extra or {})}
        sys.stdout.buffer.write(json_out(doc))
    else:
        from twice.cli.table import render

        render(analysis, sources=sources, notes=notes)
    return report_code(partial=bool((extra or {}).get("partial")),
                       found=any(g.duplicates for g in analysis.groups), gate=gate)
