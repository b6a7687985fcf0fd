"""Connectors by name, and recognising evidence files in an incident folder."""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from twice.connectors import parallel
from twice.connectors.base import (
    Connector,
    LoadResult,
    SourceError,
    SourceWarning,
    UnknownConnectorError,
    redact,
)
from twice.connectors.manifest import NAME as MANIFEST
from twice.timeline import concat

# name -> module; order matters for sniffing: the first connector that claims a file takes it.
MODULES = {
    "stripe_events": "twice.connectors.provider.stripe_events",
    "stripe_logs": "twice.connectors.provider.stripe_logs",
    "request_log": "twice.connectors.provider.request_log",
    "checkpoints": "twice.connectors.checkpoints",
    "spans": "twice.connectors.spans",
    "sqs": "twice.connectors.queue.sqs",
    "timeline": "twice.connectors.provider.timeline_file",
}
SQLITE_MAGIC = b"SQLite format 3\x00"
HEAD_BYTES = 64 * 1024

if TYPE_CHECKING:  # every module above is a Connector (mypy checks the modules against it)
    from twice.connectors import checkpoints, spans
    from twice.connectors.provider import request_log, stripe_events, stripe_logs, timeline_file
    from twice.connectors.queue import sqs

    _CONNECTORS: tuple[Connector, ...] = (stripe_events, stripe_logs, request_log, checkpoints,
                                          spans, sqs, timeline_file)


def get(name: str) -> Connector:
    """The connector called `name` (imported on first use)."""
    if name not in MODULES:
        raise UnknownConnectorError(
            f"no connector named {name!r}; known: {', '.join(MODULES)}")
    return cast(Connector, importlib.import_module(MODULES[name]))


def detect(path: Path) -> str | None:
    """The name of the connector that recognises this file, or None."""
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    if head.startswith(SQLITE_MAGIC):
        # every SQLite file is the checkpoints connector's, to read or to refuse by name
        return "checkpoints"
    for name in MODULES:
        if name != "checkpoints" and get(name).sniff(path, head):
            return name
    return None


def scan_folder(folder: Path) -> tuple[list[tuple[str, Path]], list[Path]]:
    """(connector, file) pairs for the files a folder holds that twice recognises, and the rest."""
    found: list[tuple[str, Path]] = []
    skipped: list[Path] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name.startswith(".") or path.suffix.lower() in {".md", ".txt", ".png"} \
                or path.name in ("truth.json", "analysis.json", "notes.json", MANIFEST) \
                or path.name.endswith(("-wal", "-shm")):
            continue
        name = detect(path)
        if name is None:
            skipped.append(path)
        else:
            found.append((name, path))
    return found, skipped


# Files of at least this many bytes in all are read side by side, in worker processes. Below it,
# starting a process (~1 s of imports) costs more than it saves.
PARALLEL_MIN_BYTES = 64 * 2**20


def load_one(name: str, target: str | Path, options: dict[str, Any]) -> LoadResult:
    """One source's rows; any failure to read it is a SourceError naming it."""
    load: Callable[..., LoadResult] = get(name).load  # with the connector's own options
    if isinstance(target, Path) and shown_path(target) != str(target):
        return _load_escaped(name, target, options)
    try:
        return load(target, **options)
    except SourceError:
        raise
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise SourceError(redact(str(target)), f"{type(exc).__name__}: {exc}") from None


def shown_path(path: str | Path) -> str:
    """A path as text that can be shown and stored: bytes of a name that are not UTF-8 (which
    Python keeps as lone surrogates, and no text column takes) written as `\\xff`."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def _load_escaped(name: str, target: Path, options: dict[str, Any]) -> LoadResult:
    """Load a file whose name is not UTF-8 through a link named as it is shown (its `-wal`
    too), so every row and message names it in text; the link's folder is then replaced by
    the file's own, shown escaped."""
    with tempfile.TemporaryDirectory(prefix="twice-name-") as tmp:
        alias = Path(tmp) / shown_path(target.name)
        os.symlink(os.path.abspath(target), alias)
        wal = target.with_name(target.name + "-wal")
        if os.path.lexists(wal):
            os.symlink(os.path.abspath(wal), alias.with_name(alias.name + "-wal"))
        folder = shown_path(target.parent)

        def real(text: str) -> str:
            return text.replace(tmp, folder)

        try:
            result = load_one(name, alias, options)
        except SourceError as exc:
            raise SourceError(real(exc.source), real(exc.reason)) from None
    result.rows["origin"] = result.rows["origin"].str.replace(tmp, folder, regex=False)
    result.warnings = [SourceWarning(real(w.source), real(w.detail)) for w in result.warnings]
    return result


def workers_available() -> int:
    """Processes `load_all` may use: `TWICE_WORKERS` if set, else the cores this process may
    run on; one where workers cannot be started as `twice.connectors.parallel` does (not POSIX)."""
    if os.name != "posix":
        return 1
    given = os.environ.get("TWICE_WORKERS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def load_all(sources: Iterable[tuple[str, str | Path, dict[str, Any]]], *,
             workers: int | None = None,
             parallel_min_bytes: int = PARALLEL_MIN_BYTES) -> LoadResult:
    """Load every (connector, target, options) and put the rows on one timeline.

    A source that cannot be read raises SourceError; the caller decides whether to go on.
    With more than one worker (default `workers_available()`) and files of at least
    `parallel_min_bytes` in all, the biggest files are read in worker processes while this
    process reads the rest (`twice.connectors.parallel`); the rows and warnings are the same, in the
    same order, either way.
    """
    todo = list(sources)
    jobs = workers_available() if workers is None else workers
    sizes = [file_size(target) for _, target, _ in todo]
    away = elsewhere(sizes, jobs, parallel_min_bytes)
    results: list[LoadResult | None] = [None] * len(todo)
    with parallel.Workers() as pool:
        for batch in away:
            pool.start([parallel.Task(i, redact(str(todo[i][1])), load_one, *todo[i])
                        for i in batch])
        sent = {i for batch in away for i in batch}
        for i, (name, target, options) in enumerate(todo):
            if i not in sent:
                results[i] = load_one(name, target, options)
        for i, result in pool.results():
            results[i] = result
    frames = [r.rows for r in results if r is not None]
    warnings = [w for r in results if r is not None for w in r.warnings]
    return LoadResult(source="all", rows=concat(frames), warnings=warnings)


def file_size(target: str | Path) -> int:
    """Bytes of a file target; 0 for anything else (a database, a folder, a missing file)."""
    try:
        path = Path(target)
        return path.stat().st_size if path.is_file() else 0
    except (OSError, ValueError):
        return 0


def elsewhere(sizes: list[int], jobs: int, min_bytes: int) -> list[list[int]]:
    """Which sources each worker process reads (a list per worker; none: all read here).

    The files are spread over `jobs` processes, this one included, biggest first onto the one
    with the fewest bytes so far; this process keeps the smallest share, and every source that
    is not a file (a database stays here: its DSN is not sent anywhere)."""
    files = [i for i, size in enumerate(sizes) if size > 0]
    if jobs < 2 or len(files) < 2 or sum(sizes) < min_bytes:
        return []
    load = [0] * min(jobs, len(files))
    slots: list[list[int]] = [[] for _ in load]
    for i in sorted(files, key=lambda i: -sizes[i]):
        slot = load.index(min(load))
        load[slot] += sizes[i]
        slots[slot].append(i)
    mine = load.index(min(load))
    return [sorted(batch) for n, batch in enumerate(slots) if n != mine]
