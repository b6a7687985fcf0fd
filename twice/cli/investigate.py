"""`twice investigate`: start from a customer, payment intent or charge and a time, and pull
the evidence live (provider events, the threads behind them, their traces)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import pandas as pd

from twice.cli.analyze import emit
from twice.cli.options import (
    Duration,
    UtcTime,
    bad_input_ends_the_command,
    exit_code_option,
    format_option,
)
from twice.cli.progress import QUIET, Steps, verbosity_options
from twice.cli.text import shown
from twice.connectors.base import SourceError
from twice.connectors.live import STRIPE_BASE_URL_ENV
from twice.engine import analyze
from twice.report import offset_dicts

# Stripe's Events API keeps 30 days: a longer window finds nothing more
MAX_WINDOW_S = 31 * 86400.0


class TraceBackendUrl(click.ParamType):
    """`--traces`: a Jaeger, Tempo, Phoenix, LangSmith or Langfuse query URL, checked before
    anything is fetched."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> str:
        from twice.connectors.live.traces import parse_url

        try:
            parse_url(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


@click.command("investigate", short_help="pull the evidence live for a customer, payment "
               "intent or charge")
@click.option("--customer", metavar="cus_...")
@click.option("--payment-intent", metavar="pi_...")
@click.option("--charge", metavar="ch_...")
@click.option("--around", type=UtcTime("2024-06-03T14:21Z"), required=True, metavar="TIME",
              help="when it happened, ISO-8601 (UTC if no zone), e.g. 2024-06-03T14:21Z")
@click.option("--window", type=Duration(1, MAX_WINDOW_S), default="2h",
              help="how much time around --around to search (default 2h: 1h either side; "
                   "at most 31d)")
@click.option("--stripe-key-env", default="STRIPE_API_KEY", metavar="NAME",
              help="environment variable holding a Stripe key (a restricted key with read "
                   "access to Events is enough); default STRIPE_API_KEY")
@click.option("--stripe-base-url", default=None, metavar="URL", envvar=STRIPE_BASE_URL_ENV,
              show_envvar=True,
              help="a Stripe-compatible server to ask instead of api.stripe.com (localstripe, "
                   "a proxy), e.g. http://127.0.0.1:8420")
@click.option("--checkpoints", default=None, metavar="DSN",
              help="LangGraph checkpoints: a postgresql:// DSN (read-only) or a SqliteSaver file")
@click.option("--traces", type=TraceBackendUrl(), default=None, metavar="URL",
              help="trace backend: jaeger+http://host:16686, tempo+http://host:3200, "
                   "phoenix+http://:API_KEY@host:6006/PROJECT, langsmith://PROJECT "
                   "(langsmith+http://host:port/PROJECT self-hosted; the key from "
                   "LANGSMITH_API_KEY), or langfuse+https://cloud.langfuse.com (or a "
                   "self-hosted host; the keys from LANGFUSE_PUBLIC_KEY and "
                   "LANGFUSE_SECRET_KEY)")
@click.option("--out", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="save what was fetched as an incident folder `twice analyze` reads")
@format_option
@exit_code_option
@verbosity_options
@bad_input_ends_the_command()
def investigate_command(customer: str | None, payment_intent: str | None, charge: str | None,
                        around: pd.Timestamp, window: float, stripe_key_env: str,
                        stripe_base_url: str | None, checkpoints: str | None,
                        traces: str | None, out: Path | None, fmt: str, gate: bool) -> int:
    """Pull the evidence live: provider events for a customer, payment intent or charge, the
    threads behind them, their traces."""
    from twice.connectors.live.investigate import Request, investigate, save_folder

    subjects = [s for s in (customer, payment_intent, charge) if s is not None]
    if len(subjects) != 1:
        raise click.UsageError("give exactly one of --customer, --payment-intent, --charge")
    key = os.environ.get(stripe_key_env, "")
    if not key:
        raise SourceError("command line", f"environment variable {stripe_key_env} holds "
                                          "no Stripe key (set it, or name another with "
                                          "--stripe-key-env)")
    req = Request(subject=subjects[0], around=around.to_pydatetime(),
                  window=timedelta(seconds=window), stripe_key=key,
                  stripe_base_url=stripe_base_url, checkpoints=checkpoints, traces=traces)
    steps = Steps("investigate")
    result = investigate(req, progress=steps.say)  # its messages are redacted already
    with steps.step(f"analysing {len(result.rows):,} records"):
        analysis = analyze(result.rows, result.warnings)
    if out is not None:
        for path in save_folder(req, result, out, offset_dicts(analysis)):
            if steps.level > QUIET:
                print(f"saved {shown(path)}", file=sys.stderr)
    sources = [("stripe_api", req.subject)]
    if req.checkpoints:
        sources.append(("checkpoints", req.redact(req.checkpoints)))
    if req.traces:
        sources.append(("traces", req.redact(req.traces)))
    notes = [f"PARTIAL: {e}" for e in result.errors]
    code = emit(analysis, fmt, sources, notes,
                {"partial": result.partial, "errors": result.errors,
                 "thread_ids": result.thread_ids, "trace_ids": result.trace_ids}, gate=gate)
    for error in result.errors:
        print(f"twice: {shown(error)}", file=sys.stderr)  # may quote a server's answer
    return code  # 3 when some source could not be read: the report says partial
