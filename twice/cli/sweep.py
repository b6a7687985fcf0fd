"""`twice sweep`: the command line of twice.sweep (run, resume, list, show)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

from twice.cli.options import (
    EXIT_OK,
    Duration,
    Source,
    UtcTime,
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
from twice.cli.text import json_out, line, shown
from twice.connectors.base import SourceError
from twice.formats import money
from twice.store import Store, open_store
from twice.store.sweeps import SweepGroup, SweepRecord, get_sweep, list_sweeps, sweep_groups
from twice.sweep.report import document, group_link, listing, partial, totals
from twice.sweep.run import MAX_CHUNK_S, MAX_OVERLAP_S, MIN_CHUNK_S, options_from, run_sweep


@click.command("sweep", short_help="every duplicate in a month of evidence, chunked, stored "
               "and resumable: `twice sweep DIR --chunk 1d`, `twice sweep --list`")
@evidence_options
@click.option("--since", type=UtcTime(), default=None, metavar="TIME",
              help="ISO-8601 (UTC if no zone)")
@click.option("--until", type=UtcTime(), default=None, metavar="TIME",
              help="ISO-8601, exclusive")
@click.option("--chunk", type=Duration(MIN_CHUNK_S, MAX_CHUNK_S), default="1d",
              help="time per chunk (default 1d; 1s to 3660d)")
@click.option("--overlap", type=Duration(0, MAX_OVERLAP_S), default="2h",
              help="evidence read on each side of a chunk (default 2h, at most 31d; "
                   "fingerprint-linked repeats are followed however far)")
@click.option("--resume", default=None, metavar="SWEEP_ID",
              help="finish a sweep (rerunning the same command does the same)")
@click.option("--list", "list_sweeps_", is_flag=True, help="list the stored sweeps")
@click.option("--show", default=None, metavar="SWEEP_ID", help="print a stored sweep")
@click.option("--store", default=None, metavar="URL",
              help="investigation store (default $TWICE_STORE, else the app's SQLite file)")
@click.option("--base-url", default="http://localhost:8501/", show_default=True,
              help="where `twice web` serves, for the links")
@format_option
@exit_code_option
@click.option("--no-progress", is_flag=True, help="no progress bar on stderr")
@engine_options
@verbosity_options
@bad_input_ends_the_command()
def sweep_command(paths: Sequence[str], request_log_map: dict[str, str] | None,
                  tool_attribute: str | None, since: pd.Timestamp | None,
                  until: pd.Timestamp | None, chunk: float, overlap: float, resume: str | None,
                  list_sweeps_: bool, show: str | None, store: str | None, base_url: str,
                  fmt: str, gate: bool, no_progress: bool, provider: str,
                  bands: tuple[float, float], window: float, **flags: Sequence[str]) -> int:
    """Every duplicate group in the sources (a month of exports, several folders), chunk by
    chunk, stored and resumable: `twice sweep DIR --chunk 1d`, `twice sweep --list`."""
    options = engine(provider, bands, window)  # a bad option: refused before the store opens
    opened = open_store(store)
    if list_sweeps_:
        return _list(opened, fmt)
    if show:
        return _emit(opened, show, fmt, base_url, gate)
    chunk_s, overlap_s, since_at, until_at = chunk, overlap, since, until
    sources: Sequence[Source]
    if resume and not (paths or any(flags.values())):
        record = get_sweep(opened, resume)
        if record is None:
            raise SourceError("command line", f"no sweep {resume!r} in the store")
        p = record.params
        sources = _stored_sources(record)
        options, chunk_s, overlap_s = options_from(p), p["chunk_s"], p["overlap_s"]
        since_at, until_at = p.get("since_asked"), p.get("until_asked")
        provider = p.get("provider", provider)
    else:
        sources, notes = evidence(paths, flags, request_log_map, tool_attribute)
        for note in notes:
            print(f"twice: {shown(note)}", file=sys.stderr)
    with Steps("sweep").bar("chunks", disable=no_progress) as progress:
        result = run_sweep(opened, sources, since=since_at, until=until_at, chunk_s=chunk_s,
                           overlap_s=overlap_s, options=options, provider=provider,
                           sweep_id=resume, progress=progress)
    if result.resumed:
        print(f"twice: resumed sweep {result.record.id} ({result.chunks_skipped} chunks were "
              "already done)", file=sys.stderr)
    return _emit(opened, result.record.id, fmt, base_url, gate)


def _stored_sources(record: SweepRecord) -> list[Source]:
    sources: list[Source] = []
    for name, target, options in record.params["sources"]:
        if "***" in target:  # a redacted DSN: its password was never stored
            raise SourceError("command line", f"sweep {record.id} read {target}; pass its "
                                              "sources again to resume it")
        sources.append((name, target, options))
    return sources


def _emit(store: Store, sweep_id: str, fmt: str, base_url: str, gate: bool = False) -> int:
    """The sweep on stdout; 3 when a swept folder says some of its sources failed, else with
    --exit-code 1 when it holds duplicate groups."""
    record = get_sweep(store, sweep_id)
    if record is None:
        raise SourceError("command line", f"no sweep {sweep_id!r} in the store")
    groups = sweep_groups(store, sweep_id)
    if fmt == "json":
        sys.stdout.buffer.write(json_out(document(record, groups, base_url)))
    else:
        _print_table(record, groups, base_url)
    return report_code(partial=partial(record), found=bool(groups), gate=gate)


def _list(store: Store, fmt: str) -> int:
    sweeps = list_sweeps(store)
    if fmt == "json":
        sys.stdout.buffer.write(json_out(listing(sweeps)))
        return EXIT_OK
    for s in sweeps:
        print(f"{s.id}  {s.created_at:%Y-%m-%d %H:%M}  {s.params['since']} .. "
              f"{s.params['until']}  {s.chunks_done}/{s.chunks_total} chunks  "
              f"{s.group_count} groups  {'finished' if s.finished else 'unfinished'}")
    if not sweeps:
        print("no sweep stored yet")
    return EXIT_OK


def _print_table(record: SweepRecord, groups: Sequence[SweepGroup], base_url: str) -> None:
    # wide enough that no link is folded (a folded link cannot be clicked or copied)
    out = Console(file=sys.stdout, width=400)
    state = "finished" if record.finished else "UNFINISHED (resume with --resume)"
    out.print(f"sweep {record.id}: {record.params['since']} .. {record.params['until']}, "
              f"{record.chunks_done}/{record.chunks_total} chunks, {state}")
    table = Table(show_edge=False, pad_edge=False)
    for col in ["first attempt (UTC)", "layer", "conf.", "money at risk", "customer",
                "attempts", "link"]:
        table.add_column(col, no_wrap=True)
    for g in groups:
        # cells as Text: a customer id from the evidence is neither markup nor a control
        table.add_row(f"{g.first_at:%Y-%m-%d %H:%M:%S}", line(g.layer or "—"),
                      "—" if g.confidence is None else f"{g.confidence:.2f}",
                      money(g.money_at_risk) + (" (key held)" if g.protected else ""),
                      line(g.customer or "—"), str(g.attempts), line(group_link(base_url, g)))
    out.print(table)
    t = totals(groups)
    for layer, row in t["by_layer"].items():
        out.print(f"  {layer}: {row['groups']} groups, money at risk "
                  f"{money(row['money_at_risk'])}")
    out.print(f"{t['groups']} duplicate groups, money at risk {money(t['money_at_risk'])}")
    for w in record.warnings:
        out.print(line(f"warning: {w.get('source')}: {w.get('detail')}"))
    errors = record.params.get("errors") or []
    for error in errors:
        out.print(line(f"PARTIAL (saved by the investigation): {error}"))
    if partial(record) and not errors:
        out.print("PARTIAL: a swept folder's manifest says so, or cannot be read")
