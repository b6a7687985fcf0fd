"""`twice sweep`: the command line of twice.sweep.run (run, resume, list, show)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson
import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from twice.cli.root import EXIT_BAD_INPUT, EXIT_OK, SOURCE_FLAGS, _duration, _sources
from twice.connectors.base import SourceError, UnknownConnectorError, redact
from twice.engine import Options
from twice.formats import iso, money
from twice.layers import KEY_RETENTION, Bands
from twice.store import Store, StoreError, open_store
from twice.store.sweeps import SweepGroup, SweepRecord, get_sweep, list_sweeps, sweep_groups
from twice.sweep.report import document, group_link, totals
from twice.sweep.run import Source, options_from, run_sweep


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="twice sweep", description="Every duplicate group in the sources (a month of "
        "exports, several folders), chunk by chunk, stored and resumable.")
    p.add_argument("paths", nargs="*", type=Path, help="folders or files, as `twice analyze`")
    for name, doc in SOURCE_FLAGS.items():
        p.add_argument(f"--{name.replace('_', '-')}", action="append", default=[],
                       metavar="PATH", help=doc)
    p.add_argument("--since", default=None, metavar="TIME", help="ISO-8601 (UTC if no zone)")
    p.add_argument("--until", default=None, metavar="TIME", help="ISO-8601, exclusive")
    p.add_argument("--chunk", default="1d", help="time per chunk (default 1d)")
    p.add_argument("--overlap", default="2h", help="evidence read on each side of a chunk "
                   "(default 2h; fingerprint-linked repeats are followed however far)")
    p.add_argument("--resume", default=None, metavar="SWEEP_ID",
                   help="finish a sweep (rerunning the same command does the same)")
    p.add_argument("--list", action="store_true", help="list the stored sweeps")
    p.add_argument("--show", default=None, metavar="SWEEP_ID", help="print a stored sweep")
    p.add_argument("--store", default=None, metavar="URL",
                   help="investigation store (default $TWICE_STORE, else the app's SQLite file)")
    p.add_argument("--base-url", default="http://localhost:8501/",
                   help="where `twice web` serves, for the links (default %(default)s)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--request-log-map", default=None, help=argparse.SUPPRESS)
    p.add_argument("--tool-attribute", default=None, help=argparse.SUPPRESS)
    p.add_argument("--provider", choices=sorted(KEY_RETENTION), default="stripe")
    p.add_argument("--bands", default="10s,2m", metavar="SECONDS,TENS")
    p.add_argument("--window", default="15m", help="fallback grouping window (default 15m)")
    return p


def _time(text: str | None, flag: str) -> pd.Timestamp | None:
    if text is None:
        return None
    try:
        t = pd.Timestamp(text)
    except ValueError:
        raise SourceError("command line", f"{flag} takes an ISO-8601 time like "
                                          "2025-03-01T00:00Z") from None
    return t.tz_localize("UTC") if t.tz is None else t.tz_convert("UTC")


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
        table.add_row(f"{g.first_at:%Y-%m-%d %H:%M:%S}", g.layer or "—",
                      "—" if g.confidence is None else f"{g.confidence:.2f}",
                      money(g.money_at_risk) + (" (key held)" if g.protected else ""),
                      g.customer or "—", str(g.attempts), group_link(base_url, g))
    out.print(table)
    t = totals(groups)
    for layer, row in t["by_layer"].items():
        out.print(f"  {layer}: {row['groups']} groups, money at risk "
                  f"{money(row['money_at_risk'])}")
    out.print(f"{t['groups']} duplicate groups, money at risk {money(t['money_at_risk'])}")
    for w in record.warnings:
        out.print(f"warning: {w.get('source')}: {w.get('detail')}", markup=False)


def _emit(store: Store, sweep_id: str, fmt: str, base_url: str) -> int:
    record = get_sweep(store, sweep_id)
    if record is None:
        raise SourceError("command line", f"no sweep {sweep_id!r} in the store")
    groups = sweep_groups(store, sweep_id)
    if fmt == "json":
        sys.stdout.buffer.write(orjson.dumps(document(record, groups, base_url),
                                             option=orjson.OPT_INDENT_2))
        sys.stdout.write("\n")
    else:
        _print_table(record, groups, base_url)
    return EXIT_OK


def _list(store: Store, fmt: str) -> int:
    sweeps = list_sweeps(store)
    if fmt == "json":
        doc = [{"id": s.id, "created_at": iso(s.created_at), "finished": s.finished,
                "chunks_done": s.chunks_done, "chunks_total": s.chunks_total,
                "groups": s.group_count, "since": s.params["since"],
                "until": s.params["until"]} for s in sweeps]
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        return EXIT_OK
    for s in sweeps:
        print(f"{s.id}  {s.created_at:%Y-%m-%d %H:%M}  {s.params['since']} .. "
              f"{s.params['until']}  {s.chunks_done}/{s.chunks_total} chunks  "
              f"{s.group_count} groups  {'finished' if s.finished else 'unfinished'}")
    if not sweeps:
        print("no sweep stored yet")
    return EXIT_OK


def _stored_sources(record: SweepRecord) -> list[Source]:
    sources: list[Source] = []
    for name, target, options in record.params["sources"]:
        if "***" in target:  # a redacted DSN: its password was never stored
            raise SourceError("command line", f"sweep {record.id} read {target}; pass its "
                                              "sources again to resume it")
        sources.append((name, target, options))
    return sources


def _run(args: argparse.Namespace, store: Store) -> int:
    try:
        seconds, tens = (_duration(x) for x in args.bands.split(","))
        chunk_s, overlap_s, window_s = (_duration(args.chunk), _duration(args.overlap),
                                        _duration(args.window))
    except ValueError:
        raise SourceError("command line", "--bands takes two durations like 10s,2m; --chunk, "
                                          "--overlap and --window one like 1d, 2h, 15m") from None
    options = Options(bands=Bands(seconds=seconds, tens_of_seconds=tens,
                                  retention=KEY_RETENTION[args.provider]), window_s=window_s)
    since, until = _time(args.since, "--since"), _time(args.until, "--until")
    given = bool(args.paths) or any(getattr(args, n) for n in SOURCE_FLAGS)
    if args.resume and not given:
        record = get_sweep(store, args.resume)
        if record is None:
            raise SourceError("command line", f"no sweep {args.resume!r} in the store")
        p = record.params
        sources = _stored_sources(record)
        options, chunk_s, overlap_s = options_from(p), p["chunk_s"], p["overlap_s"]
        since, until = p.get("since_asked"), p.get("until_asked")
        args.provider = p.get("provider", args.provider)
    else:
        sources, notes = _sources(args)
        for note in notes:
            print(f"twice: {note}", file=sys.stderr)
    console = Console(stderr=True)
    bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("chunks · {task.fields[dups]} duplicates"), TimeElapsedColumn(),
                   console=console, disable=args.no_progress)
    with bar:
        task = bar.add_task("sweep", total=None, dups=0)

        def progress(done: int, total: int, found: int) -> None:
            bar.update(task, completed=done, total=total, dups=found)

        result = run_sweep(store, sources, since=since, until=until, chunk_s=chunk_s,
                           overlap_s=overlap_s, options=options, provider=args.provider,
                           sweep_id=args.resume, progress=progress)
    if result.resumed:
        print(f"twice: resumed sweep {result.record.id} ({result.chunks_skipped} chunks were "
              "already done)", file=sys.stderr)
    return _emit(store, result.record.id, args.format, args.base_url)


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        store = open_store(args.store)
        if args.list:
            return _list(store, args.format)
        if args.show:
            return _emit(store, args.show, args.format, args.base_url)
        return _run(args, store)
    except (SourceError, UnknownConnectorError, StoreError) as exc:
        print(f"twice: {redact(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
