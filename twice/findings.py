"""Findings beside the verdicts: what the keys, spans and tool results say about a logical call."""

from __future__ import annotations

import pandas as pd

from twice.layers import DERIVED_KEY_FIX, LAYERS, REMEDIES, Band, Layer
from twice.verdict import Attempt, Context, Duplicate, Finding

SPAN_FIX = ("End tool spans on error too (handle on_tool_error / record the exception and end the "
            "span), so a failed attempt that reached the provider is visible in the traces.")


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _ids(values: list[object], limit: int = 4) -> str:
    items = list(dict.fromkeys(str(v) for v in values if _str(v)))
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def _by_call(attempts: list[Attempt]) -> dict[str, list[Attempt]]:
    calls: dict[str, list[Attempt]] = {}
    for a in attempts:
        if _str(a["tool_call_id"]):
            calls.setdefault(a["tool_call_id"], []).append(a)
    return calls


def findings_for(attempts: list[Attempt], duplicates: list[Duplicate], ctx: Context,
                 tolerance_s: float = 2.0) -> list[Finding]:
    """Findings for one logical call; `attempts` are its attempts, oldest first."""
    out: list[Finding] = []
    keyless = [a for a in attempts if not _str(a["idempotency_key"]) and a["key_recorded"]]
    if keyless:
        out.append(Finding(
            "key_missing",
            f"{len(keyless)} of {len(attempts)} requests reached the provider without an "
            f"idempotency key ({_ids([a['attempt_id'] for a in keyless])}), so it could not "
            "deduplicate them",
            "Send an Idempotency-Key on every create call and " + DERIVED_KEY_FIX + "."))

    calls = _by_call(attempts)
    for call, same in calls.items():
        keys = [a["idempotency_key"] for a in same]
        if len({k for k in keys if _str(k)}) > 1:
            out.append(Finding(
                "key_regenerated",
                f"tool call {call} reached the provider with "
                f"{len({k for k in keys if _str(k)})} different keys ({_ids(keys, 3)}): each "
                "re-execution made a new one",
                REMEDIES["derived_key"].text))

    derived = [a["attempt_id"] for a in attempts if a["key_derived"]]
    if derived:
        out.append(Finding(
            "key_derived",
            f"the key on {_ids(derived)} equals "
            "sha256(thread_id:tool_call_id)[:32]: every re-execution of the call re-derives it",
            "Nothing to change in the key. Confirm the provider replayed the repeats "
            "(Idempotent-Replayed) and that no repeat came after the key retention."))

    for d in duplicates:
        if d.band == Band.BEYOND_RETENTION and not d.protected:
            out.append(Finding(
                "key_expired",
                f"{d.second} came {d.gap_seconds / 3600:.1f} h after {d.first}, past the "
                "provider's key retention: even an identical key no longer protects it",
                "Keep a durable record of the agent's own effects (keyed by the derived key) and "
                "check it before any create that resumes after a long pause."))

    replayed = [a["attempt_id"] for a in attempts if a["effect"] == "replayed"]
    if replayed:
        out.append(Finding(
            "replayed",
            f"the provider answered {_ids(replayed)} from its idempotency cache: "
            "no second effect",
            "None needed for these attempts; the key did its job."))

    if ctx.spans_loaded:
        missing = [a for a in attempts if not _has_tool_span(a, ctx, tolerance_s)]
        if missing:
            out.append(Finding(
                "span_missing",
                f"provider request(s) {_ids([a['attempt_id'] for a in missing])} have no tool "
                "span: the traces hide an attempt (instrumentation that only ends spans on "
                "success exports nothing for a failed attempt)", SPAN_FIX))

    for call, same in calls.items():
        r = ctx.result(call)
        if r is None or r["outcome"] not in ("error", "timeout"):
            continue
        created = [a["object_id"] for a in same if a["effect"] == "created"]
        if created:
            out.append(Finding(
                "failure_reported_for_unknown_outcome",
                f"tool call {call} told the model '{r['outcome']}' "
                f"(\"{str(r['detail'] or '')[:100]}\") but the provider created "
                f"{_ids(created)}: a timed-out create has an unknown outcome",
                LAYERS[Layer.MODEL_REEMISSION].fix))
    return out


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
