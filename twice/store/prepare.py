"""What saving an investigation writes, computed before the transaction opens: the summary
(one row of the Incidents list), the search text, the timeline as Parquet."""

from __future__ import annotations

import dataclasses
import io
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pandas as pd

from twice.connectors.provider.timeline_file import to_bytes
from twice.engine import Analysis, Group, Options
from twice.failure import SOURCE as FAILURE_SOURCE
from twice.failure import analyze_or_keep
from twice.formats import is_missing, minor_unit_exponent
from twice.layers import LAYERS
from twice.store.analyses import SavedAnalysis, encode
from twice.store.dialect import dumps, loads
from twice.store.model import DuplicateRow, Summary, WarningLike, new_id, valid_id
from twice.timeline import COLUMN_NAMES, DTYPES, validate

_LOG = logging.getLogger("twice.store")
# Timeline columns whose values a user may paste into the search box to find an investigation.
SEARCH_COLUMNS = ("subject", "thread_id", "request_id", "tool_call_id", "object_id", "event_id",
                  "idempotency_key", "trace_id", "message_id")
# An attempt's fields a user may paste to find its duplicate (the charge id, found in the
# provider's events of the attempt's request, is added to them).
ATTEMPT_SEARCH_FIELDS = ("subject", "request_id", "object_id", "idempotency_key",
                         "tool_call_id", "thread_id", "currency")
# A search term that is an amount ("49.00", "4900", "$49"): matched as a whole amount, not as
# part of one ("900" is not "4900")
AMOUNT_TERM = re.compile(r"[$€£¥]?(\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Prepared:
    """Everything `create` writes, computed before the transaction opens."""

    summary: Summary
    duplicates: list[tuple[DuplicateRow, str]]  # each with its search text
    layers: str  # every layer found, space-delimited (" a b "), for the layer filter
    search_text: str
    parquet: bytes
    warnings: list[dict[str, Any]]  # JSON-safe
    options: dict[str, float]  # the engine options it was analysed with (Options.to_dict)
    analysis: SavedAnalysis | None = None  # kept for its page (`twice.store.analyses`)


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
    kept = list(warnings)
    saved: SavedAnalysis | None = None
    if analysis is None:
        # an analysis that fails still saves what loaded, with the failure as its warning
        analysis, failure = analyze_or_keep(timeline, options=options)
        if failure is not None:
            kept.append({"source": FAILURE_SOURCE, "detail": failure.describe()})
        else:
            saved = keepable(analysis, timeline, options)
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
    duplicates = duplicate_rows(analysis, timeline)
    first_at, last_at = incident_range(analysis, timeline)
    summary = Summary(id=inv_id, title=title, created_at=datetime.now(UTC), provider=provider,
                      groups=len(analysis.groups), worst_layer=worst_layer,
                      money_at_risk=dict(sorted(money.items())), sources=found_sources,
                      tags=clean_tags, first_at=first_at, last_at=last_at,
                      duplicates=len(duplicates),
                      refunded=sum(bool(d.refunded) for d, _ in duplicates))
    ids: set[str] = set()
    for column in SEARCH_COLUMNS:
        ids.update(timeline[column].dropna().astype(str))
    for group in analysis.groups:
        for r in group.records:
            ids.update(amount_tokens(r["amount"], r["currency"]))
    search_text = _search_text([title, *clean_tags, *sorted(ids)])
    return Prepared(summary=summary, duplicates=duplicates,
                    layers=f" {' '.join(sorted(layers))} ",
                    search_text=search_text, parquet=to_bytes(timeline),
                    warnings=loads(dumps([_warning_dict(w) for w in kept])),
                    options=options.to_dict(), analysis=saved)


def keepable(analysis: Analysis, timeline: pd.DataFrame, options: Options
             ) -> SavedAnalysis | None:
    """The analysis of `timeline` (with `options`) as the store keeps it, when its page would
    make the same: the timeline read back from the store is numbered 0, 1, 2, ..., and the
    analysis is of rows numbered as they are."""
    if not timeline.index.equals(pd.RangeIndex(len(timeline))):
        return None
    try:
        return encode(analysis, options)
    except (ValueError, TypeError) as exc:  # (pyarrow's errors writing a column are these)
        # the investigation is saved without it: its page analyses the timeline
        _LOG.warning("an analysis is not kept (%s: %r)", type(exc).__name__, str(exc))
        return None


def _search_text(tokens: Sequence[str]) -> str:
    # one token a line, a line break at both ends (whole tokens match "%\ntoken\n%"); without
    # NUL: SQLite's LIKE stops at the first one, hiding every id after it
    return ("\n" + "\n".join(tokens) + "\n").lower().replace("\x00", "")


def amount_tokens(amount: Any, currency: Any) -> list[str]:
    """How a user may write an amount: minor units ("4900"), and in the currency's unit
    ("49.00", "49" when whole)."""
    if is_missing(amount):
        return []
    minor = int(amount)
    places = minor_unit_exponent(str(currency)) if isinstance(currency, str) else 2
    tokens = [str(minor)]
    if places:
        tokens.append(f"{Decimal(minor).scaleb(-places):.{places}f}")
        if minor % 10**places == 0:
            tokens.append(str(minor // 10**places))
    return tokens


def amount_term(term: str) -> str | None:
    """The amount a search term names, as `amount_tokens` writes it ("$49.00" -> "49.00");
    None when it is not an amount."""
    match = AMOUNT_TERM.fullmatch(term.replace(",", ""))
    return match[1] if match else None


def _utc(at: Any) -> datetime | None:
    return None if is_missing(at) else pd.Timestamp(at).floor("us").to_pydatetime()


def incident_range(analysis: Analysis, timeline: pd.DataFrame
                   ) -> tuple[datetime | None, datetime | None]:
    """When the incident happened: from the first to the last attempt of its duplicate groups
    (a stray record weeks away does not stretch it); the whole timeline when it has none."""
    times = [r["at"] for g in analysis.groups for r in g.records if not is_missing(r.get("at"))]
    if not times:
        times = list(timeline["at"].dropna())
    if not times:
        return None, None
    return _utc(min(times)), _utc(max(times))


def refunded_payments(timeline: pd.DataFrame) -> set[str]:
    """The payments (every id of each: its charge, its PaymentIntent, their root) the
    provider's `charge.refunded` events name: Stripe sends one for every refund of a charge,
    full or partial, beside `refund.created` (whose refund object twice does not tie to its
    charge)."""
    from twice.attempts import payment_roots

    events = timeline[timeline["kind"] == "provider_event"]
    if events.empty:
        return set()
    root, _ = payment_roots(events)
    refunded = events["event_type"].eq("charge.refunded").fillna(False).to_numpy(dtype=bool)
    roots = set(root[refunded].dropna().astype(str))
    ids = set(events.loc[refunded, "object_id"].dropna().astype(str))
    for parents in events.loc[refunded, "belongs_to"].dropna().astype(str):
        ids.update(parents.split(","))
    # every object of a refunded payment: an attempt names its payment by its root
    joined = events.assign(_root=root)
    ids.update(joined.loc[joined["_root"].isin(roots), "object_id"].dropna().astype(str))
    return roots | ids


def duplicate_rows(analysis: Analysis, timeline: pd.DataFrame) -> list[tuple[DuplicateRow, str]]:
    """One row per duplicate, each with the search text of its two attempts: their ids, the
    tool, the customer, the amount as a user writes it, and the charges the provider's events
    of their requests name."""
    events = timeline.loc[timeline["kind"] == "provider_event", ["request_id", "object_id"]]
    events = events.dropna()
    objects = events.groupby("request_id")["object_id"].agg(lambda v: sorted(set(map(str, v))))
    refunded = refunded_payments(timeline)
    out: list[tuple[DuplicateRow, str]] = []
    for group in analysis.groups:
        by_id = {str(r["attempt_id"]): r for r in group.records}
        for d in group.duplicates:
            pair = [by_id[a] for a in (d.first, d.second) if a in by_id]
            second: Mapping[str, Any] = by_id.get(d.second, {})
            tokens = [d.first, d.second]
            if group.tool_name:  # "charge_subscription" finds that tool's duplicates
                tokens.append(str(group.tool_name))
            for r in pair:
                tokens += [str(r[f]) for f in ATTEMPT_SEARCH_FIELDS if not is_missing(r.get(f))]
                tokens += amount_tokens(r.get("amount"), r.get("currency"))
                if not is_missing(r.get("request_id")):
                    tokens += objects.get(str(r["request_id"]), [])
            row = DuplicateRow(
                dup_key=f"{group.group_id}:{d.second}", group_id=group.group_id,
                layer=d.layer.value, gap_seconds=float(d.gap_seconds), at=_utc(second.get("at")),
                customer=_customer(group, second),
                amount=None if is_missing(second.get("amount")) else int(second["amount"]),
                currency=None if is_missing(second.get("currency")) else str(second["currency"]),
                refunded=any(str(r.get("object_id")) in refunded for r in pair
                             if not is_missing(r.get("object_id"))),
                tool=group.tool_name)
            out.append((row, _search_text(list(dict.fromkeys(tokens)))))
    return out


def _customer(group: Group, attempt: Mapping[str, Any]) -> str | None:
    if isinstance(attempt.get("subject"), str):
        return str(attempt["subject"])
    subjects = [str(r["subject"]) for r in group.records if isinstance(r["subject"], str)]
    return max(set(subjects), key=subjects.count) if subjects else None


def _warning_dict(warning: Any) -> dict[str, Any]:
    # the brief says dicts; connectors hand out SourceWarning dataclasses: take both
    if dataclasses.is_dataclass(warning) and not isinstance(warning, type):
        return dataclasses.asdict(warning)
    return dict(warning)


def timeline_from_parquet(data: bytes) -> pd.DataFrame:
    frame = pd.read_parquet(io.BytesIO(data), engine="pyarrow")
    missing = [c for c in COLUMN_NAMES if c not in frame.columns]
    if missing:  # saved before these columns were added: each one empty
        frame = frame.assign(**{c: pd.Series(pd.NA, index=frame.index, dtype=DTYPES[c])
                                for c in missing})[list(COLUMN_NAMES)]
    validate(frame)
    return frame
