"""Connectors by name, and recognising evidence files in an incident folder."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from connectors.base import LoadResult, SourceError, UnknownConnectorError, redact
from twice.timeline import concat

# name -> module; order matters for sniffing: the first connector that claims a file takes it.
MODULES = {
    "stripe_events": "connectors.stripe_events",
    "stripe_logs": "connectors.stripe_logs",
    "request_log": "connectors.request_log",
    "checkpoints": "connectors.checkpoints",
    "spans": "connectors.spans",
    "sqs": "connectors.sqs",
    "timeline": "connectors.timeline_file",
}
SQLITE_MAGIC = b"SQLite format 3\x00"
HEAD_BYTES = 64 * 1024


def get(name: str) -> ModuleType:
    if name not in MODULES:
        raise UnknownConnectorError(
            f"no connector named {name!r}; known: {', '.join(MODULES)}")
    return importlib.import_module(MODULES[name])


def detect(path: Path) -> str | None:
    """The name of the connector that recognises this file, or None."""
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    if head.startswith(SQLITE_MAGIC):
        return "checkpoints"
    for name in MODULES:
        if name == "checkpoints":
            continue
        if get(name).sniff(path, head):
            return name
    return None


def scan_folder(folder: Path) -> tuple[list[tuple[str, Path]], list[Path]]:
    """(connector, file) pairs for the files a folder holds that twice recognises, and the rest."""
    found: list[tuple[str, Path]] = []
    skipped: list[Path] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name.startswith(".") or path.suffix.lower() in {".md", ".txt", ".png"} \
                or path.name in ("truth.json", "analysis.json", "notes.json") \
                or path.name.endswith(("-wal", "-shm")):
            continue
        name = detect(path)
        if name is None:
            skipped.append(path)
        else:
            found.append((name, path))
    return found, skipped


def load_all(sources: Iterable[tuple[str, str | Path, dict[str, Any]]]) -> LoadResult:
    """Load every (connector, target, options) and put the rows on one timeline.

    A source that cannot be read raises SourceError; the caller decides whether to go on.
    """
    frames = []
    warnings = []
    for name, target, options in sources:
        try:
            result = get(name).load(target, **options)
        except SourceError:
            raise
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            raise SourceError(redact(str(target)), f"{type(exc).__name__}: {exc}") from None
        frames.append(result.rows)
        warnings.extend(result.warnings)
    return LoadResult(source="all", rows=concat(frames), warnings=warnings)
