"""OTLP JSON lines read as Arrow columns instead of a Python object per span.

A first increment (issue 24): `read` turns a file in the exporters' own form into Arrow tables a
block at a time, and `columns` flattens a table's spans into one column per field twice reads.
It is not yet used by the spans connector: the interpretation (`SpanRows`) still works one
`SpanRecord` at a time, and that is two thirds of the connector's time (docs/scale.md).
"""

from __future__ import annotations

from twice.connectors.spans.columnar.columns import Decline, SpanColumns, span_columns
from twice.connectors.spans.columnar.interpret import block_rows, frame
from twice.connectors.spans.columnar.read import line_starts, span_tables

__all__ = ["Decline", "SpanColumns", "block_rows", "frame", "line_starts", "span_columns",
           "span_tables"]
