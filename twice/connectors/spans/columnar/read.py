"""A span file as Arrow tables, a block of lines at a time (never the whole file in memory)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj

from twice.connectors.spans.columnar.columns import Decline
from twice.connectors.spans.columnar.schema import LINE
from twice.connectors.spans.read import open_file

BLOCK_BYTES = 16 * 2**20  # the longest line read here; an export line fits
CHUNK_BYTES = 4 * 2**20  # lines parsed together
PARSE_BLOCK = 2**20  # pyarrow's block: a run's blocks are parsed on all cores
PREFIX = b'{"resourceSpans":'  # how the exporters' lines start: only such a line is read here


def line_starts(path: str | Path, longest: int) -> tuple[list[int], list[int]]:
    """(where each line starts, the lines (0-based) to leave to the general way): those that do
    not start as the exporters' lines do, and those longer than `longest` bytes (the general way
    refuses a line of too many values: `jsonfile.check_size_of`). Decline a file the general way
    reads otherwise than as JSON lines: an empty file, a blank line (pyarrow's rows would not be
    the file's lines), a byte-order mark, a first line of another form (whether it parses
    decides how the general way reads the file), a line longer than pyarrow's block. One line
    is held at a time."""
    starts: list[int] = []
    general: list[int] = []
    at = 0
    with open_file(Path(path)) as fh:
        while line := fh.readline(BLOCK_BYTES + 1):
            if len(line) > BLOCK_BYTES:
                raise Decline("a line longer than a block")
            if not line.startswith(PREFIX) or len(line) > longest:
                if not starts or not line.strip():
                    raise Decline("a blank line, or a first line not as the exporters "
                                  "write it")
                general.append(len(starts))
            starts.append(at)
            at += len(line)
    if not starts:
        raise Decline("an empty file")
    return starts, general


def _runs(starts: list[int], size: int, chunk: int) -> Iterator[tuple[int, int, int]]:
    """(first line, past the last line, longest line's bytes) of runs of about `chunk` bytes."""
    ends = [*starts[1:], size]
    first = 0
    while first < len(starts):
        last = first + 1
        while last < len(starts) and ends[last] - starts[first] <= chunk:
            last += 1
        yield first, last, max(end - start for start, end in zip(
            starts[first:last], ends[first:last], strict=True))
        first = last


def span_tables(path: str | Path, starts: list[int], chunk: int = CHUNK_BYTES
                ) -> Iterator[tuple[int, pa.Table]]:
    """(first line, table of `schema.LINE`) for each run of whole lines of about `chunk` bytes
    (`starts`: where each line starts, from `line_starts`); Decline when pyarrow refuses a line
    (not JSON, not UTF-8, a field not in the schema, a value of another type).

    The runs are cut here, not by pyarrow's streaming reader: that one parses blocks far ahead
    of the caller (some 30 of them in flight, 0.5 GB for a 676 MiB file). A run is parsed in
    blocks of `PARSE_BLOCK` on all cores, by a thread of its own while the caller works on the
    run before it (pyarrow's parse leaves the GIL): two runs and their tables are in memory at
    a time at most, and each table's rows are known to be the run's lines."""
    with open_file(Path(path)) as fh, ThreadPoolExecutor(
            1, thread_name_prefix="twice-spans-parse") as parser:
        runs = _runs(starts, os.fstat(fh.fileno()).st_size, chunk)

        def parse(first: int, last: int, longest: int) -> tuple[int, pa.Table]:
            fh.seek(starts[first])
            run = fh.read(starts[last] - starts[first] if last < len(starts) else -1)
            try:
                table = pj.read_json(
                    pa.BufferReader(run),
                    read_options=pj.ReadOptions(block_size=max(PARSE_BLOCK, longest + 1),
                                                use_threads=True),
                    parse_options=pj.ParseOptions(explicit_schema=LINE,
                                                  unexpected_field_behavior="error"))
                table.validate(full=True)  # pyarrow's JSON reader takes bytes not UTF-8
            except pa.ArrowException as exc:
                raise Decline(f"pyarrow refuses a line: {exc}") from exc
            del run
            if table.num_rows != last - first:
                raise Decline("pyarrow's rows are not the lines")
            return first, table

        ahead: Future[tuple[int, pa.Table]] | None = None
        try:
            if (run := next(runs, None)) is not None:
                ahead = parser.submit(parse, *run)
            while ahead is not None:
                done = ahead.result()  # (raises what the parse raised, in the file's order)
                run = next(runs, None)
                ahead = parser.submit(parse, *run) if run is not None else None
                yield done
                del done
        finally:
            # the caller stopped early: a parse not started is called off, one running is
            # waited for (the pool's exit) before the file closes
            if ahead is not None:
                ahead.cancel()
