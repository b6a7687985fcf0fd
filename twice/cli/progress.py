"""How loud a command is (-q, -v, -vv) and its progress on stderr.

    (default)  a live spinner or bar on a terminal; nothing when stderr is not one (a pipe, a
               file, CI), so a script's stderr holds only warnings and errors
    -q         no progress, and log records below ERROR dropped
    -v         one line per step, terminal or not, each with the seconds since the start; twice's
               own log records from INFO
    -vv        as -v, and twice's log records from DEBUG

Only twice's loggers are made louder: a library's INFO line may quote a URL or a request.
stdout is never touched: it holds the table or the JSON contract.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from twice.cli.text import plain

QUIET, NORMAL, VERBOSE, DEBUG = -1, 0, 1, 2
_KEY = "twice.verbosity"
F = TypeVar("F", bound=Callable[..., Any])


def _set(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    level = ctx.meta.get(_KEY, NORMAL)
    if param.name == "quiet" and value:
        level = QUIET
    elif param.name == "verbose" and value:
        level = min(int(value), DEBUG)
    ctx.meta[_KEY] = level
    logging.getLogger().setLevel(logging.ERROR if level == QUIET else logging.WARNING)
    logging.getLogger("twice").setLevel(
        {QUIET: logging.ERROR, NORMAL: logging.WARNING, VERBOSE: logging.INFO,
         DEBUG: logging.DEBUG}[level])


def verbosity_options(fn: F) -> F:
    """-v/--verbose (twice: -vv) and -q/--quiet, for a command that reports progress."""
    fn = click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_set,
                      help="no progress on stderr, errors only")(fn)
    return click.option("-v", "--verbose", count=True, expose_value=False, callback=_set,
                        help="a line per step on stderr, terminal or not (-vv: debug)")(fn)


def verbosity() -> int:
    ctx = click.get_current_context(silent=True)
    return int(ctx.meta.get(_KEY, NORMAL)) if ctx is not None else NORMAL


class Steps:
    """A command's progress on stderr at the current verbosity (module docstring)."""

    def __init__(self, name: str, console: Console | None = None,
                 level: int | None = None) -> None:
        self.name = name
        self.console = console or Console(stderr=True, highlight=False)
        self.level = verbosity() if level is None else level
        self.lines = self.level >= VERBOSE
        self.live = not self.lines and self.level >= NORMAL and self.console.is_terminal
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        """One line (-v), or on a terminal at the default level too; never with -q."""
        if self.lines or self.live:
            self._line(text)

    def _line(self, text: str) -> None:
        prefix = f"[{time.monotonic() - self.started:6.1f}s] " if self.lines else ""
        self.console.print(plain(f"{prefix}{self.name}: {text}"), soft_wrap=True)

    @contextmanager
    def step(self, text: str) -> Iterator[None]:
        """A spinner while the step runs (a terminal, default level), a line as it starts
        (-v)."""
        if self.lines:
            self._line(text)
            yield
        elif self.live:
            with self.console.status(plain(text)):
                yield
        else:
            yield

    @contextmanager
    def bar(self, unit: str, disable: bool = False
            ) -> Iterator[Callable[[int, int, int], None]]:
        """`update(done, total, found)`: a live bar on a terminal; with -v one line per
        update ("3/10 chunks · 2 duplicates")."""
        live = Progress(TextColumn(self.name), BarColumn(), MofNCompleteColumn(),
                        TextColumn(f"{unit} · {{task.fields[found]}} duplicates"),
                        TimeElapsedColumn(), console=self.console,
                        disable=disable or not self.live)
        with live:
            task = live.add_task(self.name, total=None, found=0)

            def update(done: int, total: int, found: int) -> None:
                live.update(task, completed=done, total=total, found=found)
                if self.lines and not disable:
                    self._line(f"{done}/{total} {unit} · {found} duplicates")

            yield update
