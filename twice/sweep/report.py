"""What a sweep reports: totals per layer, a link per group, and the `--format json` document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from twice.formats import iso
from twice.store.links import ViewState, link
from twice.store.sweeps import SweepGroup, SweepRecord

SWEEP_CONTRACT_VERSION = 1


def totals(groups: Sequence[SweepGroup]) -> dict[str, Any]:
    """Money at risk and group counts, overall and per layer (for the table, JSON and page)."""
    money: dict[str, int] = {}
    by_layer: dict[str, dict[str, Any]] = {}
    for g in groups:
        layer = by_layer.setdefault(g.layer or "none", {"groups": 0, "money_at_risk": {}})
        layer["groups"] += 1
        for currency, amount in g.money_at_risk.items():
            money[currency] = money.get(currency, 0) + amount
            layer["money_at_risk"][currency] = layer["money_at_risk"].get(currency, 0) + amount
    return {"groups": len(groups), "money_at_risk": dict(sorted(money.items())),
            "by_layer": dict(sorted(by_layer.items()))}


def group_link(base_url: str, g: SweepGroup) -> str:
    """The group's verdict in the web app served at `base_url`."""
    base = base_url if urlsplit(base_url).path else base_url + "/"
    return link(base, ViewState(inv=g.investigation_id, group=g.group_id, tab="verdict"))


def document(record: SweepRecord, groups: Sequence[SweepGroup], base_url: str) -> dict[str, Any]:
    """The `--format json` document: the sweep, every group with its link, totals per layer."""
    return {
        "version": SWEEP_CONTRACT_VERSION,
        "sweep": {"id": record.id, "created_at": iso(record.created_at),
                  "finished": record.finished, "chunks_total": record.chunks_total,
                  "chunks_done": record.chunks_done, "since": record.params["since"],
                  "until": record.params["until"], "chunk_seconds": record.params["chunk_s"],
                  "overlap_seconds": record.params["overlap_s"],
                  "sources": [s[1] for s in record.params["sources"]]},
        "groups": [{"group_id": g.group_id, "layer": g.layer, "confidence": g.confidence,
                    "protected": g.protected, "money_at_risk": g.money_at_risk,
                    "customer": g.customer, "tool_name": g.tool_name, "thread_id": g.thread_id,
                    "attempts": g.attempts, "first_at": iso(g.first_at),
                    "last_at": iso(g.last_at), "investigation_id": g.investigation_id,
                    "link": group_link(base_url, g)} for g in groups],
        "totals": totals(groups),
        "warnings": record.warnings,
        "partial": partial(record),
        "errors": list(record.params.get("errors", [])),
    }


def partial(record: SweepRecord) -> bool:
    """Whether a folder swept says some of its sources failed (its manifest), or its manifest
    could not be read (a sweep stored before manifests were read: False)."""
    return bool(record.params.get("partial")) or bool(record.params.get("errors"))


def listing(sweeps: Sequence[SweepRecord]) -> list[dict[str, Any]]:
    """`twice sweep --list --format json`: one entry per stored sweep."""
    return [{"id": s.id, "created_at": iso(s.created_at), "finished": s.finished,
             "chunks_done": s.chunks_done, "chunks_total": s.chunks_total,
             "groups": s.group_count, "since": s.params["since"],
             "until": s.params["until"]} for s in sweeps]
