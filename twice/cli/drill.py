"""`twice drill`: practise on a lab incident with the verdict hidden, in the terminal.

    twice drill --level 2                       # a new drill at level 2, answered interactively
    twice drill --drill L2-4711                 # the same drill a colleague shared
    twice drill --drill L2-4711 --open provider,checkpoints --answer step_retry \
        --fix derived_key                       # non-interactive
    twice drill --review                        # a drill like one you missed
    twice drill progress                        # tries, confusion, what is due
    twice drill cohort create oncall --members ana,bo --levels 1,2
    twice drill cohort show oncall --csv results.csv

A drill starts from the page; the trainee opens sources one by one (the score counts whether
the ones the answer needs were opened, and not many more), says how sure they are, answers the
layer and the fix and the response questions, and gets the feedback on that answer, the
explanation from the evidence shown, and the expert's path through it.
"""

from __future__ import annotations

import getpass
import sys
import time
from collections.abc import Callable, Sequence
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
from twice.drills.store import DrillStore, results_csv, trainee_name
from twice.store import StoreError

trainee_option = click.option("--trainee", default=None,
                              help="whose progress (default: your user name)")
scores_option = click.option("--store", "scores", default=None,
                             help="the scores file (default: drills.sqlite3 in the data dir, "
                                  "or $TWICE_DRILL_STORE)")
Read = Callable[[str], str]


def _table(title: str, frame: pd.DataFrame) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for col in frame.columns:
        table.add_column(str(col), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(plain(v) for v in row))  # evidence: neither markup nor a control
    return table


def show_page(console: Console, q: drills.Question) -> None:
    console.print(Text.assemble((shown(q.page), "bold")))


def show_source(console: Console, q: drills.Question, source: str) -> None:
    frame = q.shown[source]
    title = drills.SOURCE_WORDS[source]
    console.print()
    if frame is None:
        console.print(plain(f"{title[0].upper()}{title[1:]}: not exported for this incident."))
        return
    if frame.empty:
        console.print(plain(f"{title[0].upper()}{title[1:]}: no records for these threads."))
        return
    console.print(_table(title[0].upper() + title[1:], frame))
    if source == "provider":
        console.print(plain(f"Gaps between the customer's requests of {q.amount}:"),
                      style="bold")
        for g in q.gaps:
            console.print(plain(f"  {g.first} -> {g.second}: {g.text} ({g.band_text})"))
        if not q.gaps:
            console.print("  (one request)")
        for c in q.clocks:
            console.print(plain(f"Clock: {c}"))


def _choose(console: Console, what: str, choices: dict[str, str], read: Read) -> str:
    console.print(f"\n[bold]{what}?[/bold]")
    for i, label in enumerate(choices.values(), start=1):
        console.print(plain(f"  {i}. {label}"))
    while True:
        try:
            return drills.parse_choice(read(f"{what} (number): "), choices)
        except ValueError as exc:
            console.print(plain(exc))


def _reveal(console: Console, q: drills.Question, read: Read) -> tuple[str, ...]:
    """Open sources one by one until the trainee answers; returns them in order."""
    opened: list[str] = []
    menu = ", ".join(f"{i} {s}" for i, s in enumerate(drills.SOURCES, start=1))
    while True:
        text = read(f"Open a source ({menu}), or press Enter to answer: ").strip()
        if not text:
            return tuple(opened)
        try:
            source = drills.parse_choice(text, {s: s for s in drills.SOURCES})
        except ValueError as exc:
            console.print(plain(exc))
            continue
        if source not in opened:
            opened.append(source)
        show_source(console, q, source)


def show_result(console: Console, g: drills.Grade, e: drills.Explanation,
                said: list[str]) -> None:
    marks = {True: "[green]right[/green]", False: "[red]wrong[/red]"}
    console.print(f"\n[bold]Score {g.score}/{drills.MAX_SCORE}[/bold]: layer {marks[g.layer_ok]}"
                  f", fix {marks[g.fix_ok]}, sources {marks[g.evidence_ok]}")
    if g.response:
        console.print(f"Response {g.response_score}/{len(g.response)}: " + ", ".join(
            f"{k} {marks[v]}" for k, v in g.response.items()))
    if said:
        console.print("\n[bold]On your answer[/bold]")
        for item in said:
            console.print(plain(f"  - {item}"))
    console.print(Text.assemble("\n", (shown(e.headline), "bold"), "\n", shown(e.what_happened)))
    console.print("\n[bold]What gave it away[/bold]")
    for p in e.gave_away:
        console.print(plain(f"  - {p.text}"))
    console.print("\n[bold]What could mislead[/bold]")
    for p in e.misled or (drills.Point("", "nothing: the fingerprints agree with the timing"),):
        console.print(plain(f"  - {p.text}"))
    console.print("\n[bold]Fix[/bold]")
    console.print(plain(e.fix))


def show_debrief(console: Console, g: drills.Grade, e: drills.Explanation) -> None:
    a = g.answer
    console.print("\n[bold]Debrief[/bold]")
    first = a.opened[0] if a.opened else None
    console.print(plain(
        "You opened: " + (", ".join(a.opened) if a.opened else "nothing") +
        (f" (first: {first})" if first else "") + "; the answer needs: "
        + ", ".join(g.key.needs) + "."))
    if a.confidence is not None:
        console.print(plain(f"You were {drills.CONFIDENCE[a.confidence]} before answering"
                            + (f" and decided in {a.decide_s:.0f} s." if a.decide_s is not None
                               else ".")))
    for key, right in (("mitigation", {g.key.mitigation}), ("owner", g.key.owners),
                       ("status", {g.key.status})):
        choices = {"mitigation": drills.MITIGATION_CHOICES, "owner": drills.OWNER_CHOICES,
                   "status": drills.STATUS_CHOICES}[key]
        console.print(plain(f"{key}: " + " / ".join(choices[k] for k in sorted(right))))
    console.print("\n[bold]The expert's path through the evidence[/bold]")
    for line in e.path:
        console.print(plain(f"  {line}"))


def show_progress(console: Console, store: DrillStore, trainee: str) -> None:
    table = Table(title=f"Progress of {shown(trainee)}", title_justify="left")
    for col in ("level", "", "drills", "tries", "first tries", "right layer"):
        table.add_column(col)
    progress = store.progress(trainee)
    for level, lv in drills.CURRICULUM.items():
        p = progress.get(level)
        table.add_row(str(level), lv.title, str(p.drills if p else 0), str(p.tries if p else 0),
                      f"{p.first_points}/{p.first_possible}" if p else "-",
                      f"{p.right_layer}/{p.tries}" if p else "-")
    console.print(table)
    confusion = store.confusion(trainee)
    if confusion:
        t = Table(title="Per layer: what you answered", title_justify="left")
        t.add_column("it was")
        t.add_column("you answered")
        for layer, said in sorted(confusion.items()):
            t.add_row(layer, ", ".join(f"{k} ({n})" for k, n in said.most_common()))
        console.print(t)
    due = store.due(trainee)
    if due:
        console.print(f"{len(due)} layer(s) due for review: `twice drill --review`.")


def _ask_or(value: str | None, console: Console, what: str, choices: dict[str, str],
            read: Read) -> str:
    return drills.parse_choice(value, choices) if value else _choose(console, what, choices,
                                                                      read)


def _response(value: str | None, interactive: bool, console: Console, what: str,
              choices: dict[str, str], read: Read) -> str | None:
    if value or interactive:
        return _ask_or(value, console, what, choices, read)
    return None


DRILL_HELP = """Practise on a lab incident with the verdict hidden.

\b
    twice drill --level 2            a new drill at level 2, answered interactively
    twice drill --drill L2-4711      the same drill a colleague shared
    twice drill --drill L2-4711 --open provider,checkpoints --answer step_retry --fix derived_key
    twice drill --review             a drill like one you missed
    twice drill progress             tries, confusion per layer, what is due
    twice drill cohort create NAME --members a,b --levels 1,2
    twice drill cohort show NAME [--csv FILE]
"""


@click.group("drill", invoke_without_command=True, help=DRILL_HELP,
             short_help="practise on a lab incident with the verdict hidden: `twice drill "
                        "--level 2`, `twice drill --drill L2-4711`")
@trainee_option
@click.option("--level", type=click.IntRange(min(drills.CURRICULUM), max(drills.CURRICULUM)),
              default=1, show_default=True)
@click.option("--seed", type=int, default=None, help="the drill's seed (random if unset)")
@click.option("--drill", "drill_id", default=None, metavar="ID", help="a drill id, e.g. L2-4711")
@click.option("--review", is_flag=True, help="a new drill of a layer you missed")
@click.option("--open", "open_", default=None, metavar="SOURCES",
              help=f"the sources to open, in order: {','.join(drills.SOURCES)} or all")
@click.option("--confidence", type=click.IntRange(1, 4), default=None,
              help="how sure you are: 1 guessing .. 4 certain")
@click.option("--answer", default=None, metavar="LAYER",
              help=f"the layer: {', '.join(drills.LAYER_CHOICES)} (or its number)")
@click.option("--fix", default=None, metavar="FIX",
              help=f"the fix: {', '.join(drills.FIX_CHOICES)} (or its number)")
@click.option("--mitigation", default=None, metavar="CHOICE",
              help=f"for the customer: {', '.join(drills.MITIGATION_CHOICES)}")
@click.option("--owner", default=None, metavar="CHOICE",
              help=f"who owns the change: {', '.join(drills.OWNER_CHOICES)}")
@click.option("--status", default=None, metavar="CHOICE",
              help=f"the status update: {', '.join(drills.STATUS_CHOICES)}")
@click.option("--cache", type=click.Path(path_type=Path), default=None, hidden=True)
@scores_option
@click.pass_context
# a bad id or answer, an unreadable scores file, a drill the lab could not generate
@bad_input_ends_the_command("twice drill", (ValueError, StoreError, RuntimeError))
def drill_group(ctx: click.Context, trainee: str | None, level: int, seed: int | None,
                drill_id: str | None, review: bool, open_: str | None, confidence: int | None,
                answer: str | None, fix: str | None, mitigation: str | None, owner: str | None,
                status: str | None, cache: Path | None, scores: str | None) -> int:
    if ctx.invoked_subcommand is not None:
        return EXIT_OK
    if sum(x is not None and x is not False for x in (seed, drill_id, review or None)) > 1:
        raise click.UsageError("give one of --seed, --drill and --review")
    obj: dict[str, Any] = ctx.obj or {}
    read: Read = obj.get("read", input)
    console: Console = obj.get("console") or Console()
    who = trainee_name(trainee or getpass.getuser() or "anonymous")
    store = DrillStore(scores)
    if drill_id:
        drill = drills.parse_id(drill_id)
    elif review:
        found = store.review_drill(who)
        if found is None:
            console.print("Nothing is due for review: here is a new drill instead.")
        drill = found or drills.new_drill(level, seen=[t.drill_id for t in store.history(who)])
    else:
        drill = drills.new_drill(level, seed, seen=[t.drill_id for t in store.history(who)])
    for value, choices in ((answer, drills.LAYER_CHOICES), (fix, drills.FIX_CHOICES),
                           (mitigation, drills.MITIGATION_CHOICES),
                           (owner, drills.OWNER_CHOICES), (status, drills.STATUS_CHOICES)):
        if value:
            drills.parse_choice(value, choices)  # a bad flag is said before the lab runs
    opened = drills.parse_sources(open_) if open_ is not None else None
    with console.status(f"Preparing drill {drill.id}…"):
        folder = drills.generate(drill, cache)
        q = drills.question(drill, folder)
    show_page(console, q)
    console.print(f"Share this drill: twice drill --drill {drill.id}")
    started = time.monotonic()
    interactive = answer is None
    try:
        if opened is None and interactive:
            opened = _reveal(console, q, read)  # each source shown as it is opened
        else:
            opened = drills.SOURCES if opened is None else opened
            for source in opened:
                show_source(console, q, source)
        if confidence is None and interactive:
            confidence = int(_choose(console, "How sure are you", {
                str(k): v for k, v in drills.CONFIDENCE.items()}, read))
        layer = _ask_or(answer, console, "Layer", drills.LAYER_CHOICES, read)
        decide = round(time.monotonic() - started, 1) if interactive else None
        given = drills.Answer(
            layer, _ask_or(fix, console, "Fix", drills.FIX_CHOICES, read), tuple(opened),
            confidence, decide,
            # the response questions are asked in a session; with flags they are optional
            _response(mitigation, interactive, console, "For the customer, now",
                      drills.MITIGATION_CHOICES, read),
            _response(owner, interactive, console, "Who owns the change", drills.OWNER_CHOICES,
                      read),
            _response(status, interactive, console, "The status update",
                      drills.STATUS_CHOICES, read))
    except (EOFError, KeyboardInterrupt):
        print("\ntwice drill: no answer given (use --answer and --fix when not interactive)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    g = drills.grade(drill, folder, given)
    show_result(console, g, drills.explain(drill, folder), drills.feedback(drill, folder, g))
    show_debrief(console, g, drills.explain(drill, folder))
    assigned = [name for name, ids in store.assigned(who) if drill.id in ids]
    store.record(who, drill, g, cohort=assigned[0] if assigned else None)
    console.print()
    show_progress(console, store, who)
    return EXIT_OK


@drill_group.command("progress")
@trainee_option
@scores_option
@bad_input_ends_the_command("twice drill", (StoreError, ValueError))
def progress_command(trainee: str | None, scores: str | None) -> int:
    """The trainee's tries per level, what they answered per layer, and what is due."""
    store = DrillStore(scores)
    who = trainee_name(trainee or getpass.getuser() or "anonymous")
    console = Console()
    show_progress(console, store, who)
    history = store.history(who)
    if history:
        t = Table(title="Every try, newest first", title_justify="left")
        for col in ("when", "drill", "it was", "you said", "fix", "score", "sources",
                    "sure", "seconds"):
            t.add_column(col)
        for a in history:
            t.add_row(f"{a.at:%Y-%m-%d %H:%M}", a.drill_id, a.true_layer or "?", a.layer_answer,
                      a.fix_answer, f"{a.score}/{drills.MAX_SCORE}", ",".join(a.opened) or "-",
                      drills.CONFIDENCE.get(a.confidence or 0, "-"),
                      f"{a.decide_s:.0f}" if a.decide_s else "-")
        console.print(t)
    return EXIT_OK


@drill_group.group("cohort")
def cohort_group() -> None:
    """A team lead's cohorts: assign a drill set, see the results."""


@cohort_group.command("create")
@click.argument("name")
@click.option("--members", required=True, help="trainees, comma-separated")
@click.option("--levels", default=None, help="one new drill of every case of these levels")
@click.option("--drills", "drill_ids", default=None, help="drill ids, comma-separated")
@scores_option
@bad_input_ends_the_command("twice drill cohort", (StoreError, ValueError))
def cohort_create(name: str, members: str, levels: str | None, drill_ids: str | None,
                  scores: str | None) -> int:
    """Assign a drill set to a cohort (replaces a cohort of the same name)."""
    ids = [d for d in (drill_ids or "").split(",") if d.strip()]
    if levels:
        ids += [d.id for d in drills.drill_set(int(x) for x in levels.split(",") if x.strip())]
    DrillStore(scores).create_cohort(name, members.split(","), ids)
    click.echo(f"cohort {shown(name)}: {len(ids)} drills: {', '.join(ids)}")
    return EXIT_OK


@cohort_group.command("show")
@click.argument("name")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), default=None,
              help="write the results per trainee and drill as CSV")
@scores_option
@bad_input_ends_the_command("twice drill cohort", (StoreError, ValueError, KeyError, OSError))
def cohort_show(name: str, csv_path: Path | None, scores: str | None) -> int:
    """A cohort's results per layer and per drill."""
    store = DrillStore(scores)
    rows = store.cohort_results(name)
    console = Console()
    t = Table(title=f"Cohort {shown(name)}: per layer (first tries)", title_justify="left")
    for col in ("layer", "first tries", "right", "answered instead"):
        t.add_column(col)
    for r in store.cohort_by_layer(name):
        t.add_row(r["layer"], str(r["first_tries"]), str(r["right_first"]),
                  plain(r["answered_instead"]))
    console.print(t)
    t = Table(title="Per trainee and drill", title_justify="left")
    for col in ("trainee", "drill", "tries", "first", "last"):
        t.add_column(col)
    for r in rows:
        t.add_row(plain(r["trainee"]), r["drill"], str(r["tries"]),
                  "-" if r["first_score"] is None else f"{r['first_score']}/{drills.MAX_SCORE}",
                  "-" if r["last_score"] is None else f"{r['last_score']}/{drills.MAX_SCORE}")
    console.print(t)
    if csv_path is not None:
        csv_path.write_text(results_csv(rows), encoding="utf-8")
        console.print(plain(f"wrote {csv_path}"))
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, read: Read = input,
         console: Console | None = None) -> int:
    """`twice drill ...` with the answers read by `read` and the drill shown on `console`."""
    return run(drill_group, argv, "twice drill", obj={"read": read, "console": console})

