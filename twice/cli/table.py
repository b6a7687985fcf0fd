"""The readable `twice analyze` output: one panel per logical call, newest first.

Everything here that came from the evidence (ids, names, keys, evidence lines, warnings, file
names) goes through `twice.cli.text`: a terminal shows it and obeys none of it.
"""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.console import Group as RichGroup
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from twice.cli.text import line, plain
from twice.clocks import THIN_LABEL, THIN_WHY, ClockOffset
from twice.engine import Analysis, Group
from twice.formats import money
from twice.layers import LAYERS
from twice.report import attempt_dict
from twice.verdict import fmt_gap

# a logical call may hold thousands of attempts (hostile or broken evidence): the table shows
# the first ones, the JSON all
MAX_ROWS = 20
MAX_DUPLICATES = 8


def _short(text: str | None, keep: int = 14) -> str | None:
    return text if text is None or len(text) <= keep else text[:keep] + "…"


def _group_panel(group: Group) -> Panel:
    attempts = Table(box=None, pad_edge=False, show_edge=False)
    for col in ["attempt", "at (UTC, aligned)", "idempotency key", "tool call", "effect",
                "object"]:
        attempts.add_column(col, overflow="fold")
    shown = group.attempts.iloc[:MAX_ROWS]
    for _, row in shown.iterrows():
        a = attempt_dict(row.to_dict())
        attempts.add_row(line(a["attempt_id"]), f"{row['at']:%Y-%m-%d %H:%M:%S.%f}"[:-3],
                         line(_short(a["idempotency_key"]) or "(none)"),
                         line(_short(a["tool_call_id"]) or "-"), line(a["effect"]),
                         line(a["object_id"] or "-"))
    body: list[Text | Table] = [attempts]
    if len(group.attempts) > MAX_ROWS:
        body.append(Text(f"... and {len(group.attempts) - MAX_ROWS} more attempts "
                         "(--format json lists all)", style="dim"))
    for d in group.duplicates[:MAX_DUPLICATES]:
        body.append(Text.assemble(
            "\n", (f"{line(d.second).plain}: ", "bold"),
            (str(d.layer), "bold red" if not d.protected else "bold yellow"),
            f"  confidence {d.confidence:.2f}  gap {fmt_gap(d.gap_seconds)} ({d.band})"
            + ("  protected" if d.protected else "")))
        body.append(Text(f"  {LAYERS[d.layer].plain}", style="italic"))
        for alternative in d.alternatives:
            body.append(line(f"  {alternative.describe()}", style="yellow"))
        for item in d.evidence:
            body.append(line(f"  - {item}"))
        body.append(plain(f"  fix: {d.fix}", style="green"))
    if len(group.duplicates) > MAX_DUPLICATES:
        layers = Counter(str(d.layer) for d in group.duplicates[MAX_DUPLICATES:])
        body.append(Text(f"\n... and {len(group.duplicates) - MAX_DUPLICATES} more duplicates ("
                         + ", ".join(f"{n} {layer}" for layer, n in layers.most_common())
                         + "; --format json lists all)", style="dim"))
    if group.findings:
        body.append(Text("\nfindings", style="bold"))
        for f in group.findings:
            body.append(line(f"  [{f.code}] {f.detail}"))
    risk = money(group.money_at_risk(), empty="no second effect")
    title = line(f"{group.group_id}  tool {group.tool_name or '?'}  thread "
                  f"{group.thread_id or '?'}  {len(group.attempts)} attempts  money at risk: "
                  f"{risk}")
    return Panel(RichGroup(*body), title=title, title_align="left")


def clock_line(offset: ClockOffset) -> Text:
    """One clock offset: how far, against what, its range and support; thin ones flagged."""
    line = plain(f"clock: {offset.describe()}", style="dim")
    if offset.thin:
        line.append(f"  [{THIN_LABEL}: {THIN_WHY}]", style="bold yellow")
    return line


def render(analysis: Analysis, sources: list[tuple[str, str]], notes: list[str],
           console: Console | None = None) -> None:
    console = console or Console()
    console.print(plain("evidence: " + "; ".join(f"{n} {t}" for n, t in sources), style="dim"))
    for o in analysis.offsets:
        console.print(clock_line(o))
    if not analysis.groups:
        console.print("No logical call executed more than once.")
    for group in analysis.groups:
        console.print(_group_panel(group))
    for note in notes:
        console.print(plain(note, style="dim"))
    if analysis.warnings:
        console.print(Text(f"{len(analysis.warnings)} warnings:", style="yellow"))
        for w in analysis.warnings[:20]:
            console.print(line(f"  {w.source}: {w.detail}", style="yellow"))
        if len(analysis.warnings) > 20:
            console.print(Text(f"  ... and {len(analysis.warnings) - 20} more (--format json "
                               "lists all)", style="yellow"))
