"""A span file as Arrow tables, a block of lines at a time (never the whole file in memory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj

from twice.connectors.spans.columnar.columns import Decline
from twice.connectors.spans.columnar.schema import LINE

BLOCK_BYTES = 16 * 2**20  # pyarrow reads whole lines a block at a time; an export line fits


def span_tables(path: str | Path, block_size: int = BLOCK_BYTES) -> Iterator[pa.Table]:
    """Each block of the file's lines as a table of `schema.LINE`; Decline when pyarrow refuses
    a line (not JSON, not UTF-8, a field not in the schema, a value of another type)."""
    try:
        reader = pj.open_json(
            str(path), read_options=pj.ReadOptions(block_size=block_size, use_threads=True),
            parse_options=pj.ParseOptions(explicit_schema=LINE,
                                          unexpected_field_behavior="error"))
        for batch in reader:
            batch.validate(full=True)  # pyarrow's JSON reader takes bytes that are not UTF-8
            yield pa.Table.from_batches([batch])
    except pa.ArrowException as exc:
        raise Decline(f"pyarrow refuses a line: {exc}") from exc
