"""Attempts: executions of a side effect, counted where they happened.

The provider's records are the one side nobody on the team wrote, so an attempt is first of all
one request the provider received (request logs) or one request its events name. Events from
one request (payment_intent.created, charge.succeeded, ...) are one attempt. Events with no
request id (automatic events, or a provider that does not record it) become one attempt per
effect object.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from twice.timeline import Kind

ATTEMPT_COLUMNS = [
    "attempt_id", "at", "request_id", "idempotency_key", "method", "path", "status",
    "object_id", "object_type", "subject", "amount", "currency", "effect", "thread_id",
    "tool_call_id", "origin", "key_recorded", "source",
]

# Event types that mean "this request created an effect".
_CREATED_SUFFIXES = (".created", ".succeeded", ".refunded", ".captured")
# When one request produced events on several objects, the effect is named after the first of
# these types present (a confirmed PaymentIntent is one payment, not a PI plus a charge).
_PRIMARY_OBJECTS = ["payment_intent", "charge", "refund", "invoice", "subscription"]
# Sources whose records carry the idempotency key when one was sent (a null there means "none").
_KEY_SOURCES = {"stripe_events", "request_log"}


def _joined(series: pd.Series) -> str:
    return ",".join(sorted(set(series)))


def _event_requests(events: pd.DataFrame) -> pd.DataFrame:
    """One row per provider request named by events, with its primary effect object."""
    ev = events[events["request_id"].notna()].copy()
    if ev.empty:
        return pd.DataFrame(columns=["request_id", *_FIELDS, "created"])
    rank = {t: i for i, t in enumerate(_PRIMARY_OBJECTS)}
    ev["_rank"] = ev["object_type"].map(rank).fillna(len(rank)).astype(int)
    ev["_created"] = ev["event_type"].fillna("").str.endswith(_CREATED_SUFFIXES)
    # each request's events, primary object first, then oldest: sorted as integers (the request
    # ids' codes), several times faster than sorting the id strings; the order of the requests
    # themselves does not matter (attempts are sorted by time at the end)
    codes, _ = pd.factorize(ev["request_id"])
    at = ev["at"].to_numpy(dtype="datetime64[ns]") if ev["at"].dt.tz is None \
        else ev["at"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    ev = ev.take(np.lexsort((at, ev["_rank"].to_numpy(), codes)))
    g = ev.groupby("request_id", sort=False)
    out = g.agg(
        at=("at", "min"),
        idempotency_key=("idempotency_key", "first"),
        object_id=("object_id", "first"),
        object_type=("object_type", "first"),
        subject=("subject", "first"),
        amount=("amount", "first"),
        currency=("currency", "first"),
        thread_id=("thread_id", "first"),
        tool_call_id=("tool_call_id", "first"),
        origin=("origin", "first"),
        created=("_created", "any"),
        outcome=("outcome", "first"),
    ).reset_index()
    out["method"] = "POST"
    return out.reindex(columns=["request_id", *_FIELDS, "created"])


def _automatic_attempts(events: pd.DataFrame) -> pd.DataFrame:
    """Effects named by events without a request id: one attempt per effect object."""
    ev = events[events["request_id"].isna() & events["object_id"].notna()]
    ev = ev[ev["event_type"].fillna("").str.endswith(_CREATED_SUFFIXES)]
    if ev.empty:
        return pd.DataFrame(columns=ATTEMPT_COLUMNS)
    g = ev.sort_values("at").groupby("object_id", sort=False)
    out = g.agg(
        at=("at", "min"), object_type=("object_type", "first"), subject=("subject", "first"),
        amount=("amount", "first"), currency=("currency", "first"),
        thread_id=("thread_id", "first"), tool_call_id=("tool_call_id", "first"),
        origin=("origin", "first"),
    ).reset_index()
    # A PaymentIntent and its charge are one payment: keep the PaymentIntent.
    out = out.sort_values("object_type", key=lambda s: s.map(
        {t: i for i, t in enumerate(_PRIMARY_OBJECTS)}).fillna(99))
    out = out.drop_duplicates(["at", "subject", "amount", "currency"], keep="first")
    out["attempt_id"] = "obj:" + out["object_id"].astype(str)
    out["effect"] = "created"
    out["source"] = "stripe_events"
    out["key_recorded"] = False
    return out


_FIELDS = ["at", "idempotency_key", "method", "path", "status", "object_id", "object_type",
           "subject", "amount", "currency", "thread_id", "tool_call_id", "origin", "outcome"]
_EVENT_COLUMNS = ["request_id", "event_type", *_FIELDS]


def _logged_requests(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per request occurrence named by request logs, fields merged across logs.

    Several logs may name the same request (`stripe logs tail` and a request-log export): they
    are merged field by field. A replay that reuses the original request id is a second
    occurrence, and so a separate attempt.
    """
    cols = ["request_id", "_occ", *_FIELDS, "source", "key_recorded"]
    if requests.empty:
        return pd.DataFrame(columns=cols)
    requests = requests.sort_values("at", kind="stable").copy()
    requests["_occ"] = requests.groupby(["request_id", "source"], dropna=False).cumcount()
    requests["_key_src"] = requests["source"].isin(_KEY_SOURCES)
    # Field by field, the first non-null value wins: let the richer logs speak first (a request
    # log carries the key, the replay flag and milliseconds; `stripe logs tail` has whole
    # seconds and no key).
    requests = requests.sort_values(["_key_src", "at"], ascending=[False, True], kind="stable")
    g = requests.groupby(["request_id", "_occ"], dropna=False, sort=False)
    out = g.agg({**{f: "first" for f in _FIELDS}, "source": _joined, "_key_src": "any"})
    return out.rename(columns={"_key_src": "key_recorded"}).reset_index()[cols]


def provider_attempts(timeline: pd.DataFrame) -> pd.DataFrame:
    """One row per provider-side execution of a side-effecting (POST) request, oldest first."""
    # only the columns attempts are made of: a timeline has 36, and copying the rest of a
    # million rows costs more than the grouping itself
    kind = timeline["kind"]
    events = timeline.loc[kind == Kind.PROVIDER_EVENT.value, _EVENT_COLUMNS]
    logged = _logged_requests(
        timeline.loc[kind == Kind.PROVIDER_REQUEST.value, ["request_id", *_FIELDS, "source"]])
    by_event = _event_requests(events).assign(_occ=0)
    merged = logged.merge(by_event, on=["request_id", "_occ"], how="outer",
                          suffixes=("", "_ev"))
    for col in _FIELDS:
        if f"{col}_ev" not in merged:
            continue
        # Request logs give the request's own time and status; events the effect's details.
        ours, theirs = merged[col], merged[f"{col}_ev"]
        if ours.dtype != theirs.dtype:  # e.g. no request logs: an all-null object column
            ours, theirs = ours.astype(object), theirs.astype(object)
        if col in ("at", "method", "origin", "status"):
            merged[col] = ours.where(ours.notna(), theirs)
        else:
            merged[col] = theirs.where(theirs.notna(), ours)
    has_events = merged["created"].notna() if "created" in merged else False
    merged["created"] = merged.get("created", pd.Series(False, index=merged.index))
    merged["created"] = merged["created"].astype("boolean").fillna(False).astype(bool)
    merged["source"] = merged["source"].fillna("stripe_events")
    merged["key_recorded"] = merged["key_recorded"].astype("boolean").fillna(False) | has_events
    merged = merged[merged["method"].fillna("POST").astype(str).str.upper() == "POST"].copy()
    if not merged.empty:
        occ = merged["_occ"].fillna(0).astype(int)
        merged["attempt_id"] = merged["request_id"].astype(str).where(
            occ == 0, merged["request_id"].astype(str) + "#" + (occ + 1).astype(str))
        merged["effect"] = _effects(merged, events_loaded=not events.empty)

    automatic = _automatic_attempts(events)
    if not automatic.empty and not merged.empty:
        automatic = automatic[~automatic["object_id"].isin(merged["object_id"].dropna())]
    parts = [d.reindex(columns=ATTEMPT_COLUMNS) for d in (merged, automatic) if not d.empty]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=ATTEMPT_COLUMNS)
    out = normalize(out).sort_values(["at", "attempt_id"], kind="stable", ignore_index=True)
    _infer_replays(out)
    return out


def normalize(attempts: pd.DataFrame) -> pd.DataFrame:
    """Attempt columns with plain dtypes: text as Python objects (None for missing)."""
    out = attempts.copy(deep=False)  # copy-on-write: each column below is replaced, not edited
    for col in out.columns:
        if col == "at":
            if str(out[col].dtype) != "datetime64[ns, UTC]":
                out[col] = pd.to_datetime(out[col], utc=True)
        elif col in ("amount", "status"):
            out[col] = pd.to_numeric(out[col], errors="coerce").astype("Int64")
        elif col == "key_recorded":
            out[col] = out[col].astype("boolean").fillna(False).astype(bool)
        else:
            out[col] = out[col].astype(object).where(out[col].notna(), None)
    return out


def _effects(df: pd.DataFrame, events_loaded: bool) -> pd.Series:
    """What each request did at the provider: created | replayed | failed | unknown."""
    status = pd.to_numeric(df["status"], errors="coerce")
    outcome = df["outcome"].astype("string").fillna("")
    effect = pd.Series("unknown", index=df.index, dtype=object)
    effect[status.isna() | (status < 400)] = "created" if not events_loaded else "unknown"
    effect[df["created"]] = "created"
    effect[(status >= 400) & ~df["created"]] = "failed"
    effect[outcome == "replayed"] = "replayed"
    return effect


def _infer_replays(attempts: pd.DataFrame) -> None:
    """A request whose key another request created an effect with, and that created nothing
    itself, was answered from the provider's idempotency cache: replayed."""
    if attempts.empty:
        return
    keyed = attempts["idempotency_key"].notna()
    created_keys = set(attempts.loc[keyed & (attempts["effect"] == "created"),
                                    "idempotency_key"])
    replay = keyed & (attempts["effect"] == "unknown") & \
        attempts["idempotency_key"].isin(list(created_keys))
    attempts.loc[replay, "effect"] = "replayed"
    # A request with the key that created again was NOT deduplicated (key expired or not
    # honoured): it stays "created".
