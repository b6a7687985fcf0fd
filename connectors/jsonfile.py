"""Reading JSON evidence files: one JSON document, or JSON lines; bad lines become warnings."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from connectors.base import SourceError, SourceWarning


def open_bytes(path: str | Path) -> bytes:
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise SourceError(str(p), "file not found") from None
    except IsADirectoryError:
        raise SourceError(str(p), "is a folder, expected a file") from None
    except OSError as exc:
        raise SourceError(str(p), f"cannot read: {exc.strerror or exc}") from None


def json_documents(
    path: str | Path, warnings: list[SourceWarning]
) -> Iterator[tuple[str, Any]]:
    """Yield (locator, parsed value) for a file holding one JSON document or JSON lines.

    A file that parses as one JSON document yields it once (locator = the path). Otherwise every
    non-blank line is parsed on its own; lines that do not parse are recorded in `warnings`.
    A file where no line parses raises SourceError.
    """
    raw = open_bytes(path)
    name = str(path)
    if not raw.strip():
        raise SourceError(name, "file is empty")
    try:
        yield name, orjson.loads(raw)
        return
    except orjson.JSONDecodeError as exc:
        bad_utf8 = "utf-8" in str(exc).lower()
    # one document with invalid UTF-8 bytes: keep it, with the bytes replaced
    repaired = raw.decode("utf-8", errors="replace").encode() if bad_utf8 else raw
    if repaired != raw:
        try:
            value = orjson.loads(repaired)
        except orjson.JSONDecodeError:
            pass
        else:
            warnings.append(SourceWarning(name, "invalid UTF-8 bytes replaced with U+FFFD"))
            yield name, value
            return
    good = 0
    bad = 0
    for lineno, line in enumerate(io.BytesIO(raw), start=1):  # lazily: no second copy
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            bad += 1
            warnings.append(SourceWarning(f"{name}:{lineno}", f"not valid JSON ({exc}); skipped"))
            continue
        good += 1
        yield f"{name}:{lineno}", value
    if good == 0:
        raise SourceError(name, f"not JSON or JSON lines ({bad} unreadable lines)")
