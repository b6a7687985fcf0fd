"""Live evidence: start from what the on-call engineer knows and pull the rest.

"Customer cus_8123 was charged twice around 14:21" becomes: the provider's events for that
customer in the window (the Stripe API), the threads and tool calls behind those requests (the
checkpoint database: first the window, to find the threads whose tool calls name the customer or
whose derived key the provider saw, then exactly those threads), and those threads' traces (the
trace backend). A source that fails is reported and the rest is kept, labelled partial.
Secrets (the API key, database passwords, the trace backend's credentials) never leave this
process: every error, warning, progress line and saved README goes through `redact` with the
request's secrets (`Request.secrets`), whatever a source echoed back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pandas as pd

from twice.connectors import checkpoints as checkpoint_source
from twice.connectors import manifest
from twice.connectors.base import SourceError, SourceWarning, credentials, redact
from twice.connectors.live import (
    LANGFUSE_PUBLIC_KEY_ENV,
    LANGFUSE_SECRET_KEY_ENV,
    LANGSMITH_KEY_ENV,
)
from twice.timeline import Kind, concat, derived_key

# Threads run a little before and after the provider saw their requests.
MARGIN = timedelta(minutes=10)


@dataclass(frozen=True)
class Request:
    subject: str  # cus_..., pi_... or ch_...
    around: datetime
    window: timedelta
    stripe_key: str = field(repr=False)  # never printed, stored or linked
    stripe_base_url: str | None = None  # a Stripe-compatible server (tests, the lab)
    checkpoints: str | None = None  # PostgresSaver DSN or SqliteSaver file
    traces: str | None = None  # jaeger+http://host:16686, tempo+, phoenix+, langsmith://, langfuse+
    # LangSmith's key: None reads LANGSMITH_API_KEY (the command line); the web form gives its own
    # (for Langfuse, any string keeps to the URL's keys: LANGFUSE_*_KEY are not read)
    traces_key: str | None = field(default=None, repr=False)

    @property
    def secrets(self) -> list[str]:
        """What must not be shown: the API key, the credentials in the DSN and the URL, and
        LangSmith's key or Langfuse's keys (read from their environment variables) when that is
        the trace backend."""
        backend = (self.traces or "").strip().lower()
        keys: list[str] = []
        if backend.startswith("langsmith"):
            keys.append(os.environ.get(LANGSMITH_KEY_ENV, "") if self.traces_key is None
                        else self.traces_key)
        elif backend.startswith("langfuse"):
            # the public key in the URL too: half of Langfuse's credentials
            keys += credentials(f"http://{_username(str(self.traces))}@host")
            if self.traces_key is None:
                keys += [os.environ.get(LANGFUSE_PUBLIC_KEY_ENV, ""),
                         os.environ.get(LANGFUSE_SECRET_KEY_ENV, "")]
        return [self.stripe_key, *credentials(self.checkpoints), *credentials(self.traces),
                *(k.strip() for k in keys if k.strip())]

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    @property
    def since(self) -> datetime:
        return self.around - self.window / 2

    @property
    def until(self) -> datetime:
        return self.around + self.window / 2


def _username(url: str) -> str:
    try:
        return urlsplit(url.strip()).username or ""
    except ValueError:  # the backend's parser names what is wrong with the URL
        return ""


@dataclass
class Result:
    rows: pd.DataFrame
    warnings: list[SourceWarning] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one clear message per failed source
    thread_ids: list[str] = field(default_factory=list)
    trace_ids: list[str] = field(default_factory=list)
    events_document: dict[str, Any] | None = None
    trace_documents: list[Any] = field(default_factory=list)
    trace_backend: str | None = None
    failed: dict[str, list[str]] = field(default_factory=dict)  # source name -> its errors

    @property
    def partial(self) -> bool:
        return bool(self.errors)


Progress = Callable[[str], None]


def investigate(req: Request, progress: Progress = lambda _: None) -> Result:
    frames: list[pd.DataFrame] = []
    result = Result(rows=concat([]))

    def tell(message: str) -> None:
        progress(req.redact(message))

    def failing(source: str, stage: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        before = len(result.errors)
        rows = stage()
        if len(result.errors) > before:
            result.failed.setdefault(source, []).extend(result.errors[before:])
        return rows

    provider = failing("stripe_api", lambda: _provider(req, result, tell))
    frames.append(provider)
    customers = set(provider["subject"].dropna()) | (
        {req.subject} if req.subject.startswith("cus_") else set())
    keys = set(provider["idempotency_key"].dropna())
    threads = set(provider["thread_id"].dropna())

    if req.checkpoints:
        ck = failing("checkpoints", lambda: _checkpoints(req, customers, keys, threads,
                                                         result, tell))
        frames.append(ck)
        threads |= set(ck["thread_id"].dropna())
    result.thread_ids = sorted(threads)

    if req.traces:
        frames.append(failing("traces", lambda: _traces(req, result, tell)))
    result.rows = concat(frames)
    # whatever a source quoted (an echoed header, a URL, a body) leaves masked
    result.errors = [req.redact(e) for e in result.errors]
    result.failed = {k: [req.redact(e) for e in v] for k, v in result.failed.items()}
    result.warnings = [SourceWarning(req.redact(w.source), req.redact(w.detail))
                       for w in result.warnings]
    return result


def _provider(req: Request, result: Result, progress: Progress) -> pd.DataFrame:
    from twice.connectors.live import stripe_api

    try:
        subject = stripe_api.Subject(req.subject)
        loaded, fetched = stripe_api.load(
            req.stripe_key, subject, req.since, req.until, base_url=req.stripe_base_url,
            progress=lambda scanned, kept: progress(
                f"stripe: {scanned} events read, {kept} about {req.subject}"))
    except (SourceError, ValueError) as exc:
        result.errors.append(req.redact(str(exc)))
        return concat([])
    result.warnings.extend(loaded.warnings + fetched.warnings)
    if fetched.partial:
        result.errors.append(f"stripe api: stopped early after {fetched.pages} pages; "
                             "the events fetched so far are kept")
    result.events_document = stripe_api.events_document(fetched.events)
    progress(f"stripe: {len(fetched.events)} events about {req.subject} "
             f"({fetched.scanned} read in {fetched.pages} pages)")
    rows: pd.DataFrame = loaded.rows
    return rows


def _checkpoints(req: Request, customers: set[str], keys: set[str], threads: set[str],
                 result: Result, progress: Progress) -> pd.DataFrame:
    """Find the threads behind the provider's requests, then read exactly those threads."""
    target = str(req.checkpoints)
    since, until = req.since - MARGIN, req.until + MARGIN
    try:
        scan = checkpoint_source.load(target, since=since, until=until)
        calls = scan.rows[scan.rows["kind"] == Kind.TOOL_CALL.value]
        named = calls[calls["subject"].isin(list(customers))]
        derived = calls[[derived_key(str(t), str(c)) in keys for t, c in
                         zip(calls["thread_id"], calls["tool_call_id"], strict=True)]]
        found = threads | set(named["thread_id"].dropna()) | set(derived["thread_id"].dropna())
        progress(f"checkpoints: {len(found)} threads behind the provider's requests")
        if not found:
            return concat([])
        loaded = checkpoint_source.load(target, thread_ids=sorted(found), since=since,
                                        until=until)
    except SourceError as exc:
        result.errors.append(req.redact(str(exc)))
        return concat([])
    result.warnings.extend(loaded.warnings)
    rows: pd.DataFrame = loaded.rows
    return rows


def _traces(req: Request, result: Result, progress: Progress) -> pd.DataFrame:
    from twice.connectors.live.traces import backend_from_url

    frames = []
    try:
        backend = backend_from_url(str(req.traces), api_key=req.traces_key)
        result.trace_backend = backend.name
        ids: list[str] = []
        for thread in result.thread_ids:
            for trace_id in backend.find_traces(tags={"gen_ai.conversation.id": thread},
                                                start=req.since - MARGIN,
                                                end=req.until + MARGIN):
                if trace_id not in ids:
                    ids.append(trace_id)
        progress(f"traces: {len(ids)} traces for {len(result.thread_ids)} threads")
        for trace_id in ids:
            loaded, document = backend.get_trace(trace_id)
            frames.append(loaded.rows)
            result.warnings.extend(loaded.warnings)
            result.trace_documents.append(document)
            result.trace_ids.append(trace_id)
    except (SourceError, ValueError) as exc:
        result.errors.append(req.redact(str(exc)))
    return concat(frames)


def save_folder(req: Request, result: Result, out: Path,
                clock_offsets: Sequence[Mapping[str, Any]] = ()) -> list[Path]:
    """Write what was fetched as an incident folder `twice analyze` reads back (`clock_offsets`:
    the analysis' offsets, kept in its manifest)."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if result.events_document is not None:
        path = out / "events.json"
        path.write_bytes(orjson.dumps(result.events_document, option=orjson.OPT_INDENT_2))
        written.append(path)
    if req.checkpoints and result.thread_ids:
        path = out / "checkpoints.sqlite"
        path.unlink(missing_ok=True)
        try:
            if checkpoint_source.is_dsn(req.checkpoints):
                from twice.connectors.checkpoints.export import export_threads

                export_threads(req.checkpoints, result.thread_ids, path)
            else:
                _copy_sqlite_threads(Path(req.checkpoints), result.thread_ids, path)
            written.append(path)
        except SourceError as exc:
            # one more failed source: the rest of the folder is still worth saving
            path.unlink(missing_ok=True)
            message = req.redact(f"saving checkpoints: {exc}")
            result.errors.append(message)
            result.failed.setdefault("checkpoints", []).append(message)
    if result.trace_documents and result.trace_backend:
        from twice.connectors.live.traces import save_traces

        path = out / ("traces.json" if result.trace_backend == "jaeger" else "spans.jsonl")
        save_traces(result.trace_documents, result.trace_backend, path)
        written.append(path)
    readme = out / "README.md"
    readme.write_text(req.redact(_readme(req, result)))
    written.append(readme)
    written.append(manifest.write(out, _manifest(req, result, written), made_by="twice investigate",
                                  subject=req.subject, since=req.since, until=req.until,
                                  clock_offsets=clock_offsets))
    return written


def _manifest(req: Request, result: Result, written: list[Path]) -> manifest.Manifest:
    """What the saved folder holds of each source asked, and what failed (all redacted)."""
    names = {p.name for p in written}
    asked = [("stripe_api", "stripe api" + (f" {req.stripe_base_url}" if req.stripe_base_url
                                            else ""), ["events.json"])]
    if req.checkpoints:
        asked.append(("checkpoints", req.checkpoints, ["checkpoints.sqlite"]))
    if req.traces:
        asked.append(("traces", req.traces, ["traces.json", "spans.jsonl"]))
    sources = [manifest.SourceEntry(name, req.redact(target), name not in result.failed,
                                    [f for f in files if f in names],
                                    [req.redact(e) for e in result.failed.get(name, [])])
               for name, target, files in asked]
    return manifest.Manifest(result.partial, [req.redact(e) for e in result.errors], sources)


def _copy_sqlite_threads(source: Path, thread_ids: list[str], path: Path) -> None:
    import sqlite3

    from twice.connectors.checkpoints.sqlite import open_evidence

    with open_evidence(source) as src, sqlite3.connect(path) as dst:
        src.backup(dst)
        marks = ",".join("?" * len(thread_ids))
        for table in ("checkpoints", "writes"):
            dst.execute(f"DELETE FROM {table} WHERE thread_id NOT IN ({marks})", thread_ids)
    with sqlite3.connect(path) as dst:
        dst.execute("VACUUM")


def _readme(req: Request, result: Result) -> str:
    lines = [
        f"# Investigation of {req.subject} around {req.around:%Y-%m-%d %H:%M} UTC",
        "",
        f"Fetched by `twice investigate` on {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}: "
        f"provider events from {req.since:%Y-%m-%dT%H:%M:%SZ} to "
        f"{req.until:%Y-%m-%dT%H:%M:%SZ}.",
        "",
        f"- threads: {', '.join(result.thread_ids) or 'none found'}",
        f"- traces: {', '.join(result.trace_ids) or 'none fetched'}",
    ]
    if req.checkpoints:
        lines.append(f"- checkpoints from: {req.redact(req.checkpoints)}")
    if req.traces:
        lines.append(f"- traces from: {req.redact(req.traces)}")
    if result.partial:
        lines += ["", "**Partial:** these sources failed:", ""]
        lines += [f"- {e}" for e in result.errors]
    lines += ["", "Re-run offline with `twice analyze <this folder>`.", ""]
    return "\n".join(lines)
