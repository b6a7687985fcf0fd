"""Reading a span file as a stream of JSON documents, a line at a time.

Span exports are the biggest evidence files (the Collector's file exporter appends one OTLP
object a line, for days), so a file of JSON lines is never read whole: one line is in memory at
a time. Only a file whose first line is not a JSON document on its own (a pretty-printed Jaeger
download or OTLP export) is read whole, as `twice.connectors.jsonfile.json_documents` reads any
evidence file, and only up to `MAX_DOCUMENT_BYTES`; past that it is read as JSON lines.
A line longer than `MAX_LINE_BYTES` is skipped with a warning, without being held in memory.
What this yields is what `json_documents` yields for the same file: the same documents,
locators and warnings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from twice.connectors.base import SourceError, SourceWarning
from twice.connectors.jsonfile import (
    json_documents,
    loads,
    parse_lines,
    reading,
    require_regular_file,
)

MAX_LINE_BYTES = 256 * 2**20  # one OTLP export line of ~300k spans
MAX_DOCUMENT_BYTES = 256 * 2**20
_CHUNK = 2**20


def open_file(path: Path) -> IO[bytes]:
    require_regular_file(path)  # a FIFO would block here, /dev/zero stream forever
    with reading(path):
        return path.open("rb", buffering=_CHUNK)  # export lines are long: fewer, bigger reads


def _lines(fh: IO[bytes], max_line: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) of every line; None for a line longer than `max_line`, which is
    read past in chunks and never held whole."""
    lineno = 0
    while True:
        line = fh.readline(max_line + 1)
        if not line:
            return
        lineno += 1
        if len(line) > max_line and not line.endswith(b"\n"):
            while (rest := fh.readline(_CHUNK)) and not rest.endswith(b"\n"):
                pass
            yield lineno, None
            continue
        yield lineno, line


def span_documents(
    path: str | Path, warnings: list[SourceWarning], *,
    max_line: int = MAX_LINE_BYTES, max_document: int = MAX_DOCUMENT_BYTES,
    decode: Callable[[bytes], Any] | None = None,
) -> Iterator[tuple[str, Any]]:
    """Yield (locator, parsed value) for a file holding one JSON document or JSON lines.

    As `json_documents`: a file that is one JSON document yields it once (locator = the path);
    otherwise each non-blank line that parses is yielded with locator "path:line", and each
    that does not is a warning; a file that is empty, or where no line parses, is SourceError.
    `decode`: a faster reader tried on each line first; its None means "use orjson".
    """
    p = Path(path)
    name = str(path)
    fh = open_file(p)
    with fh:
        lines = _lines(fh, max_line)
        first = next(((n, line) for n, line in lines if line is None or line.strip()), None)
        if first is None:
            raise SourceError(name, "file is empty")
        lineno, line = first
        doc: Any = None
        try:
            if line is not None and decode is not None:
                doc = decode(line)
            if doc is None and line is not None:
                doc = loads(line)
            first_parses = line is not None
        except orjson.JSONDecodeError:
            first_parses = False
        if not first_parses:
            size = p.stat().st_size
            if size <= max_document:  # perhaps one multi-line document: read as every file is
                fh.close()
                yield from json_documents(p, warnings)
                return
        following = next(((n, text) for n, text in lines if text is None or text.strip()),
                         None)
        if first_parses and following is None:
            yield name, doc  # the whole file is this one document
            return
        pending = [(lineno, line)] + ([following] if following is not None else [])
        first = following = line = None  # held by `pending` until used, and no longer
        known, doc = ((lineno, doc) if first_parses else None), None
        yield from parse_lines(name, _chain(pending, lines), warnings, max_line=max_line,
                               decode=decode, parsed=known)


def _chain(
    first: list[tuple[int, bytes | None]], rest: Iterator[tuple[int, bytes | None]]
) -> Iterator[tuple[int, bytes | None]]:
    while first:
        yield first.pop(0)  # popped: the first line's bytes are not kept once used
    yield from rest
