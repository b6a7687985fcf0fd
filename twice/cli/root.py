"""`twice` on the command line."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from twice.connectors import registry
from twice.connectors.base import SourceError, UnknownConnectorError, redact
from twice.engine import Analysis, Options, analyze
from twice.layers import KEY_RETENTION, Bands
from twice.report import to_contract

EXIT_OK = 0
EXIT_BAD_INPUT = 2

SOURCE_FLAGS = {
    "stripe_events": "Stripe Event objects: GET /v1/events JSON, a JSON array, or JSON lines",
    "stripe_logs": "`stripe logs tail --format JSON` output",
    "request_log": "a provider request log (CSV or JSON lines); see --request-log-map",
    "checkpoints": "LangGraph checkpoints: a SqliteSaver file or a postgresql:// DSN",
    "spans": "spans: OTLP JSON (one object or JSON lines) or Jaeger JSON",
    "sqs": "SQS receive_message results (JSON lines)",
}


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="twice", description="Find where one intended call of an AI agent became two.")
    sub = parser.add_subparsers(dest="command", required=True)
    an = sub.add_parser("analyze", help="analyse exported evidence of an incident")
    an.add_argument("paths", nargs="*", type=Path,
                    help="incident folders or files; twice recognises the formats it reads")
    for name, doc in SOURCE_FLAGS.items():
        an.add_argument(f"--{name.replace('_', '-')}", action="append", default=[],
                        metavar="PATH", help=doc)
    an.add_argument("--request-log-map", default=None, metavar="MAP",
                    help="column mapping for --request-log, e.g. "
                         "'request_id=Request ID,created=Date,idempotency_key=Idempotency key'")
    an.add_argument("--tool-attribute", default=None, metavar="ATTR",
                    help="a span attribute that marks tool spans and holds the tool call id")
    an.add_argument("--format", choices=["table", "json"], default="table")
    an.add_argument("--provider", choices=sorted(KEY_RETENTION), default="stripe",
                    help="whose idempotency-key retention bounds the bands (default stripe)")
    an.add_argument("--bands", default="10s,2m", metavar="SECONDS,TENS",
                    help="upper edges of the seconds and tens-of-seconds bands (default 10s,2m)")
    inv = sub.add_parser(
        "investigate", help="pull the evidence live: provider events for a customer, payment "
                            "intent or charge, the threads behind them, their traces")
    who = inv.add_mutually_exclusive_group(required=True)
    who.add_argument("--customer", metavar="cus_...")
    who.add_argument("--payment-intent", metavar="pi_...")
    who.add_argument("--charge", metavar="ch_...")
    inv.add_argument("--around", required=True, metavar="TIME",
                     help="when it happened, ISO-8601 (UTC if no zone), e.g. 2024-06-03T14:21Z")
    inv.add_argument("--window", default="2h",
                     help="how much time around --around to search (default 2h: 1h either side)")
    inv.add_argument("--stripe-key-env", default="STRIPE_API_KEY", metavar="NAME",
                     help="environment variable holding a Stripe key (a restricted key with read "
                          "access to Events is enough); default STRIPE_API_KEY")
    inv.add_argument("--stripe-base-url", default=None, help=argparse.SUPPRESS)
    inv.add_argument("--checkpoints", default=None, metavar="DSN",
                     help="LangGraph checkpoints: a postgresql:// DSN (read-only) or a "
                          "SqliteSaver file")
    inv.add_argument("--traces", default=None, metavar="URL",
                     help="trace backend: jaeger+http://host:16686 or tempo+http://host:3200")
    inv.add_argument("--out", type=Path, default=None, metavar="DIR",
                     help="save what was fetched as an incident folder `twice analyze` reads")
    inv.add_argument("--format", choices=["table", "json"], default="table")
    sub.add_parser("web", add_help=False,
                   help="the web app on the bundled samples and saved investigations "
                        "(streamlit options pass through, e.g. --server.port 8601)")
    sub.add_parser("lab", add_help=False,
                   help="reproduce a layer with real libraries: `twice lab run SCENARIO --out "
                        "DIR`, `twice lab build-samples`")
    sub.add_parser("sweep", add_help=False,
                   help="every duplicate in a month of evidence, chunked, stored and resumable: "
                        "`twice sweep DIR --chunk 1d`, `twice sweep --list`")
    sub.add_parser("drill", add_help=False,
                   help="practise on a lab incident with the verdict hidden: `twice drill "
                        "--level 2`, `twice drill --drill L2-4711`")
    an.add_argument("--window", default="15m",
                    help="same customer + amount inside this window is one logical call when "
                         "nothing else links the attempts (default 15m)")
    return parser


def _sources(args: argparse.Namespace) -> tuple[list[tuple[str, str | Path, dict[str, Any]]],
                                                  list[str]]:
    notes: list[str] = []
    out: list[tuple[str, str | Path, dict[str, Any]]] = []

    def options(name: str) -> dict[str, Any]:
        if name == "request_log" and args.request_log_map:
            return {"mapping": registry.get("request_log").parse_mapping(args.request_log_map)}
        if name == "spans" and args.tool_attribute:
            return {"tool_attribute": args.tool_attribute}
        return {}

    for name in SOURCE_FLAGS:
        for target in getattr(args, name):
            out.append((name, target, options(name)))
    for path in args.paths:
        dsn = _dsn(path)
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
            raise SourceError(redact(str(path)), "no such file or folder")
    if not out:
        raise SourceError("command line", "no evidence given: pass a folder, files or --<source>")
    return out, notes


def _dsn(path: Path | str) -> str | None:
    """A PostgreSQL DSN given where paths go. argparse made it a Path, which folds `://` to `:/`
    (and so hid it from `redact`: its password reached the error message)."""
    match = re.fullmatch(r"(postgres(?:ql)?):/+(.+)", str(path))
    return f"{match[1]}://{match[2]}" if match else None


def cmd_analyze(args: argparse.Namespace) -> int:
    try:
        seconds, tens = (_duration(x) for x in args.bands.split(","))
        window = _duration(args.window)
    except ValueError:
        raise SourceError("command line", "--bands takes two durations like 10s,2m and "
                                          "--window one like 15m") from None
    bands = Bands(seconds=seconds, tens_of_seconds=tens, retention=KEY_RETENTION[args.provider])
    sources, notes = _sources(args)
    loaded = registry.load_all(sources)
    analysis = analyze(loaded.rows, loaded.warnings,
                       Options(bands=bands, window_s=window))
    _emit(analysis, args.format, [(n, redact(str(t))) for n, t, _ in sources], notes)
    return EXIT_OK


def _emit(analysis: Analysis, fmt: str, sources: list[tuple[str, str]], notes: list[str],
          extra: dict[str, Any] | None = None) -> None:
    if fmt == "json":
        doc = {**to_contract(analysis), **(extra or {})}
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        sys.stdout.write("\n")
    else:
        from twice.cli.table import render

        render(analysis, sources=sources, notes=notes)


def cmd_investigate(args: argparse.Namespace) -> int:
    import os

    import pandas as pd

    from twice.connectors.live.investigate import Request, investigate, save_folder

    key = os.environ.get(args.stripe_key_env, "")
    if not key:
        raise SourceError("command line", f"environment variable {args.stripe_key_env} holds "
                                          "no Stripe key (set it, or name another with "
                                          "--stripe-key-env)")
    try:
        around = pd.Timestamp(args.around)
        around = around.tz_localize("UTC") if around.tzinfo is None else around.tz_convert("UTC")
        window = _duration(args.window)
    except ValueError:
        raise SourceError("command line", "--around takes an ISO-8601 time like "
                                          "2024-06-03T14:21Z and --window a duration like "
                                          "2h") from None
    req = Request(subject=args.customer or args.payment_intent or args.charge,
                  around=around.to_pydatetime(), window=timedelta(seconds=window),
                  stripe_key=key, stripe_base_url=args.stripe_base_url,
                  checkpoints=args.checkpoints, traces=args.traces)
    result = investigate(req, progress=lambda msg: print(msg, file=sys.stderr))
    if args.out is not None:
        for path in save_folder(req, result, args.out):
            print(f"saved {path}", file=sys.stderr)
    analysis = analyze(result.rows, result.warnings)
    sources = [("stripe_api", req.subject)]
    if req.checkpoints:
        sources.append(("checkpoints", redact(req.checkpoints)))
    if req.traces:
        sources.append(("traces", redact(req.traces)))
    notes = [f"PARTIAL: {e}" for e in result.errors]
    _emit(analysis, args.format, sources, notes,
          {"partial": result.partial, "errors": result.errors,
           "thread_ids": result.thread_ids, "trace_ids": result.trace_ids})
    for error in result.errors:
        print(f"twice: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT if result.partial else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["web"]:
        import os

        page = Path(__file__).resolve().parents[1] / "web" / "main.py"
        os.execvp(sys.executable, [sys.executable, "-m", "streamlit", "run", str(page),
                                   "--browser.gatherUsageStats=false", *argv[1:]])
    if argv[:1] == ["lab"]:
        from twice.lab.__main__ import main as lab_main

        return lab_main(argv[1:])
    if argv[:1] == ["sweep"]:
        from twice.cli.sweep import main as sweep_main

        return sweep_main(argv[1:])
    if argv[:1] == ["drill"]:
        from twice.cli.drill import main as drill_main

        return drill_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "analyze":
            return cmd_analyze(args)
        if args.command == "investigate":
            return cmd_investigate(args)
    except (SourceError, UnknownConnectorError) as exc:
        print(f"twice: {redact(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    parser.error(f"unknown command {args.command}")
    return EXIT_BAD_INPUT

