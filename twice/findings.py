"""Findings beside the verdicts: what the keys, spans and tool results say about a logical call.

As the verdict is, the findings are an ordered list of small named rules (`RULES`): each reads
the facts of one logical call (`Facts`: its attempts oldest first, its duplicates, the
agent-side evidence) and gives the findings it sees, in that order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from twice.layers import DERIVED_KEY_FIX, LAYERS, REMEDIES, Band, Layer
from twice.verdict import Attempt, Context, Duplicate

SPAN_FIX = ("End tool spans on error too (handle on_tool_error / record the exception and end the "
            "span), so a failed attempt that reached the provider is visible in the traces.")


@dataclass(frozen=True)
class Finding:
    code: str
    detail: str
    fix: str


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _ids(values: list[object], limit: int = 4) -> str:
    items = list(dict.fromkeys(str(v) for v in values if _str(v)))
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


@dataclass
class Facts:
    """One logical call: its attempts (oldest first), its duplicates, the agent-side evidence."""

    attempts: list[Attempt]
    duplicates: list[Duplicate]
    ctx: Context
    tolerance_s: float = 2.0

    @cached_property
    def by_call(self) -> dict[str, list[Attempt]]:
        """The attempts of each tool call id, in order."""
        calls: dict[str, list[Attempt]] = {}
        for a in self.attempts:
            if _str(a["tool_call_id"]):
                calls.setdefault(a["tool_call_id"], []).append(a)
        return calls


FindingRule = Callable[[Facts], Iterable[Finding]]


def key_missing(f: Facts) -> Iterable[Finding]:
    """Requests whose record says which key was sent, and it was none."""
    keyless = [a for a in f.attempts if not _str(a["idempotency_key"]) and a["key_recorded"]]
    if keyless:
        yield Finding(
            "key_missing",
            f"{len(keyless)} of {len(f.attempts)} requests reached the provider without an "
            f"idempotency key ({_ids([a['attempt_id'] for a in keyless])}), so it could not "
            "deduplicate them",
            "Send an Idempotency-Key on every create call and " + DERIVED_KEY_FIX + ".")


def key_regenerated(f: Facts) -> Iterable[Finding]:
    """One tool call that reached the provider with several keys: each execution made one."""
    for call, same in f.by_call.items():
        keys = [a["idempotency_key"] for a in same]
        distinct = {k for k in keys if _str(k)}
        if len(distinct) > 1:
            yield Finding(
                "key_regenerated",
                f"tool call {call} reached the provider with {len(distinct)} different keys "
                f"({_ids(keys, 3)}): each re-execution made a new one",
                REMEDIES["derived_key"].text)


def key_derived(f: Facts) -> Iterable[Finding]:
    """Keys equal to the derivation from thread and tool call."""
    derived = [a["attempt_id"] for a in f.attempts if a["key_derived"]]
    if derived:
        yield Finding(
            "key_derived",
            f"the key on {_ids(derived)} equals "
            "sha256(thread_id:tool_call_id)[:32]: every re-execution of the call re-derives it",
            "Nothing to change in the key. Confirm the provider replayed the repeats "
            "(Idempotent-Replayed) and that no repeat came after the key retention.")


def key_expired(f: Facts) -> Iterable[Finding]:
    """A repeat after the provider's key retention: no key protects it."""
    for d in f.duplicates:
        if d.band == Band.BEYOND_RETENTION and not d.protected:
            yield Finding(
                "key_expired",
                f"{d.second} came {d.gap_seconds / 3600:.1f} h after {d.first}, past the "
                "provider's key retention: even an identical key no longer protects it",
                "Keep a durable record of the agent's own effects (keyed by the derived key) "
                "and check it before any create that resumes after a long pause.")


def replayed(f: Facts) -> Iterable[Finding]:
    """Requests the provider answered from its idempotency cache."""
    ids = [a["attempt_id"] for a in f.attempts if a["effect"] == "replayed"]
    if ids:
        yield Finding(
            "replayed",
            f"the provider answered {_ids(ids)} from its idempotency cache: no second effect",
            "None needed for these attempts; the key did its job.")


def span_missing(f: Facts) -> Iterable[Finding]:
    """Spans were loaded, and a provider request has no tool span around it."""
    if not f.ctx.spans_loaded:
        return
    missing = [a for a in f.attempts if not _has_tool_span(a, f.ctx, f.tolerance_s)]
    if missing:
        yield Finding(
            "span_missing",
            f"provider request(s) {_ids([a['attempt_id'] for a in missing])} have no tool "
            "span: the traces hide an attempt (instrumentation that only ends spans on "
            "success exports nothing for a failed attempt)", SPAN_FIX)


def failure_reported_for_unknown_outcome(f: Facts) -> Iterable[Finding]:
    """The tool told the model 'error' or 'timeout' for a call the provider carried out."""
    for call, same in f.by_call.items():
        r = f.ctx.result(call)
        if r is None or not isinstance(r["outcome"], str) or \
                r["outcome"] not in ("error", "timeout"):  # a result with no outcome: NA
            continue
        created = [a["object_id"] for a in same if a["effect"] == "created"]
        if created:
            yield Finding(
                "failure_reported_for_unknown_outcome",
                f"tool call {call} told the model '{r['outcome']}' "
                f"(\"{str(r['detail'] or '')[:100]}\") but the provider created "
                f"{_ids(created)}: a timed-out create has an unknown outcome",
                LAYERS[Layer.MODEL_REEMISSION].fix)


RULES: tuple[FindingRule, ...] = (
    key_missing, key_regenerated, key_derived, key_expired, replayed, span_missing,
    failure_reported_for_unknown_outcome,
)


def findings_for(attempts: list[Attempt], duplicates: list[Duplicate], ctx: Context,
                 tolerance_s: float = 2.0) -> list[Finding]:
    """Findings for one logical call; `attempts` are its attempts, oldest first."""
    facts = Facts(attempts, duplicates, ctx, tolerance_s)
    return [finding for rule in RULES for finding in rule(facts)]


def _has_tool_span(attempt: Attempt, ctx: Context, tolerance_s: float) -> bool:
    if _str(attempt["tool_span_id"]):
        return True
    call = _str(attempt["tool_call_id"])
    if call is None:
        return False
    spans = ctx.spans_of(call)
    if spans.empty:
        return False
    tol = pd.Timedelta(seconds=tolerance_s)
    end = spans["end"].fillna(spans["at_aligned"])  # spans are the reference clock
    inside = (spans["at_aligned"] - tol <= attempt["at"]) & (attempt["at"] <= end + tol)
    return bool(inside.any())
