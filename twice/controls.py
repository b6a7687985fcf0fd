"""Why look-alikes are not duplicates: the candidate pairs the engine dismissed, and why.

A control sample (a customer charged twice on purpose: a new request in the conversation, a
monthly renewal) gives no verdict; the investigator still needs to see that twice looked at
the two charges and what told them apart. A candidate is two attempts with the same customer,
amount and currency that are not one logical call, or two of one call where the first was
refused (nothing was made, so repeating it was right).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from twice.engine import Analysis
from twice.grouping import FAILED_OUTCOMES
from twice.timeline import Kind
from twice.verdict import fmt_gap

MAX_PAIRS = 200  # a busy day has many look-alikes: the nearest ones are shown


@dataclass(frozen=True)
class Dismissed:
    first: str  # attempt ids
    second: str
    customer: str | None
    amount: int | None
    currency: str | None
    gap_seconds: float
    why: tuple[str, ...]


def _known(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _outcomes(timeline: pd.DataFrame) -> dict[str, str]:
    results = timeline[(timeline["kind"] == Kind.TOOL_RESULT.value)
                       & timeline["tool_call_id"].notna() & timeline["outcome"].notna()]
    return dict(zip(results["tool_call_id"].astype(str), results["outcome"].astype(str),
                    strict=True))


def _reasons(a: Any, b: Any, gap: float, window_s: float, outcomes: dict[str, str]
             ) -> tuple[str, ...]:
    why = []
    if a.get("initiator") == "automatic" or b.get("initiator") == "automatic":
        why.append("the provider's own flow (a renewal or a scheduled charge): never joined "
                   "by resemblance")
    if gap > window_s:
        why.append(f"{fmt_gap(gap)} apart, beyond the {fmt_gap(window_s)} in which look-alikes "
                   "with no shared id are one call")
    ta, tb = a.get("tool_call_id"), b.get("tool_call_id")
    if _known(ta) and _known(tb) and ta != tb:
        outcome = outcomes.get(str(ta))
        told = (f"; the first call's result said '{outcome}', so asking again was a new "
                "request, not a retry" if outcome and outcome not in FAILED_OUTCOMES else "")
        why.append(f"different tool calls ({ta}, {tb}){told}")
    ha, hb = a.get("thread_id"), b.get("thread_id")
    if _known(ha) and _known(hb) and ha != hb:
        why.append("different agent threads (conversations)")
    if not why:
        why.append("no tool_call_id or idempotency key ties them, and they are not each "
                   "other's nearest look-alike in time")
    return tuple(why)


def dismissed_pairs(analysis: Analysis, window_s: float = 900.0,
                    limit: int = MAX_PAIRS) -> list[Dismissed]:
    """The candidate pairs that are not duplicates, nearest first, each with why."""
    att = analysis.attempts
    if att.empty:
        return []
    outcomes = _outcomes(analysis.timeline)
    out: list[Dismissed] = []
    # two of one call, the first refused: the repeat was right (no duplicate was judged)
    for group in analysis.groups:
        judged = {d.second for d in group.duplicates}
        for before, after in zip(group.records, group.records[1:], strict=False):
            if before["effect"] == "failed" and str(after["attempt_id"]) not in judged:
                status = before.get("status")
                said = f" (status {status})" if pd.notna(status) else ""
                out.append(_pair(before, after, (
                    f"the first was refused{said}: the provider made nothing, so repeating "
                    "it was right",)))
    # look-alikes the grouping kept apart
    keyed = att[att["subject"].notna() & att["amount"].notna() & att["currency"].notna()]
    keyed = keyed.sort_values(["subject", "amount", "currency", "at"], kind="stable")
    records = keyed.to_dict("records")
    for a, b in zip(records, records[1:], strict=False):
        if (a["subject"], a["amount"], a["currency"]) != (b["subject"], b["amount"],
                                                           b["currency"]):
            continue
        if a.get("group_id") is not None and a.get("group_id") == b.get("group_id"):
            continue  # one call: judged, or said above
        gap = (b["at"] - a["at"]).total_seconds()
        out.append(_pair(a, b, _reasons(a, b, gap, window_s, outcomes)))
    out.sort(key=lambda d: d.gap_seconds)
    return out[:limit]


def _pair(a: Any, b: Any, why: tuple[str, ...]) -> Dismissed:
    amount = b.get("amount")
    return Dismissed(
        first=str(a["attempt_id"]), second=str(b["attempt_id"]),
        customer=b.get("subject") if _known(b.get("subject")) else None,
        amount=None if amount is None or pd.isna(amount) else int(amount),
        currency=b.get("currency") if _known(b.get("currency")) else None,
        gap_seconds=float((b["at"] - a["at"]).total_seconds()), why=why)
