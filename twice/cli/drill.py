"""`twice drill`: practise on a lab incident with the verdict hidden, in the terminal.

    twice drill --level 2                       # a new drill at level 2, answered interactively
    twice drill --drill L2-4711                 # the same drill a colleague shared
    twice drill --drill L2-4711 --answer step_retry --fix derived_key   # non-interactive

Prints the customer's requests, the gaps and the agent's records (no verdicts), asks for the
layer and the fix (numbered choices), prints the grade and the explanation, records the score
and prints the trainee's progress.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from twice import drills
from twice.drills.store import DrillStore
from twice.store import StoreError
from twice.verdict import fmt_gap

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="twice drill", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trainee", default=None, help="whose progress (default: your user name)")
    p.add_argument("--level", type=int, default=1, choices=sorted(drills.CURRICULUM))
    which = p.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, default=None, help="the drill's seed (random if unset)")
    which.add_argument("--drill", default=None, metavar="ID", help="a drill id, e.g. L2-4711")
    p.add_argument("--answer", default=None, metavar="LAYER",
                   help=f"the layer: {', '.join(drills.LAYER_CHOICES)} (or its number)")
    p.add_argument("--fix", default=None, metavar="FIX",
                   help=f"the fix: {', '.join(drills.FIX_CHOICES)} (or its number)")
    p.add_argument("--cache", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--store", default=None, help="the scores file (default: drills.sqlite3 in "
                                                  "the data dir, or $TWICE_DRILL_STORE)")
    return p


def _cell(value: object) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):  # type: ignore[call-overload]
        return "-"
    if isinstance(value, pd.Timestamp):
        return f"{value:%H:%M:%S.%f}"[:-3]
    return str(value)


def _table(title: str, frame: pd.DataFrame) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for col in frame.columns:
        table.add_column(str(col), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


def show_question(console: Console, q: drills.Question) -> None:
    console.print(f"[bold]{q.prompt}[/bold]\n")
    console.print(_table("Payment requests for the customer (provider, clock-aligned UTC)",
                         q.attempts.drop(columns=["currency"])))
    console.print("\n[bold]Gaps[/bold] (bands: seconds < 10 s < tens of seconds < 2 min < "
                  "minutes < key retention 24 h)")
    for g in q.gaps:
        console.print(f"  {g.first} -> {g.second}: {fmt_gap(g.gap_seconds)} "
                      f"({g.band.value.replace('_', ' ')})")
    if not q.gaps:
        console.print("  (one request)")
    console.print()
    console.print(_table("The agent's records of the threads behind them", q.agent_side))


def _ask(console: Console, what: str, choices: dict[str, str],
         read: Callable[[str], str]) -> str:
    console.print(f"\n[bold]{what}?[/bold]")
    for i, (key, label) in enumerate(choices.items(), start=1):
        console.print(f"  {i}. {key}: {label}")
    while True:
        try:
            return drills.parse_choice(read(f"{what} (number or name): "), choices)
        except ValueError as exc:
            console.print(str(exc))


def show_result(console: Console, g: drills.Grade, e: drills.Explanation) -> None:
    marks = {True: "[green]right[/green]", False: "[red]wrong[/red]"}
    console.print(f"\n[bold]Score {g.score}/2[/bold]: layer {marks[g.layer_ok]} "
                  f"(you said {g.layer_answer}, it was {g.true_layer}); fix "
                  f"{marks[g.fix_ok]} (you said {g.fix_answer}; right: "
                  f"{', '.join(sorted(g.accepted_fixes))})")
    console.print(f"\n[bold]{e.headline}[/bold]\n{e.what_happened}")
    console.print("\n[bold]What gave it away[/bold]")
    for item in e.gave_away:
        console.print(f"  - {item}", markup=False)
    console.print("\n[bold]What would have misled[/bold]")
    for item in e.misled or ("nothing in particular: the fingerprints agree with the timing",):
        console.print(f"  - {item}", markup=False)
    console.print("\n[bold]Fix[/bold]")
    console.print(e.fix, markup=False)
    console.print(e.twice_said, style="dim", markup=False)


def show_progress(console: Console, store: DrillStore, trainee: str) -> None:
    table = Table(title=f"Progress of {trainee}", title_justify="left")
    for col in ("level", "", "drills", "best score"):
        table.add_column(col)
    progress = store.progress(trainee)
    for level, lv in drills.CURRICULUM.items():
        p = progress.get(level)
        table.add_row(str(level), lv.title, str(p.attempted if p else 0),
                      f"{p.best}/{p.possible}" if p else "-")
    console.print(table)


def main(argv: Sequence[str] | None = None, *, read: Callable[[str], str] = input,
         console: Console | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    console = console or Console()
    trainee = args.trainee or getpass.getuser() or "anonymous"
    try:
        drill = (drills.parse_id(args.drill) if args.drill
                 else drills.new_drill(args.level, args.seed))
        layer = drills.parse_choice(args.answer, drills.LAYER_CHOICES) if args.answer else None
        fix = drills.parse_choice(args.fix, drills.FIX_CHOICES) if args.fix else None
        store = DrillStore(args.store)
    except (ValueError, StoreError) as exc:
        print(f"twice drill: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with console.status(f"Preparing drill {drill.id}…"):
        folder = drills.generate(drill, args.cache)
        q = drills.question(drill, folder)
    show_question(console, q)
    console.print(f"\nShare this drill: twice drill --drill {drill.id}")
    try:
        layer = layer or _ask(console, "Layer", drills.LAYER_CHOICES, read)
        fix = fix or _ask(console, "Fix", drills.FIX_CHOICES, read)
    except (EOFError, KeyboardInterrupt):
        print("\ntwice drill: no answer given (use --answer and --fix when not interactive)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    g = drills.grade(drill, folder, layer, fix)
    show_result(console, g, drills.explain(drill, folder))
    store.record(trainee, drill.id, layer, fix, g.score, datetime.now(UTC))
    console.print()
    show_progress(console, store, trainee)
    return EXIT_OK
