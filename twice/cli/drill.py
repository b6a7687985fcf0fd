"""`twice drill`: practise on a lab incident with the verdict hidden, in the terminal.

    twice drill --level 2                       # a new drill at level 2, answered interactively
    twice drill --drill L2-4711                 # the same drill a colleague shared
    twice drill --drill L2-4711 --answer step_retry --fix derived_key   # non-interactive
    twice drill progress                        # the trainee's scores per level

Prints the customer's requests, the gaps and the agent's records (no verdicts), asks for the
layer and the fix (numbered choices), prints the grade and the explanation, records the score
and prints the trainee's progress.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from twice import drills
from twice.cli.options import EXIT_BAD_INPUT, EXIT_OK, bad_input_ends_the_command, run
from twice.cli.text import plain, shown
from twice.drills.store import DrillStore
from twice.store import StoreError
from twice.verdict import fmt_gap

trainee_option = click.option("--trainee", default=None,
                              help="whose progress (default: your user name)")
scores_option = click.option("--store", "scores", default=None,
                             help="the scores file (default: drills.sqlite3 in the data dir, "
                                  "or $TWICE_DRILL_STORE)")


def _cell(value: object) -> Text:
    if value is None or (not isinstance(value, str) and pd.isna(value)):  # type: ignore[call-overload]
        return Text("-")
    if isinstance(value, pd.Timestamp):
        return Text(f"{value:%H:%M:%S.%f}"[:-3])
    return plain(value)  # evidence: neither markup nor a terminal control


def _table(title: str, frame: pd.DataFrame) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for col in frame.columns:
        table.add_column(str(col), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


def show_question(console: Console, q: drills.Question) -> None:
    console.print(Text.assemble((shown(q.prompt), "bold"), "\n"))
    console.print(_table("Payment requests for the customer (provider, clock-aligned UTC)",
                         q.attempts.drop(columns=["currency"])))
    console.print("\n[bold]Gaps[/bold] (bands: seconds < 10 s < tens of seconds < 2 min < "
                  "minutes < key retention 24 h)")
    for g in q.gaps:
        console.print(plain(f"  {g.first} -> {g.second}: {fmt_gap(g.gap_seconds)} "
                            f"({g.band.value.replace('_', ' ')})"))
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
            console.print(plain(exc))


def show_result(console: Console, g: drills.Grade, e: drills.Explanation) -> None:
    marks = {True: "[green]right[/green]", False: "[red]wrong[/red]"}
    console.print(f"\n[bold]Score {g.score}/2[/bold]: layer {marks[g.layer_ok]} "
                  f"(you said {g.layer_answer}, it was {g.true_layer}); fix "
                  f"{marks[g.fix_ok]} (you said {g.fix_answer}; right: "
                  f"{', '.join(sorted(g.accepted_fixes))})")
    console.print(Text.assemble("\n", (shown(e.headline), "bold"), "\n", shown(e.what_happened)))
    console.print("\n[bold]What gave it away[/bold]")
    for item in e.gave_away:
        console.print(plain(f"  - {item}"))
    console.print("\n[bold]What would have misled[/bold]")
    for item in e.misled or ("nothing in particular: the fingerprints agree with the timing",):
        console.print(plain(f"  - {item}"))
    console.print("\n[bold]Fix[/bold]")
    console.print(plain(e.fix))
    console.print(plain(e.twice_said, style="dim"))


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


DRILL_HELP = """Practise on a lab incident with the verdict hidden.

\b
    twice drill --level 2            a new drill at level 2, answered interactively
    twice drill --drill L2-4711      the same drill a colleague shared
    twice drill --drill L2-4711 --answer step_retry --fix derived_key
    twice drill progress             the trainee's scores per level
"""


@click.group("drill", invoke_without_command=True, help=DRILL_HELP,
             short_help="practise on a lab incident with the verdict hidden: `twice drill "
                        "--level 2`, `twice drill --drill L2-4711`")
@trainee_option
@click.option("--level", type=click.IntRange(min(drills.CURRICULUM), max(drills.CURRICULUM)),
              default=1, show_default=True)
@click.option("--seed", type=int, default=None, help="the drill's seed (random if unset)")
@click.option("--drill", "drill_id", default=None, metavar="ID", help="a drill id, e.g. L2-4711")
@click.option("--answer", default=None, metavar="LAYER",
              help=f"the layer: {', '.join(drills.LAYER_CHOICES)} (or its number)")
@click.option("--fix", default=None, metavar="FIX",
              help=f"the fix: {', '.join(drills.FIX_CHOICES)} (or its number)")
@click.option("--cache", type=click.Path(path_type=Path), default=None, hidden=True)
@scores_option
@click.pass_context
# a bad id or answer, an unreadable scores file, a drill the lab could not generate
@bad_input_ends_the_command("twice drill", (ValueError, StoreError, RuntimeError))
def drill_group(ctx: click.Context, trainee: str | None, level: int, seed: int | None,
                drill_id: str | None, answer: str | None, fix: str | None, cache: Path | None,
                scores: str | None) -> int:
    if ctx.invoked_subcommand is not None:
        return EXIT_OK
    if seed is not None and drill_id is not None:
        raise click.UsageError("give --seed or --drill, not both")
    obj: dict[str, Any] = ctx.obj or {}
    read: Callable[[str], str] = obj.get("read", input)
    console: Console = obj.get("console") or Console()
    who = trainee or getpass.getuser() or "anonymous"
    drill = drills.parse_id(drill_id) if drill_id else drills.new_drill(level, seed)
    layer = drills.parse_choice(answer, drills.LAYER_CHOICES) if answer else None
    chosen_fix = drills.parse_choice(fix, drills.FIX_CHOICES) if fix else None
    store = DrillStore(scores)
    with console.status(f"Preparing drill {drill.id}…"):
        folder = drills.generate(drill, cache)
        q = drills.question(drill, folder)
    show_question(console, q)
    console.print(f"\nShare this drill: twice drill --drill {drill.id}")
    try:
        layer = layer or _ask(console, "Layer", drills.LAYER_CHOICES, read)
        chosen_fix = chosen_fix or _ask(console, "Fix", drills.FIX_CHOICES, read)
    except (EOFError, KeyboardInterrupt):
        print("\ntwice drill: no answer given (use --answer and --fix when not interactive)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    g = drills.grade(drill, folder, layer, chosen_fix)
    show_result(console, g, drills.explain(drill, folder))
    store.record(who, drill.id, layer, chosen_fix, g.score, datetime.now(UTC))
    console.print()
    show_progress(console, store, who)
    return EXIT_OK


@drill_group.command("progress")
@trainee_option
@scores_option
@bad_input_ends_the_command("twice drill", (StoreError,))
def progress_command(trainee: str | None, scores: str | None) -> int:
    """The trainee's drills and best scores per level."""
    show_progress(Console(), DrillStore(scores), trainee or getpass.getuser() or "anonymous")
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, read: Callable[[str], str] = input,
         console: Console | None = None) -> int:
    """`twice drill ...` with the answers read by `read` and the drill shown on `console`."""
    return run(drill_group, argv, "twice drill", obj={"read": read, "console": console})
