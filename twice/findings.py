"""Findings beside the verdicts: what the keys, spans and tool results say about a logical call."""

from __future__ import annotations

import pandas as pd

from twice.layers import DERIVED_KEY_FIX, FIXES, Band, Layer
from twice.verdict import Context, Duplicate, Finding

SPAN_FIX = ("End tool spans on error too (handle on_tool_error / record the exception and end the "
            "span), so a failed attempt that reached the provider is visible in the traces.")


def _ids(values: pd.Series, limit: int = 4) -> str:
    items = [str(v) for v in values.dropna().unique()]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def findings_for(attempts: pd.DataFrame, duplicates: list[Duplicate], ctx: Context,
                 tolerance_s: float = 2.0) -> list[Finding]:
    """Findings for one logical call; `attempts` are its attempts, oldest first."""
    out: list[Finding] = []
    keyless = attempts[attempts["idempotency_key"].isna() & attempts["key_recorded"]]
    if len(keyless):
        out.append(Finding(
            "key_missing",
            f"{len(keyless)} of {len(attempts)} requests reached the provider without an "
            f"idempotency key ({_ids(keyless['attempt_id'])}), so it could not deduplicate them",
            "Send an Idempotency-Key on every create call and " + DERIVED_KEY_FIX + "."))

    for call, same in attempts.dropna(subset=["tool_call_id"]).groupby("tool_call_id"):
        keys = same["idempotency_key"].dropna().unique()
        if len(keys) > 1:
            out.append(Finding(
                "key_regenerated",
                f"tool call {call} reached the provider with {len(keys)} different keys "
                f"({_ids(same['idempotency_key'], 3)}): each re-execution made a new one",
                DERIVED_KEY_FIX[0].upper() + DERIVED_KEY_FIX[1:] + "."))

    derived = attempts[attempts["key_derived"].astype(bool)]
    if len(derived):
        out.append(Finding(
            "key_derived",
            f"the key on {_ids(derived['attempt_id'])} equals "
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

    replayed = attempts[attempts["effect"] == "replayed"]
    if len(replayed):
        out.append(Finding(
            "replayed",
            f"the provider answered {_ids(replayed['attempt_id'])} from its idempotency cache: "
            "no second effect",
            "None needed for these attempts; the key did its job."))

    if ctx.spans_loaded:
        missing = [a for _, a in attempts.iterrows() if not _has_tool_span(a, ctx, tolerance_s)]
        if missing:
            ids = ", ".join(str(a["attempt_id"]) for a in missing[:4])
            out.append(Finding(
                "span_missing",
                f"provider request(s) {ids} have no tool span: the traces hide an attempt "
                "(instrumentation that only ends spans on success exports nothing for a failed "
                "attempt)", SPAN_FIX))

    for call, same in attempts.dropna(subset=["tool_call_id"]).groupby("tool_call_id"):
        r = ctx.result(call)
        if r is None or r["outcome"] not in ("error", "timeout"):
            continue
        created = same[same["effect"] == "created"]
        if len(created):
            out.append(Finding(
                "failure_reported_for_unknown_outcome",
                f"tool call {call} told the model '{r['outcome']}' "
                f"(\"{str(r['detail'] or '')[:100]}\") but the provider created "
                f"{_ids(created['object_id'])}: a timed-out create has an unknown outcome",
                FIXES[Layer.MODEL_REEMISSION]))
    return out


def _has_tool_span(attempt: pd.Series, ctx: Context, tolerance_s: float) -> bool:
    if isinstance(attempt["tool_span_id"], str):
        return True
    call = attempt["tool_call_id"]
    if not isinstance(call, str) or ctx.tool_spans.empty:
        return False
    spans = ctx.tool_spans[ctx.tool_spans["tool_call_id"] == call]
    tol = pd.Timedelta(seconds=tolerance_s)
    end = spans["end"].fillna(spans["at_aligned"])  # spans are the reference clock
    inside = (spans["at_aligned"] - tol <= attempt["at"]) & (attempt["at"] <= end + tol)
    return bool(inside.any())
