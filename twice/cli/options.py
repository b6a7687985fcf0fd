"""What the commands share: the evidence options, the engine's options, --format, parsing of
durations and times, and how bad input ends a command (one message naming the source, exit 2,
no traceback).

Each option is declared once here; a command takes the ones it needs as decorators.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
import pandas as pd

# the exit codes live in twice.cli.exits (README, Exit codes); their names stay importable here
from twice.cli.exits import (  # noqa: F401
    EXIT_BAD_INPUT,
    EXIT_DUPLICATES,
    EXIT_INTERNAL,
    EXIT_MISSING_EXTRA,
    EXIT_OK,
    EXIT_PARTIAL,
    missing_extra,
    report_code,
    run,
)
from twice.cli.text import shown
from twice.connectors import registry
from twice.connectors.base import EARLIEST, LATEST, SourceError, UnknownConnectorError, redact
from twice.connectors.jsonfile import require_regular_file
from twice.connectors.provider import request_log
from twice.engine import Options
from twice.extras import MissingExtra, extra_for
from twice.formats import utc
from twice.layers import KEY_RETENTION, Bands
from twice.store import StoreError

SOURCE_FLAGS = {
    "stripe_events": "Stripe Event objects: GET /v1/events JSON, a JSON array, or JSON lines",
    "stripe_logs": "`stripe logs tail --format JSON` output",
    "request_log": "a provider request log (CSV or JSON lines); see --request-log-map",
    "checkpoints": "LangGraph checkpoints: a SqliteSaver file or a postgresql:// DSN",
    "spans": "spans: OTLP JSON (one object or JSON lines) or Jaeger JSON",
    "sqs": "SQS receive_message results (JSON lines)",
}
# what a source that cannot be read raises: said in one line, never a traceback
BAD_INPUT = (SourceError, UnknownConnectorError, StoreError)

Source = tuple[str, str | Path, dict[str, Any]]
F = TypeVar("F", bound=Callable[..., Any])


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(fn: F) -> F:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn
    return apply


def evidence_options(fn: F) -> F:
    """Folders, files and DSNs (recognised by their content), the --<source> flags that say
    what a file is, and the options two connectors take."""
    flags = [click.option(f"--{name.replace('_', '-')}", name, multiple=True, metavar="PATH",
                          help=doc) for name, doc in SOURCE_FLAGS.items()]
    return _stack(
        click.argument("paths", nargs=-1),
        *flags,
        click.option("--request-log-map", type=RequestLogMap(), default=None, metavar="MAP",
                     help="column mapping for --request-log, e.g. 'request_id=Request ID,"
                          "created=Date,idempotency_key=Idempotency key'"),
        click.option("--tool-attribute", default=None, metavar="ATTR",
                     help="a span attribute that marks tool spans and holds the tool call id"),
    )(fn)


def engine_options(fn: F) -> F:
    """Key retention, band edges and the fallback grouping window of the engine."""
    return _stack(
        click.option("--provider", type=click.Choice(sorted(KEY_RETENTION)), default="stripe",
                     help="whose idempotency-key retention bounds the bands (default stripe)"),
        click.option("--bands", type=BandEdges(), default="10s,2m", metavar="SECONDS,TENS",
                     help="upper edges of the seconds and tens-of-seconds bands "
                          "(default 10s,2m)"),
        click.option("--window", type=Duration(0, MAX_WINDOW_S), default="15m",
                     help="same customer + amount inside this window is one logical call when "
                          "nothing else links the attempts (default 15m, at most 1d)"),
    )(fn)


exit_code_option = click.option(
    "--exit-code", "gate", is_flag=True,
    help="exit 1 when duplicates are found (0 when none), like a linter's gate")

format_option = click.option("--format", "fmt", type=click.Choice(["table", "json"]),
                             default="table", help="table (default) or the JSON contract")


def bad_input_ends_the_command(prefix: str = "twice",
                               errors: tuple[type[Exception], ...] = BAD_INPUT
                               ) -> Callable[[F], F]:
    """A command that meets bad input says so in one line on stderr and exits 2. Any other
    error is twice's own: one line says what failed on which evidence and where the
    traceback was written, and the command exits 70 (never a raw traceback)."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except MissingExtra as exc:  # before `errors`: it is a RuntimeError too
                return missing_extra(prefix, exc)
            except errors as exc:
                # the message may quote the evidence: named controls, never obeyed
                print(f"{prefix}: {shown(redact(str(exc)))}", file=sys.stderr)
                return EXIT_BAD_INPUT
            except (click.ClickException, click.Abort):
                raise
            except ImportError as exc:
                needed = extra_for(exc)
                if needed is None:
                    print(f"{prefix}: {internal_error(exc, _evidence_named(kwargs))}",
                          file=sys.stderr)
                    return EXIT_INTERNAL
                return missing_extra(prefix, needed)
            except Exception as exc:  # noqa: BLE001 - said in one line, kept in a file
                print(f"{prefix}: {internal_error(exc, _evidence_named(kwargs))}",
                      file=sys.stderr)
                return EXIT_INTERNAL
        return command  # type: ignore[return-value]
    return wrap


def _evidence_named(kwargs: dict[str, Any]) -> str:
    """The evidence a command was given, in words (paths, flags' files), redacted."""
    given = [str(p) for p in kwargs.get("paths") or ()]
    given += [str(t) for name in SOURCE_FLAGS for t in kwargs.get(name) or ()]
    return ", ".join(given) or "the evidence given"


def internal_error(exc: BaseException, evidence: str) -> str:
    """One line for an error that is twice's, not the input's: what failed, on which
    evidence, and the file its traceback was written to (redacted, readable by its owner
    only). If even that file cannot be written, the line says so."""
    import tempfile
    import traceback
    from datetime import UTC, datetime

    text = redact("".join(traceback.format_exception(exc)))
    where = "no file could be written for its traceback"
    try:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        fd, path = tempfile.mkstemp(prefix=f"twice-error-{stamp}-", suffix=".txt")
        with open(fd, "w", encoding="utf-8", errors="backslashreplace") as out:
            out.write(f"twice {' '.join(sys.argv[1:2])} on {evidence}\n\n{text}")
        where = f"traceback in {path}"
    except OSError:
        pass
    what = f"{type(exc).__name__}: {exc}"
    return shown(redact(f"internal error while analysing {evidence}: {what[:300]} ({where}); "
                        "this is a bug in twice, not in the evidence: please report it "
                        "with that file"))


def duration(text: str) -> float:
    """Seconds in `10s`, `2m`, `1h`, `1d` or a bare number of seconds; ValueError otherwise
    (NaN and infinities parse: `Duration` refuses them)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def spoken(seconds: float) -> str:
    """A duration the way the options take it: 1d, 2h, 15m, 10s, 0.5s."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


# The same customer + amount joined by time alone: past a day that joins separate purchases.
MAX_WINDOW_S = 86400.0


class Duration(click.ParamType):
    """A finite duration between `minimum` and `maximum` seconds; anything else is click's usage
    error (exit 2) naming the option. Every duration option of every command is one of these."""

    name = "duration"

    def __init__(self, minimum: float, maximum: float, *, positive: bool = False) -> None:
        self.minimum, self.maximum, self.positive = minimum, maximum, positive

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> float:
        if isinstance(value, float):
            return value  # converted already
        try:
            seconds = duration(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a duration like 10s, 2m, 1h or 1d", param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite duration", param, ctx)
        if self.positive and seconds <= 0:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        if not self.minimum <= seconds <= self.maximum:
            self.fail(f"{value!r} is outside {spoken(self.minimum)}..{spoken(self.maximum)}",
                      param, ctx)
        return seconds


class BandEdges(click.ParamType):
    """`--bands`: the upper edges of the seconds and tens-of-seconds bands, two finite positive
    durations, the first below the second (the provider's key retention bounds them both:
    `engine` checks that, as it depends on --provider)."""

    name = "bands"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> tuple[float, float]:
        if isinstance(value, tuple):
            return value  # converted already
        parts = str(value).split(",")
        if len(parts) != 2:
            self.fail(f"{value!r} is not two durations like 10s,2m", param, ctx)
        edge = Duration(0, math.inf, positive=True)
        seconds, tens = (edge.convert(p, param, ctx) for p in parts)
        if not seconds < tens:
            self.fail(f"{value!r}: the seconds edge must be below the tens-of-seconds edge, "
                      "e.g. 10s,2m", param, ctx)
        return seconds, tens


class RequestLogMap(click.ParamType):
    """`--request-log-map 'request_id=Request ID,created=Date'` as a {field: column} mapping."""

    name = "map"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> dict[str, str]:
        if isinstance(value, dict):
            return value  # converted already
        try:
            return request_log.parse_mapping(str(value))
        except ValueError as exc:
            self.fail(f"{exc} (expected field=column pairs, e.g. 'request_id=Request ID,"
                      "created=Date')", param, ctx)


class UtcTime(click.ParamType):
    """An ISO-8601 time (UTC if it names no zone) between 2000 and 2100, the years evidence
    times are read in (twice.connectors.base.EARLIEST/LATEST)."""

    name = "time"

    def __init__(self, example: str = "2025-03-01T00:00Z") -> None:
        self.example = example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> pd.Timestamp:
        if isinstance(value, pd.Timestamp):
            return value  # converted already
        try:
            at = utc(str(value).strip())
        except (ValueError, TypeError, OverflowError, AttributeError):  # AttributeError: NaT
            at = None
        if at is None or pd.isna(at):
            self.fail(f"{value!r} is not an ISO-8601 time like {self.example}", param, ctx)
        if not EARLIEST <= at <= LATEST:
            self.fail(f"{value!r} is outside {EARLIEST.year}..{LATEST.year}", param, ctx)
        return at


def engine(provider: str, bands: tuple[float, float], window_s: float) -> Options:
    """The engine's options; band edges at or past the provider's key retention are refused
    (a gap past the retention must land in the beyond-retention band)."""
    seconds, tens = bands
    retention = KEY_RETENTION[provider]
    if tens >= retention:
        raise click.BadParameter(
            f"the tens-of-seconds edge {spoken(tens)} must be below {provider}'s key retention "
            f"({spoken(retention)})", param_hint="'--bands'")
    return Options(bands=Bands(seconds=seconds, tens_of_seconds=tens, retention=retention),
                   window_s=window_s)


def evidence(paths: Sequence[str], flags: dict[str, Sequence[str]],
             request_log_map: dict[str, str] | None, tool_attribute: str | None
             ) -> tuple[list[Source], list[str]]:
    """(connector, target, options) for everything given, and notes on files skipped."""
    notes: list[str] = []
    out: list[Source] = []

    def options(name: str) -> dict[str, Any]:
        if name == "request_log" and request_log_map:
            return {"mapping": request_log_map}
        if name == "spans" and tool_attribute:
            return {"tool_attribute": tool_attribute}
        return {}

    for name in SOURCE_FLAGS:
        for target in flags.get(name, ()):
            out.append((name, target, options(name)))
    for given in paths:
        dsn = _dsn(given)
        path = Path(given)
        if dsn is not None:
            out.append(("checkpoints", dsn, {}))
        elif path.is_dir():
            found, skipped = registry.scan_folder(path)
            if not found:
                raise SourceError(str(path), "no evidence file twice recognises in this folder")
            out.extend((name, p, options(name)) for name, p in found)
            notes.extend(f"{p}: not a format twice reads; skipped" for p in skipped)
        elif path.is_file():
            detected = registry.detect(path)
            if detected is None:
                raise SourceError(str(path), "not a format twice reads (use a --<source> flag "
                                             "to say what it is)")
            out.append((detected, path, options(detected)))
        else:
            require_regular_file(path)  # a device or FIFO is named as one
            raise SourceError(redact(str(path)), "no such file or folder")
    if not out:
        raise SourceError("command line", "no evidence given: pass a folder, files or --<source>")
    return out, notes


def _dsn(given: str) -> str | None:
    """A PostgreSQL DSN given where paths go (spelled with a folded `:/` too, as a path
    would have it)."""
    match = re.fullmatch(r"(postgres(?:ql)?):/+(.+)", given)
    return f"{match[1]}://{match[2]}" if match else None
