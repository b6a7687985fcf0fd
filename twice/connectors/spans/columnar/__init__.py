"""OTLP JSON lines read and interpreted as Arrow columns instead of a Python object per span.

Issue 24: `read` finds the file's lines and parses runs of them with pyarrow, `columns` flattens
a run's spans into a column per field twice reads (attributes pivoted a key at a time, on
demand), and `interpret` gives the rows `SpanRows` would give, by masks and coalesces over
those columns. `twice.connectors.spans.connector` tries this way first on every span file; a
line it cannot read exactly goes the per-span way in place, and a file it cannot read at all is
declined (`Decline`) and read the per-span way, so the rows and warnings are the same either way.
"""

from __future__ import annotations

from twice.connectors.spans.columnar.columns import Decline, SpanColumns, span_columns
from twice.connectors.spans.columnar.interpret import block_rows, frame
from twice.connectors.spans.columnar.read import line_starts, span_tables

__all__ = ["Decline", "SpanColumns", "block_rows", "frame", "line_starts", "span_columns",
           "span_tables"]
