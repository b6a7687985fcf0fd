"""The manifest a saved incident folder carries: which sources were fetched from where, which
failed and why, and whether the folder is therefore partial.

`twice investigate --out` and the web app's folder export write it (`twice-manifest.json`, beside
the evidence files; no secret: every text in it went through the request's `redact`, or was saved
redacted), and `twice analyze` of the folder reports
the folder's `partial` and `errors` as the investigation did. The manifest is no evidence: the
folder scan skips it. What it says is read as hostile data: a manifest that cannot be read is a
warning naming it and why, never the end of the analysis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from twice.connectors.base import SourceWarning

NAME = "twice-manifest.json"
VERSION = 1
MAX_BYTES = 1 * 2**20
MAX_ERRORS = 100
MAX_TEXT = 1000  # characters of one error or target kept when read


@dataclass(frozen=True)
class SourceEntry:
    name: str  # stripe_api, checkpoints, traces
    target: str  # where from, redacted
    ok: bool
    files: list[str] = field(default_factory=list)  # what the folder holds of it
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Manifest:
    partial: bool
    errors: list[str]
    sources: list[SourceEntry] = field(default_factory=list)


def versions() -> dict[str, str | int]:
    """What made the folder: twice's version and its JSON contract's."""
    from importlib.metadata import PackageNotFoundError, version

    from twice.report import CONTRACT_VERSION

    try:
        installed = version("twice")
    except PackageNotFoundError:  # run from a checkout that was never installed
        installed = "unknown"
    return {"twice": installed, "contract": CONTRACT_VERSION}


def document(manifest: Manifest, *, made_by: str, subject: str | None = None,
             since: datetime | None = None, until: datetime | None = None,
             clock_offsets: Sequence[Mapping[str, Any]] = ()) -> bytes:
    """The manifest file's bytes; the caller has redacted every text in it. `clock_offsets`:
    the analysis' offsets as the JSON contract gives them (`twice.report.offset_dicts`)."""
    doc: dict[str, Any] = {
        "twice_manifest": VERSION,
        "made_by": made_by,
        "made_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "versions": versions(),
        "subject": subject,
        "window": ({"since": since.isoformat(), "until": until.isoformat()}
                   if since is not None and until is not None else None),
        "partial": manifest.partial,
        "errors": list(manifest.errors),
        "sources": [{"name": s.name, "target": s.target, "ok": s.ok, "files": s.files,
                     "errors": s.errors} for s in manifest.sources],
        "clock_offsets": [dict(o) for o in clock_offsets],
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


def write(folder: Path, manifest: Manifest, **made: Any) -> Path:
    """Write `manifest` into `folder` (`made`: `document`'s keywords)."""
    path = folder / NAME
    path.write_bytes(document(manifest, **made))
    return path


def _texts(value: Any) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return [v[:MAX_TEXT] for v in value[:MAX_ERRORS]]


def read(folder: Path) -> tuple[Manifest | None, list[SourceWarning]]:
    """The folder's manifest (None when it has none), and warnings on what could not be read."""
    path = folder / NAME
    if not path.is_file():
        return None, []

    def refused(why: str) -> tuple[None, list[SourceWarning]]:
        return None, [SourceWarning(str(path), f"{why}; the folder's partial state is unknown")]

    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        return refused(f"cannot be read ({exc.strerror or type(exc).__name__})")
    if len(raw) > MAX_BYTES:
        return refused(f"larger than {MAX_BYTES // 2**20} MiB, not a manifest twice wrote")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return refused(f"line {exc.lineno}: not JSON")
    if not isinstance(doc, dict) or doc.get("twice_manifest") != VERSION:
        return refused(f"not a twice manifest of version {VERSION}")
    partial, errors = doc.get("partial"), _texts(doc.get("errors", []))
    if not isinstance(partial, bool) or errors is None:
        return refused("`partial` is not true/false or `errors` is not a list of texts")
    sources: list[SourceEntry] = []
    for entry in doc.get("sources") or []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            sources.append(SourceEntry(
                entry["name"][:MAX_TEXT], str(entry.get("target", ""))[:MAX_TEXT],
                entry.get("ok") is True, _texts(entry.get("files", [])) or [],
                _texts(entry.get("errors", [])) or []))
    # a folder whose sources failed is partial, whatever its `partial` says
    return Manifest(partial or bool(errors), errors, sources), []


def of_folders(paths: Sequence[str | Path]) -> tuple[list[Manifest], list[SourceWarning]]:
    """The manifests of the folders among `paths`, and the warnings on reading them."""
    manifests: list[Manifest] = []
    warnings: list[SourceWarning] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            manifest, problems = read(path)
            warnings.extend(problems)
            if manifest is not None:
                manifests.append(manifest)
    return manifests, warnings


def of_sources(targets: Sequence[str | Path]) -> tuple[list[Manifest], list[SourceWarning]]:
    """The manifests of the folders the sources were read from (a folder given whole is read
    as its files: `twice sweep` keeps the files), each folder once."""
    folders: list[Path] = []
    for target in targets:
        path = Path(target)
        try:
            folder = path if path.is_dir() else path.parent if path.is_file() else None
        except (OSError, ValueError):  # a DSN, a name the system refuses
            folder = None
        if folder is not None and folder not in folders:
            folders.append(folder)
    return of_folders(folders)
