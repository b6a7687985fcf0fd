"""The machine-readable contract of `twice analyze --format json` (version 1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from twice.engine import Analysis, Group

CONTRACT_VERSION = 1


def _str(value: object) -> str | None:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    return str(value)


def _iso(ts: pd.Timestamp) -> str:
    return ts.tz_convert("UTC").isoformat().replace("+00:00", "Z")


def attempt_dict(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {
        "attempt_id": str(row["attempt_id"]),
        "at": _iso(row["at"]),
        "at_raw": _iso(row["at_raw"]),
        "source": _str(row["source"]),
        "request_id": _str(row["request_id"]),
        "idempotency_key": _str(row["idempotency_key"]),
        "tool_call_id": _str(row["tool_call_id"]),
        "span_id": _str(row["http_span_id"]) or _str(row["tool_span_id"]),
        "effect": str(row["effect"]),
        "object_id": _str(row["object_id"]),
        "amount": None if pd.isna(row["amount"]) else int(row["amount"]),
        "currency": _str(row["currency"]),
        "subject": _str(row["subject"]),
        "worker": _str(row["worker"]),
    }


def group_dict(group: Group) -> dict[str, Any]:
    return {
        "group_id": group.group_id,
        "tool_name": group.tool_name,
        "thread_id": group.thread_id,
        "tool_call_ids": group.tool_call_ids,
        "attempts": [attempt_dict(r) for r in group.records],
        "duplicates": [{
            "first": d.first, "second": d.second, "gap_seconds": d.gap_seconds,
            "band": str(d.band), "layer": str(d.layer), "confidence": d.confidence,
            "protected": d.protected, "evidence": list(d.evidence), "fix": d.fix,
            "alternatives": [{"layer": str(a.layer), "why": a.why} for a in d.alternatives],
        } for d in group.duplicates],
        "findings": [{"code": f.code, "detail": f.detail, "fix": f.fix} for f in group.findings],
        "money_at_risk": group.money_at_risk(),
    }


def offset_dicts(analysis: Analysis) -> list[dict[str, Any]]:
    """The clock offsets the analysis applied, as the contract gives them."""
    return [{"source": o.source, "seconds": o.seconds, "pairs": o.pairs, "basis": o.basis,
             "reference": o.reference, "low": o.low, "high": o.high, "thin": o.thin}
            for o in analysis.offsets]


def to_contract(analysis: Analysis) -> dict[str, Any]:
    """The JSON document; extra keys beyond the issue's contract are additive only."""
    return {
        "version": CONTRACT_VERSION,
        "groups": [group_dict(g) for g in analysis.groups],
        "warnings": [{"source": w.source, "detail": w.detail} for w in analysis.warnings],
        "clock_offsets": offset_dicts(analysis),
    }
