"""What saving an investigation writes, computed before the transaction opens: the summary
(one row of the Incidents list), the search text, the timeline as Parquet."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from twice.connectors.provider.timeline_file import to_bytes
from twice.engine import Analysis, Options, analyze
from twice.layers import LAYERS
from twice.store.dialect import dumps, loads
from twice.store.model import Summary, WarningLike, new_id, valid_id
from twice.timeline import validate

# Timeline columns whose values a user may paste into the search box to find an investigation.
SEARCH_COLUMNS = ("subject", "thread_id", "request_id", "tool_call_id", "object_id", "event_id",
                  "idempotency_key", "trace_id", "message_id")


@dataclass(frozen=True)
class Prepared:
    """Everything `create` writes, computed before the transaction opens."""

    summary: Summary
    layers: str  # every layer found, space-delimited (" a b "), for the layer filter
    search_text: str
    parquet: bytes
    warnings: list[dict[str, Any]]  # JSON-safe
    options: dict[str, float]  # the engine options it was analysed with (Options.to_dict)


def prepare(title: str, timeline: pd.DataFrame, *, provider: str, sources: Sequence[str],
            warnings: Sequence[WarningLike], tags: Sequence[str],
            inv_id: str | None, analysis: Analysis | None = None,
            options: Options | None = None) -> Prepared:
    """`analysis`, when given, was made with `options` (the defaults when None): both are
    kept, so the investigation reopens with the verdict it was saved with."""
    options = options or Options()
    if inv_id is None:
        inv_id = new_id()
    elif not valid_id(inv_id):
        raise ValueError(f"invalid investigation id {inv_id!r}: use 1-64 of A-Z a-z 0-9 _ -")
    validate(timeline)
    if analysis is None:
        analysis = analyze(timeline, options=options)
    money: dict[str, int] = {}
    worst = []
    layers: set[str] = set()
    for group in analysis.groups:
        for currency, amount in group.money_at_risk().items():
            money[currency] = money.get(currency, 0) + amount
        if group.worst_layer is not None:
            worst.append(group.worst_layer)
        layers.update(str(d.layer.value) for d in group.duplicates)
    # the worst found: the layers table's severity, as the engine's Group.worst_layer
    worst_layer = min(worst, key=lambda layer: LAYERS[layer].severity).value if worst else None
    found_sources = sorted(set(timeline["source"].dropna().astype(str)) | set(sources))
    clean_tags = list(dict.fromkeys(t.strip() for t in tags if t.strip()))
    summary = Summary(id=inv_id, title=title, created_at=datetime.now(UTC), provider=provider,
                      groups=len(analysis.groups), worst_layer=worst_layer,
                      money_at_risk=dict(sorted(money.items())), sources=found_sources,
                      tags=clean_tags)
    ids: set[str] = set()
    for column in SEARCH_COLUMNS:
        ids.update(timeline[column].dropna().astype(str))
    # without NUL: SQLite's LIKE stops at the first one, hiding every id after it
    search_text = "\n".join([title, *clean_tags, *sorted(ids)]).lower().replace("\x00", "")
    return Prepared(summary=summary, layers=f" {' '.join(sorted(layers))} ",
                    search_text=search_text, parquet=to_bytes(timeline),
                    warnings=loads(dumps([_warning_dict(w) for w in warnings])),
                    options=options.to_dict())


def _warning_dict(warning: Any) -> dict[str, Any]:
    # the brief says dicts; connectors hand out SourceWarning dataclasses: take both
    if dataclasses.is_dataclass(warning) and not isinstance(warning, type):
        return dataclasses.asdict(warning)
    return dict(warning)


def timeline_from_parquet(data: bytes) -> pd.DataFrame:
    frame = pd.read_parquet(io.BytesIO(data), engine="pyarrow")
    validate(frame)
    return frame
