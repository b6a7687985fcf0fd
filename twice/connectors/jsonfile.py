"""Reading JSON evidence files: one JSON document, or JSON lines; bad lines become warnings.

Limits, so that a huge or junk file answers quickly with bounded memory:
- only regular files are read (`require_regular_file`): a device such as /dev/zero never ends
  and a FIFO waits for a writer, so neither has a size to check up front; both are refused.
- `MAX_FILE_BYTES` (1 GiB): evidence files are read whole; a bigger file is one SourceError
  saying so (cut it to the incident's window first). Span files stream (`spans_read`), and a
  clean Stripe events export is streamed by DuckDB (`stripe_events_duckdb`): neither is capped.
- `MAX_DOCUMENT_BYTES` (256 MiB): only a file up to this size is tried as one JSON document;
  a bigger one is read as JSON lines.
- `MAX_LINE_BYTES` (256 MiB): a longer line is skipped with a warning, never parsed.
- `MAX_BAD_LEAD` (1000): a file whose first 1000 non-blank lines all fail to parse is not JSON
  lines: one SourceError, not millions of warnings.
- `MAX_NESTING` (128 levels): every JSON value a connector decodes (`loads`) is refused deeper
  than that, as JSON that does not parse is, naming its line: no evidence nests so deep, and
  code that walks a value level by level would run out of stack on it.
- `MAX_VALUES` (8 million values in one document, counted before it is parsed): parsed, each
  costs up to 60 bytes and a record to look at, so 24 MiB of `[[],[],...]` would cost as much
  memory and time as 8 GiB of real evidence (256 MiB of OTLP spans or Stripe events hold about
  8 million). Past that the document is refused, as one that does not parse is.

JSON has no NaN or Infinity, but JavaScript and Python's json module write them. Such a value is
read as null with a warning naming its line (`loads_lenient`), as any other unreadable field is
left empty: the record keeps what it has, and its connector skips it when the field was one it
cannot do without.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from twice.connectors.base import SourceError, SourceWarning

MAX_FILE_BYTES = 2**30
MAX_DOCUMENT_BYTES = 256 * 2**20
MAX_LINE_BYTES = 256 * 2**20
MAX_BAD_LEAD = 1000
MAX_NON_FINITE = 100  # NaN / Infinity read as null in one document; past this it is refused
# a JSON string (skipped whole, so a "NaN" inside one is text), or a bare NaN / Infinity token
_NON_FINITE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|(?<![\w.+-])(-?Infinity|NaN)(?![\w.])')
_BLANK = re.compile(r"\s+")
_SECOND_DOCUMENT = re.compile(r"after document|trailing", re.I)  # orjson's words for it
MAX_NESTING = 128
MAX_VALUES = 8_000_000
# what the nesting scan keeps of a JSON text: brackets, quotes and newlines (for the line)
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{},"\n')))
_STRING = re.compile(rb'"[^"]*"')
_SCAN_CHUNK = 2**24


_NOT_REGULAR = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def require_regular_file(path: str | Path) -> None:
    """SourceError when `path` exists and is neither a regular file nor a folder (a missing
    file or a folder passes: the reader says so). Checked before opening: opening a FIFO
    blocks until something writes to it."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    for test, what in _NOT_REGULAR:
        if test(mode):
            raise SourceError(str(path), f"is {what}, not a regular file: twice reads evidence "
                                         "from files (save the stream to a file first)")
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise SourceError(str(path), "is not a regular file")


def check_size(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> None:
    """SourceError when the file is not a regular file or is bigger than twice reads (a missing
    file passes: the reader says so)."""
    require_regular_file(path)
    try:
        size = Path(path).stat().st_size
    except OSError:
        return
    if size > max_bytes:
        raise SourceError(str(path), (
            f"file is {size / 2**30:.1f} GiB, more than the {max_bytes / 2**30:g} GiB twice "
            "reads: cut it to the incident's time window first"))


@contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Opening or reading `path` failing (missing, a folder, unreadable) as one SourceError."""
    try:
        yield
    except FileNotFoundError:
        raise SourceError(str(path), "file not found") from None
    except IsADirectoryError:
        raise SourceError(str(path), "is a folder, expected a file") from None
    except OSError as exc:
        raise SourceError(str(path), f"cannot read: {exc.strerror or exc}") from None


def open_bytes(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes; SourceError when it is missing, a folder, unreadable or too big."""
    p = Path(path)
    check_size(p, max_bytes)
    with reading(p):
        return p.read_bytes()


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
    bad_utf8 = False
    if len(raw) <= MAX_DOCUMENT_BYTES:
        try:
            value = loads_lenient(raw, name, warnings)
        except TooDeep as exc:  # one document, and it nests too deep: nothing to read
            raise SourceError(name, f"{exc.msg}" + (f" (line {exc.lineno})" if exc.lineno > 1
                                                    else "") + "; not read") from None
        except orjson.JSONDecodeError as exc:
            bad_utf8 = "utf-8" in str(exc).lower()
        else:
            yield name, value
            return
    if len(raw) <= MAX_DOCUMENT_BYTES and (several := concatenated(raw, name)) is not None:
        yield from several
        return
    # one document with invalid UTF-8 bytes: keep it, with the bytes replaced
    repaired = raw.decode("utf-8", errors="replace").encode() if bad_utf8 else raw
    if repaired != raw:
        try:
            value = loads(repaired)
        except orjson.JSONDecodeError:
            pass
        else:
            warnings.append(SourceWarning(name, "invalid UTF-8 bytes replaced with U+FFFD"))
            yield name, value
            return
    try:
        yield from parse_lines(name, lines(raw), warnings, bad_lead=MAX_BAD_LEAD)
    except SourceError as exc:
        if len(raw) <= MAX_DOCUMENT_BYTES:
            raise
        # most likely one document too big to read whole (a month of events in one list): say
        # so, and what can be read instead
        raise SourceError(name, f"{exc.reason}; as one JSON document it is "
                                f"{len(raw) // 2**20:,} MiB, past the "
                                f"{MAX_DOCUMENT_BYTES // 2**20} MiB read whole: export the "
                                "records as JSON lines (one record per line)") from None


def concatenated(raw: bytes, name: str) -> list[tuple[str, Any]] | None:
    """The documents of a file that is several JSON documents one after another, each over
    several lines (what `print()` of stripe-python objects and `jq` write), with the line each
    starts on; None when the file is not that: JSON lines (its first line parses alone), or
    text that is not JSON documents throughout."""
    first = raw.lstrip()[:1]
    if first not in (b"{", b"["):
        return None
    head = raw.lstrip().split(b"\n", 1)[0]
    try:
        loads(head)
        return None  # JSON lines: read a line at a time
    except orjson.JSONDecodeError:
        pass
    try:  # the same bounds as one document: values counted, nesting checked, before parsing
        check_size_of(raw)
        check_nesting(raw)
    except TooDeep:
        return None
    import json

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    decoder = json.JSONDecoder()
    out: list[tuple[str, Any]] = []
    at, line, end = 0, 1, len(text)
    while True:
        gap = _BLANK.match(text, at)
        if gap is not None:
            line += gap.group().count("\n")
            at = gap.end()
        if at >= end:
            break
        try:
            value, stop = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            return None
        out.append((f"{name}:{line}", value))
        line += text.count("\n", at, stop)
        at = stop
    return out if len(out) > 1 else None


def parse_lines(name: str, numbered: Iterable[tuple[int, bytes | None]],
                warnings: list[SourceWarning], *, max_line: int = MAX_LINE_BYTES,
                decode: Callable[[bytes], Any] | None = None,
                parsed: tuple[int, Any] | None = None,
                bad_lead: int | None = None) -> Iterator[tuple[str, Any]]:
    """(locator "path:line", value) for each non-blank line of `numbered` (`lines` gives them)
    that parses; a line too long (None) or not JSON is a warning and is skipped.

    `decode`: a faster reader tried on each line first (its None means "use orjson");
    `parsed`: a line the caller parsed already (its number, its value); `bad_lead`: that many
    lines failing before any parses mean the file is not JSON lines. Raises SourceError when no
    line parses."""
    good = bad = 0
    first_bad = ""  # where and why the first line failed, for a file where none parses
    for n, text in numbered:
        if text is None:
            bad += 1
            first_bad = first_bad or f"line {n}: longer than {max_line // 2**20} MiB"
            warnings.append(SourceWarning(
                f"{name}:{n}", f"line longer than {max_line // 2**20} MiB; skipped"))
            continue
        if not text.strip():
            continue
        if parsed is not None and n == parsed[0]:
            value, parsed = parsed[1], None
        elif decode is not None and (value := decode(text)) is not None:
            pass
        else:
            try:
                value = loads_lenient(text, name, warnings, line=n)
            except orjson.JSONDecodeError as exc:
                bad += 1
                first_bad = first_bad or f"line {n}: {_reason(exc)}"
                warnings.append(SourceWarning(f"{name}:{n}", f"not valid JSON ({exc}); skipped"))
                if bad_lead is not None and good == 0 and bad >= bad_lead:
                    raise SourceError(name, f"not JSON or JSON lines (the first {bad} lines "
                                            f"do not parse; {first_bad})") from None
                continue
        good += 1
        yield f"{name}:{n}", value
        value = None  # not held while the next line is read
    if good == 0:
        lines_ = "line" if bad == 1 else "lines"
        raise SourceError(name, f"not JSON or JSON lines ({bad} unreadable {lines_}; "
                                f"{first_bad})" if first_bad else "not JSON or JSON lines")


def _reason(exc: orjson.JSONDecodeError) -> str:
    """orjson's reason with the column it stopped at (its line is the file's line already)."""
    if isinstance(exc, TooDeep):
        return exc.msg
    return f"{exc.msg} at column {exc.colno}" if exc.colno else exc.msg


class TooDeep(orjson.JSONDecodeError):
    """A JSON value nested deeper than `MAX_NESTING`, or holding more than `MAX_VALUES`
    values: refused as JSON that does not parse is (every `except
    orjson.JSONDecodeError` treats it so); `lineno`: the line it passes the limit on."""

    def __init__(self, line: int, reason: str = f"nested deeper than {MAX_NESTING} levels"
                 ) -> None:
        ValueError.__init__(self, reason)
        self.msg, self.doc, self.pos = reason, "", 0
        self.lineno, self.colno = line, 0


def loads(raw: bytes | bytearray | memoryview | str, limit: int = MAX_NESTING) -> Any:
    """`orjson.loads(raw)` for evidence: TooDeep (an orjson.JSONDecodeError) for a value
    nested deeper than `limit` or holding more than `MAX_VALUES` values (counted before
    parsing: the parse is what would cost)."""
    check_size_of(raw)
    value = orjson.loads(raw)
    check_nesting(raw, limit)
    return value


def check_size_of(raw: bytes | bytearray | memoryview | str, limit: int = MAX_VALUES) -> None:
    """TooDeep when the JSON text `raw` holds more than `limit` values: its commas and opening
    brackets outside strings (counted only when those in all could pass the limit)."""
    if isinstance(raw, str | bytes) and len(raw) <= limit:
        return  # each value takes a character at least (a tool's arguments: no copy, no count)
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    if data.count(b",") + data.count(b"[") + data.count(b"{") <= limit:
        return
    kept = _structure(data)
    values = kept.count(b",") + kept.count(b"[") + kept.count(b"{")
    if values > limit:
        raise TooDeep(1, f"holds {values / 1e6:.1f} million values, more than the "
                         f"{limit / 1e6:g} million twice reads in one document")


def _structure(data: bytes) -> bytes:
    """The brackets, commas and newlines of a JSON text, strings taken out (escapes first)."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    return _STRING.sub(b"", data.translate(None, _NOT_STRUCTURE))


def check_nesting(raw: bytes | bytearray | memoryview | str, limit: int = MAX_NESTING) -> None:
    """TooDeep when the JSON text `raw` (one that parses) nests deeper than `limit`. Linear
    and in C: a text with fewer brackets than the limit is passed at once; otherwise strings
    are taken out (escapes first) and the brackets counted, chunk by chunk."""
    if isinstance(raw, str | bytes) and len(raw) <= limit:
        return  # too short to hold more brackets than the limit
    if isinstance(raw, str):
        if raw.count("[") + raw.count("{") <= limit:
            return
        raw = raw.encode()
    data = bytes(raw)
    if data.count(b"[") + data.count(b"{") <= limit:
        return
    kept = _structure(data)
    del data
    depth, lines_before = 0, 0
    for start in range(0, len(kept), _SCAN_CHUNK):
        chunk = np.frombuffer(kept, np.uint8, count=min(_SCAN_CHUNK, len(kept) - start),
                              offset=start)
        steps = ((chunk == ord("[")) | (chunk == ord("{"))).astype(np.int32) - (
            (chunk == ord("]")) | (chunk == ord("}")))
        levels = depth + np.cumsum(steps, dtype=np.int64)
        over = np.flatnonzero(levels > limit)
        if over.size:
            line = lines_before + int(np.count_nonzero(chunk[:over[0]] == ord("\n"))) + 1
            raise TooDeep(line)
        depth = int(levels[-1]) if levels.size else depth
        lines_before += int(np.count_nonzero(chunk == ord("\n")))


def loads_lenient(raw: bytes, name: str, warnings: list[SourceWarning], *, line: int = 1
                  ) -> Any:
    """`orjson.loads(raw)`, where a bare NaN, Infinity or -Infinity is read as null with a
    warning "name:LINE" naming where it was (`line`: the line `raw` starts on). Raises
    orjson.JSONDecodeError when `raw` is not JSON for another reason (then nothing is added to
    `warnings`)."""
    try:
        return loads(raw)
    except TooDeep as exc:
        raise TooDeep(line + exc.lineno - 1, exc.msg) from None
    except orjson.JSONDecodeError as exc:
        if (b"NaN" not in raw and b"Infinity" not in raw) or _SECOND_DOCUMENT.search(exc.msg):
            raise  # (JSON lines read whole: each line is read on its own next)
        repaired = _non_finite_as_null(raw, name, line)
        if repaired is None:
            raise
        try:
            value = loads(repaired[0])
        except TooDeep as deep:
            raise TooDeep(line + deep.lineno - 1, deep.msg) from None
        except orjson.JSONDecodeError:
            raise exc from None  # the first error: its position is in the text as given
    warnings.extend(repaired[1])
    return value


def _non_finite_as_null(raw: bytes, name: str, line: int
                        ) -> tuple[bytes, list[SourceWarning]] | None:
    found = [m for m in _NON_FINITE.finditer(raw) if m.group(1)]
    if not found or len(found) > MAX_NON_FINITE:
        return None
    parts: list[bytes] = []
    notes: list[SourceWarning] = []
    start = counted = 0
    for m in found:
        at = m.start(1)
        parts += [raw[start:at], b"null"]
        start = m.end(1)
        line += raw.count(b"\n", counted, at)
        counted = at
        column = at - raw.rfind(b"\n", 0, at)
        notes.append(SourceWarning(f"{name}:{line}", f"{m.group(1).decode()} at column {column} "
                                   "is not a JSON value (JSON has no NaN or Infinity); read as "
                                   "null"))
    parts.append(raw[start:])
    return b"".join(parts), notes


def lines(raw: bytes, max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) of every line of `raw` (with its newline); None for a line longer
    than `max_line`, which is never copied."""
    view = memoryview(raw)
    start, lineno, end = 0, 0, len(raw)
    while start < end:
        stop = raw.find(b"\n", start)
        stop = end if stop < 0 else stop + 1
        lineno += 1
        yield lineno, (bytes(view[start:stop]) if stop - start <= max_line else None)
        start = stop
