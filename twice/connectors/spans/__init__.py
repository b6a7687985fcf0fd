"""The spans connector: OpenTelemetry spans as OTLP JSON (one export object, or the Collector
file exporter's one object a line) and Jaeger JSON.

`connector` is what the registry calls (`name`, `sniff`, `load`, `parse_spans`); the parts:
`read` finds the span documents in a file, `otlp` / `jaeger` / `fast` turn them into
`model.SpanRecord`s, and `interpret` decides what each span means for the timeline.
"""

from __future__ import annotations

from twice.connectors.spans.connector import load, name, parse_spans, sniff

__all__ = ["load", "name", "parse_spans", "sniff"]
