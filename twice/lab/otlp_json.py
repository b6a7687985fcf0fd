"""OTLP JSON written by hand, for synthetic spans (the benchmarks' generated incidents, the
spans connector's fuzz tests); the lab's agents write theirs through the OpenTelemetry SDK."""

from __future__ import annotations

from typing import Any


def attribute(key: str, value: bool | int | str | list[str]) -> dict[str, Any]:
    """One OTLP `KeyValue`: a bool, an int (as OTLP JSON writes 64-bit ints: a string), a list
    of strings, or a string."""
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, list):
        return {"key": key, "value": {"arrayValue": {"values": [{"stringValue": v}
                                                                 for v in value]}}}
    return {"key": key, "value": {"stringValue": str(value)}}
