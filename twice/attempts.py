"""Attempts: executions of a side effect, counted where they happened.

The provider's records are the one side nobody on the team wrote, so an attempt is first of all
one request the provider received (request logs) or one request its events name. What a request
did is read from Stripe's object graph, not from each object on its own:

- One request emits several events on several objects (a confirmed PaymentIntent gives
  `payment_intent.created`, `charge.succeeded`, `payment_intent.succeeded`): they are one
  attempt, and its effect is the payment's ROOT object. The root is found by following what
  each object belongs to (a charge to its PaymentIntent, a PaymentIntent or invoice payment to
  its invoice), never further: a subscription has one payment per cycle.
- Only requests that moved money are attempts: a payment (created, declined) or a refund.
  Requests on other objects (customer and invoice edits, dashboard actions) are not.
- A second request on an existing payment (a confirm, a capture) is part of that payment.
- Events of the provider's own flows (`request.id` null: a subscription renewal) are one effect
  per flow, and an attempt only when an id the agent wrote (metadata) ties them to it.
- Events whose request is not recorded at all (some Stripe-compatible servers) are one attempt
  per payment root object: two objects are two attempts even in the same second.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd

from twice.timeline import (
    Kind,
    arrow_text,
    isin,
    positions,
    sort_by_time_and_id,
    text_objects,
    whole_numbers,
)
from twice.windows import HTTP_COLS

ATTEMPT_COLUMNS = [
    "attempt_id", "at", "request_id", "idempotency_key", "method", "path", "status",
    "object_id", "object_type", "subject", "amount", "currency", "effect", "thread_id",
    "tool_call_id", "origin", "key_recorded", "source", "initiator",
    "customer_known",  # the provider's objects say who the effect is for (null: nobody)
]

# What an event type says about money (Stripe's event types).
PAYMENT_SUCCESS = frozenset({
    "payment_intent.succeeded", "payment_intent.amount_capturable_updated", "charge.succeeded",
    "charge.captured", "invoice.paid", "invoice.payment_succeeded", "invoice_payment.paid",
})
PAYMENT_FAILURE = frozenset({
    "payment_intent.payment_failed", "charge.failed", "invoice.payment_failed",
})
PAYMENT_STARTED = frozenset({
    "payment_intent.created", "payment_intent.processing", "payment_intent.requires_action",
    "charge.pending",
})
REFUND_EVENTS = frozenset({
    "charge.refunded", "refund.created", "refund.updated", "refund.failed",
    "charge.refund.updated",
})
_PAYMENT_EVENTS = PAYMENT_SUCCESS | PAYMENT_FAILURE | PAYMENT_STARTED

# The objects one payment is made of, outermost first: the root is the outermost present.
_PAYMENT_RANK = {"invoice": 4, "payment_intent": 3, "charge": 1, "invoice_payment": 0}
_UNSEEN_RANK = 2  # an id named as a parent whose own events are not in the export

# Stripe request paths that move money (POST). Other `/v1/` paths (customers, invoice edits,
# sending or voiding an invoice, updates) are not attempts; paths of other providers all are.
_STRIPE_EFFECT_PATH = re.compile(
    r"^/v1/(payment_intents(/[^/]+/(confirm|capture))?|charges(/[^/]+/capture)?|refunds"
    r"|invoices/[^/]+/pay|subscriptions|transfers|payouts)/?$")

_FIELDS = ["at", "idempotency_key", "method", "path", "status", "object_id", "object_type",
           "subject", "amount", "currency", "thread_id", "tool_call_id", "origin", "outcome"]
_EVENT_COLUMNS = ["request_id", "event_type", "belongs_to", "initiator", "key_recorded",
                  *_FIELDS]


def _joined(series: pd.Series) -> str:
    return ",".join(sorted(set(series)))


def moves_money(path: object) -> bool:
    """Whether a POST to `path` can create an effect (see `_STRIPE_EFFECT_PATH`)."""
    if not isinstance(path, str) or not path.startswith("/v1/"):
        return True
    return bool(_STRIPE_EFFECT_PATH.match(path))


def paths_move_money(paths: pd.Series) -> np.ndarray:
    """`moves_money` of each path, judged once per distinct path (a million requests go to a
    handful of paths)."""
    codes, uniques = pd.factorize(paths)
    judged = np.array([moves_money(p) for p in uniques] + [True], dtype=bool)
    return judged[codes]  # code -1 (no path) takes the last: True, as moves_money(None)


def posts_moving_money(rows: pd.DataFrame) -> np.ndarray:
    """Rows that are POSTs (or say no method) to a path that can create an effect."""
    post = (rows["method"].fillna("POST").astype(str).str.upper() == "POST").to_numpy(dtype=bool)
    return post & paths_move_money(rows["path"])


def payment_roots(events: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(root object id, root object type) of every event's object, by event row.

    Objects joined by `belongs_to` (a charge to its PaymentIntent, a PaymentIntent or invoice
    payment to its invoice) form one payment; its root is the outermost object. Invoices do not
    join their subscription. Rows without an object have no root.

    Worked on integer codes: an id is a position in `names` (the events' objects in the order
    first seen, then the parents never seen as objects), a type a position in `types`.
    """
    from twice.grouping import components

    codes, seen = pd.factorize(events["object_id"])  # -1: a row without an object
    tcodes, types = pd.factorize(events["object_type"])
    present = codes >= 0
    n_seen = len(seen)
    # an object's type, as the last of its rows says it (-1: not said)
    obj_type = np.full(n_seen, -1, dtype=np.intp)
    obj_type[codes[present]] = tcodes[present]
    type_names = np.asarray(types, dtype=object)
    child_types = [i for i, t in enumerate(type_names)
                   if t in ("charge", "payment_intent", "invoice_payment")]
    joins = events["belongs_to"].notna().to_numpy() & np.isin(tcodes, child_types) & present
    child = codes[joins]
    named = events["belongs_to"][joins]
    parents = named.to_numpy(dtype=object)
    several = named.str.contains(",", regex=False).to_numpy(dtype=bool)
    if several.any():  # one id per pair: those naming several parents after the others
        split = [p.split(",") for p in parents[several]]
        child = np.concatenate([child[~several],
                                np.repeat(child[several], [len(p) for p in split])])
        parents = np.concatenate([parents[~several],
                                  np.array([x for p in split for x in p], dtype=object)])
    # the parents' ids as codes: one already seen keeps its code, the others come after, in
    # the order they are first named
    parent = positions(pd.Series(seen), named if not several.any() else
                       pd.Series(parents, dtype=object))
    unseen = parent < 0
    new_codes, new_names = pd.factorize(parents[unseen])
    parent[unseen] = n_seen + new_codes
    names = np.concatenate([np.asarray(seen, dtype=object), np.asarray(new_names, dtype=object)])
    # each (child, parent) pair once, as one integer (sorted, then each run's first: numpy 2's
    # `np.unique` takes ten times as long on half a million distinct integers)
    pairs = np.sort(child.astype(np.int64) * len(names) + parent)
    pairs = pairs[np.r_[True, pairs[1:] != pairs[:-1]]] if len(pairs) else pairs
    child, parent = (pairs // len(names)).astype(np.intp), (pairs % len(names)).astype(np.intp)
    subscription = [i for i, t in enumerate(type_names) if t == "subscription"]
    is_seen = parent < n_seen
    keep = ~(is_seen & np.isin(obj_type[np.where(is_seen, parent, 0)], subscription))
    labels = components(len(names), np.column_stack([child[keep], parent[keep]]))
    rank_of = np.array([_PAYMENT_RANK.get(t, -1.0) for t in type_names] + [-1.0])
    rank = np.full(len(names), float(_UNSEEN_RANK))
    rank[:n_seen] = rank_of[obj_type]  # -1 (no type) takes the last: -1.0
    # the root of each component: its member of highest rank (ties: the first seen)
    order = np.lexsort((np.arange(len(names)), -rank, labels))
    first = np.ones(len(order), dtype=bool)
    first[1:] = labels[order][1:] != labels[order][:-1]
    root_at = np.empty(len(names), dtype=np.intp)  # a component's label -> its root's code
    root_at[labels[order][first]] = order[first]
    row_root = root_at[labels[codes[present]]]
    root = np.full(len(events), None, dtype=object)
    root[present] = np.asarray(names, dtype=object)[row_root]
    # a root with no type said (a parent never seen as an object, or an object whose events
    # do not say it): typed by what named it (a charge names a PaymentIntent); code -1 takes
    # the last of these names
    said_or_named = np.array([*type_names, "payment_intent"], dtype=object)
    root_tcode = np.where(row_root < n_seen, obj_type[np.minimum(row_root, n_seen - 1)], -1)
    root_type = np.full(len(events), None, dtype=object)
    root_type[present] = said_or_named[root_tcode]
    return (pd.Series(root, index=events.index, dtype=object),
            pd.Series(root_type, index=events.index, dtype=object))


def _roles(events: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series, pd.Series]:
    """(payment, success, failure, refund) flags per event row."""
    t = events["event_type"].astype(object).where(events["event_type"].notna(), "")
    return (t.isin(list(_PAYMENT_EVENTS)), t.isin(list(PAYMENT_SUCCESS)),
            t.isin(list(PAYMENT_FAILURE)), t.isin(list(REFUND_EVENTS)))


def _effect_rows(events: pd.DataFrame, by: str) -> pd.DataFrame:
    """One row per value of `by` (a request id, or a payment root) with the effect its events
    show: the payment's root object, or the refund; requests of neither kind are left out.

    Worked on integer codes of `by` (in the order of its values, as a sort by it would give)
    and positions: a group's fields are read off its rows sorted once, with no groupby over
    text ids."""
    payment, success, failure, refund = (r.to_numpy(dtype=bool) for r in _roles(events))
    codes, values = pd.factorize(events[by], sort=True)
    n = len(values)
    has = codes >= 0
    c = np.where(has, codes, 0)
    is_payment_req = np.bincount(codes[has], weights=payment[has], minlength=n) > 0
    is_refund_req = np.bincount(codes[has], weights=refund[has], minlength=n) > 0
    rows = has & (is_payment_req | is_refund_req)[c]  # the events of requests that moved money
    if not rows.any():
        return pd.DataFrame(columns=[by, *_FIELDS, "created", "failed", "refund"])
    # the events that name the effect: payment events of a payment request (the root first,
    # then the PaymentIntent and charge), refund events of a refund (the refund object first)
    payment_req = is_payment_req[c]
    primary = np.flatnonzero(rows & ((payment & payment_req) | (refund & ~payment_req)))
    rank = -events["object_type"].map({"refund": 5, **_PAYMENT_RANK}).fillna(-1).to_numpy(
        dtype=float)
    at = events["at"].to_numpy(dtype="datetime64[ns]").view(np.int64)
    p = primary[np.lexsort((at[primary], rank[primary], codes[primary]))]
    gp = codes[p]
    starts = np.flatnonzero(np.r_[True, gp[1:] != gp[:-1]])
    groups = gp[starts]

    def first(col: pd.Series, order: np.ndarray = p) -> pd.Series:
        """Each group's first non-null value of `col` among the rows `order` lists."""
        valid = order[col.notna().to_numpy(dtype=bool)[order]]
        g = codes[valid]
        lead = np.ones(len(g), dtype=bool)
        lead[1:] = g[1:] != g[:-1]
        take = np.full(n, -1, dtype=np.intp)
        take[g[lead]] = valid[lead]
        return pd.Series(col.array.take(take[groups], allow_fill=True), dtype=col.dtype)

    is_refund = ~is_payment_req[groups]
    # a group's highest `key_recorded` (as groupby's max): its rows sorted highest first
    known = events["key_recorded"].astype("Int64")
    by_known = p[np.lexsort((-known.fillna(-1).to_numpy(dtype=np.int64)[p], gp))]
    out = pd.DataFrame({
        "_g": groups,
        "at": pd.Series(np.minimum.reduceat(at[p], starts).view("datetime64[ns]")).dt.tz_localize(
            "UTC").astype(events["at"].dtype),
        "idempotency_key": first(events["idempotency_key"]),
        "object_id": first(events["_root"]),
        "object_type": first(events["_root_type"]),
        # the customer may be named only by another event of the request (a refund's charge)
        "subject": first(events["subject"]).fillna(first(events["subject"], np.flatnonzero(rows))),
        "amount": first(events["amount"]),
        "currency": first(events["currency"]),
        "thread_id": first(events["thread_id"]),
        "tool_call_id": first(events["tool_call_id"]),
        "origin": first(events["origin"]),
        "outcome": first(events["outcome"]),
        "refund": is_refund,
        "initiator": first(events["initiator"]),
        "key_known": first(known, by_known),
    })
    succeeded = np.logical_or.reduceat(success[p], starts)
    failed = np.logical_or.reduceat(failure[p], starts)
    out.loc[is_refund, "object_type"] = "refund"
    is_refund_object = (events["object_type"] == "refund").fillna(False).to_numpy(dtype=bool)
    refund_ids = first(events["object_id"], p[is_refund_object[p]])
    refund_ids = refund_ids[is_refund].astype(object)
    out.loc[is_refund, "object_id"] = refund_ids.where(refund_ids.notna(), np.nan)
    out["created"] = succeeded | ~failed
    out["failed"] = failed & ~succeeded
    out.insert(0, by, values.take(groups).array)
    return out.drop(columns=["_g"])


def _event_requests(events: pd.DataFrame) -> pd.DataFrame:
    """One row per provider request named by events that moved money, with its effect."""
    ev = events[events["request_id"].notna()]
    if ev.empty:
        return pd.DataFrame(columns=["request_id", *_FIELDS, "created", "failed", "refund",
                                     "initiator"])
    out = _effect_rows(ev, "request_id")
    out["method"] = "POST"
    return out


def _flows(events: pd.DataFrame, claimed: pd.Series) -> pd.DataFrame:
    """Effects named by events without a request id: one attempt per payment (its root), when
    the provider did not say the request (unknown initiator), or when the provider ran the flow
    itself (automatic) and the agent's ids in its metadata tie it to a call. `claimed`: the
    objects requests already made."""
    ev = events[events["request_id"].isna() & events["_root"].notna()]
    ev = ev[~isin(ev["_root"], claimed)]
    if ev.empty:
        return pd.DataFrame(columns=ATTEMPT_COLUMNS)
    # a refund is an effect of its own, never a part of the payment it refunds
    _, _, _, refund = _roles(ev)
    ev = ev.assign(_flow=ev["_root"].where(~refund, ev["object_id"]))
    out = _effect_rows(ev, "_flow")
    if out.empty:
        return pd.DataFrame(columns=ATTEMPT_COLUMNS)
    tied = out["thread_id"].notna() | out["tool_call_id"].notna()
    out = out[out["initiator"].ne("automatic").fillna(True) | tied].copy()
    out["attempt_id"] = "obj:" + out["_flow"].astype(str)
    out["object_id"] = out["object_id"].where(out["object_id"].notna(), out["_flow"])
    out["effect"] = np.where(out["created"], "created", "failed")
    out["source"] = "stripe_events"
    out["key_recorded"] = False
    out["customer_known"] = out["object_type"].isin(["payment_intent", "charge", "invoice"])
    return out


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
    requests["_key_src"] = requests["key_recorded"].fillna(0).astype(int) == 1
    # Field by field, the first non-null value wins: let the richer logs speak first (a request
    # log carries the key, the replay flag and milliseconds; `stripe logs tail` has whole
    # seconds and no key).
    requests = requests.sort_values(["_key_src", "at"], ascending=[False, True], kind="stable")
    g = requests.groupby(["request_id", "_occ"], dropna=False, sort=False)
    out = g.agg({**{f: "first" for f in _FIELDS}, "source": _joined, "_key_src": "any"})
    return out.rename(columns={"_key_src": "key_recorded"}).reset_index()[cols]


def provider_attempts(timeline: pd.DataFrame) -> pd.DataFrame:
    """One row per provider-side execution of a side effect, oldest first."""
    # only the columns attempts are made of: a timeline has 38, and copying the rest of a
    # million rows costs more than the grouping itself
    kind = timeline["kind"]
    events = timeline.loc[kind == Kind.PROVIDER_EVENT.value, _EVENT_COLUMNS]
    if not events.empty:
        root, root_type = payment_roots(events)
        events = events.assign(_root=root, _root_type=root_type)
    logged = _logged_requests(
        timeline.loc[kind == Kind.PROVIDER_REQUEST.value,
                     ["request_id", *_FIELDS, "source", "key_recorded"]])
    by_event = _event_requests(events).assign(_occ=0, _evidenced=True)
    if logged.empty:
        # no request log: the events' requests are the requests (a merge would only add the
        # logs' own columns, empty, and cost a second for a month of events)
        merged = by_event.assign(path=None, status=None, source=None, key_recorded=None)
    else:
        merged = _merged(logged, by_event)
    evidenced = merged["_evidenced"].astype("boolean").fillna(False).astype(bool)
    for col in ("created", "failed"):
        merged[col] = merged[col].astype("boolean").fillna(False).astype(bool)
    merged["source"] = merged["source"].fillna("stripe_events")
    # whether some record of the request says which key was sent (so a null key means none)
    merged["key_recorded"] = merged["key_recorded"].astype("boolean").fillna(False) | \
        (pd.to_numeric(merged.get("key_known", pd.Series(0, index=merged.index)),
                       errors="coerce").fillna(0) == 1)
    merged["initiator"] = "api"
    # a payment object in Stripe's events always carries `customer` (null: a guest payment)
    merged["customer_known"] = evidenced & merged["object_type"].isin(
        ["payment_intent", "charge", "invoice"])
    # a request the events name moved money (they were filtered above); one they do not name
    # is judged by its path: a request to edit a customer or send an invoice is no attempt
    post = merged["method"].fillna("POST").astype(str).str.upper() == "POST"
    # events of a request that moved nothing were filtered out, so a logged request they name
    # is known not to be an attempt
    unnamed = ~evidenced
    if not events.empty and unnamed.any():
        unnamed[unnamed] = ~isin(merged.loc[unnamed, "request_id"],
                                 events["request_id"].dropna()).to_numpy()
    keep = post & (evidenced | (unnamed & paths_move_money(merged["path"])))
    if not keep.all():  # (a frame of our own either way: its columns are set below)
        merged = merged[keep].copy()
    if not merged.empty:
        occ = merged["_occ"].fillna(0).astype(int)
        merged["attempt_id"] = merged["request_id"].astype(str).where(
            occ == 0, merged["request_id"].astype(str) + "#" + (occ + 1).astype(str))
        span = (events["at"].min(), events["at"].max()) if not events.empty else None
        merged["effect"] = _effects(merged, span)
        merged = _one_per_payment(merged)

    claimed = merged["object_id"].dropna() if not merged.empty else pd.Series([], dtype=object)
    flows = _flows(events, claimed) if not events.empty else pd.DataFrame()
    parts = [d.reindex(columns=ATTEMPT_COLUMNS) for d in (merged, flows) if not d.empty]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=ATTEMPT_COLUMNS)
    out = sort_by_time_and_id(normalize(out))
    infer_replays(out)
    return out


def _merged(logged: pd.DataFrame, by_event: pd.DataFrame) -> pd.DataFrame:
    """The requests the logs name and those the events name, one row per request occurrence,
    field by field: the logs give the request's own time and status, the events the effect's
    details."""
    merged = logged.merge(by_event, on=["request_id", "_occ"], how="outer",
                          suffixes=("", "_ev"))
    for col in _FIELDS:
        if f"{col}_ev" not in merged:
            continue
        ours, theirs = merged[col], merged[f"{col}_ev"]
        if col == "at":  # kept a time column: an all-null side would make it Python objects
            ours, theirs = pd.to_datetime(ours, utc=True), pd.to_datetime(theirs, utc=True)
        elif ours.dtype != theirs.dtype:  # e.g. one side all null: an object column
            ours, theirs = ours.astype(object), theirs.astype(object)
        if col in ("at", "method", "origin", "status"):
            merged[col] = ours.where(ours.notna(), theirs)
        else:
            merged[col] = theirs.where(theirs.notna(), ours)
    return merged.drop(columns=[c for c in merged.columns if c.endswith("_ev")])


def _one_per_payment(attempts: pd.DataFrame) -> pd.DataFrame:
    """A request on a payment an earlier request made (a confirm, a capture) is part of that
    payment's attempt: the earliest request keeps it, with the best effect any of them had."""
    has_object = attempts["object_id"].notna() & attempts["object_type"].ne("refund")
    if not attempts.loc[has_object, "object_id"].duplicated().any():
        return attempts
    ordered = attempts.sort_values("at", kind="stable")
    later = has_object.loc[ordered.index] & ordered["object_id"].duplicated()
    created = set(ordered.loc[later & (ordered["effect"] == "created"), "object_id"])
    out = ordered[~later].copy()
    upgrade = isin(out["object_id"], created) & out["effect"].isin(["failed", "unknown"])
    out.loc[upgrade, "effect"] = "created"
    return out


def normalize(attempts: pd.DataFrame) -> pd.DataFrame:
    """Attempt columns with plain dtypes: text as Python objects (None for missing)."""
    out = attempts.copy(deep=False)  # copy-on-write: each column below is replaced, not edited
    for col in out.columns:
        if col == "at":
            if str(out[col].dtype) != "datetime64[ns, UTC]":
                # nanoseconds whatever the source's unit: clock offsets are fractions of seconds
                out[col] = pd.to_datetime(out[col], utc=True).dt.as_unit("ns")
        elif col in ("amount", "status"):
            out[col] = whole_numbers(out[col])  # exact for every int64, nulls beside them
        elif col in ("key_recorded", "customer_known"):
            out[col] = out[col].astype("boolean").fillna(False).astype(bool)
        elif str(out[col].dtype) in ("Int64", "bool", "datetime64[ns, UTC]"):
            continue  # counts and flags keep their types
        else:
            out[col] = _none_for_missing(out[col])
    return out


def _none_for_missing(col: pd.Series) -> pd.Series:
    """A text column as Python objects with None for every missing value (NaN, pd.NA); a
    column with no missing value is kept as it is. The missing values are found and replaced
    in C (`pd.isna`, one assignment): no Python loop over a column of Nones."""
    if col.dtype == object:
        values = col.to_numpy()
        missing = pd.isna(values)
        if not missing.any():
            return col
        values = values.copy()
        values[missing] = None
        return pd.Series(values, index=col.index, dtype=object, name=col.name)
    data = arrow_text(col)
    if data is not None:  # Arrow gives Python objects with None for null in one pass
        return pd.Series(text_objects(data), index=col.index, dtype=object,
                         name=col.name)
    return col.astype(object).where(col.notna(), None)


def _effects(df: pd.DataFrame, events_span: tuple[pd.Timestamp, pd.Timestamp] | None
             ) -> pd.Series:
    """What each request did at the provider: created | replayed | failed | unknown.

    With events loaded, a request that succeeded (2xx) at a time they cover but that no event
    names made nothing: the provider answered it from its idempotency cache (a created object
    always emits an event). Without events, a successful request is taken to have created."""
    status = pd.to_numeric(df["status"], errors="coerce")
    outcome = df["outcome"].astype("string").fillna("")
    effect = pd.Series("unknown", index=df.index, dtype=object)
    if events_span is None:
        effect[status.isna() | (status < 400)] = "created"
    else:
        at = pd.to_datetime(df["at"], utc=True)
        covered = (at >= events_span[0]) & (at <= events_span[1])
        effect[(status < 400) & covered & ~df["created"]] = "replayed"
    effect[df["created"]] = "created"
    effect[((status >= 400) & ~df["created"]) | df["failed"]] = "failed"
    effect[outcome == "replayed"] = "replayed"
    return effect


def infer_replays(attempts: pd.DataFrame) -> None:
    """A request whose key another request created an effect with, and that created nothing
    itself, was answered from the provider's idempotency cache: replayed."""
    if attempts.empty:
        return
    keyed = attempts["idempotency_key"].notna()
    unknown = keyed & (attempts["effect"] == "unknown")
    if not unknown.any():
        return
    created_keys = attempts.loc[keyed & (attempts["effect"] == "created"), "idempotency_key"]
    replay = unknown[unknown].index[isin(attempts.loc[unknown, "idempotency_key"],
                                         created_keys).to_numpy()]
    attempts.loc[replay, "effect"] = "replayed"
    # A request with the key that created again was NOT deduplicated (key expired or not
    # honoured): it stays "created".


# what an attempt counted on the agent's side already knows of its links (link() fills the
# same columns for the provider's attempts)
AGENT_LINK_COLUMNS = ["at_raw", "time_basis", "link", "worker", "http_span_id", "http_parent",
                      "tool_span_id", "trace_id", "resend_count", "proxy_attempt"]


def _filled(values: pd.Series, other: pd.Series) -> pd.Series:
    """`values` with its missing ones taken from `other`, in `values`' own dtype."""
    return values.fillna(other.astype(values.dtype))


# the timeline columns agent_attempts reads (a timeline has 38)
_AGENT_READS = ["at_aligned", "at", "tool_call_id", "thread_id", "subject", "amount", "currency",
                "worker", "request_id", "idempotency_key", "method", "path", "status",
                "span_id", "parent_span_id", "trace_id", "resend_count", "proxy_attempt"]


def agent_attempts(timeline: pd.DataFrame) -> pd.DataFrame:
    """Without provider records, count executions on the agent's side, at the lowest level the
    spans show: each HTTP client POST that can move money, under the tool span (or tool call)
    it belongs to, is one attempt on the wire (a client's retry is two); a tool span with no
    such client span under it is one attempt; and each checkpointed tool call no span covers
    is one. A client span is part of its tool's attempt, never an attempt beside it, so an
    ordinary call is one attempt. Client spans that belong to no tool (instrumented outside
    the agent's context) count only when no tool span was exported at all: beside tool spans
    they would count the same execution twice. Times are on the reference clock."""
    kind = timeline["kind"]
    tools = timeline.loc[kind == Kind.TOOL_SPAN.value, _AGENT_READS]
    http = timeline.loc[kind == Kind.HTTP_SPAN.value, _AGENT_READS]
    post = http[posts_moving_money(http)]
    tool_ids = tools["span_id"].dropna()
    parent_is_tool = isin(post["parent_span_id"], tool_ids)
    under_tool = parent_is_tool | post["tool_call_id"].notna()
    wire = post[under_tool] if len(tools) else post
    parent_tool = wire["parent_span_id"].where(
        parent_is_tool[under_tool] if len(tools) else parent_is_tool, None)
    by_tool = tools.drop_duplicates("span_id").set_index("span_id")
    wire_rows = wire.assign(
        attempt_id="http:" + wire["span_id"].astype(str), http_span_id=wire["span_id"],
        http_parent=wire["parent_span_id"],
        tool_span_id=parent_tool, source="spans", time_basis="http_span",
        link="http_span",
        # the tool span above says what was asked, where the client span does not
        subject=_filled(wire["subject"], parent_tool.map(by_tool["subject"])),
        amount=_filled(wire["amount"], parent_tool.map(by_tool["amount"])),
        currency=_filled(wire["currency"], parent_tool.map(by_tool["currency"])),
        thread_id=_filled(wire["thread_id"], parent_tool.map(by_tool["thread_id"])))
    covered = pd.concat([wire["parent_span_id"], wire["tool_call_id"]]).dropna()
    # the tools' span ids and tool call ids looked up at once (one hash table of `covered`)
    found = isin(pd.concat([tools["span_id"], tools["tool_call_id"]], ignore_index=True),
                 covered).to_numpy(dtype=bool)
    span_covered, call_covered = found[:len(tools)], found[len(tools):]
    lone = tools[~span_covered & ~(tools["tool_call_id"].notna().to_numpy() & call_covered)]
    tool_rows = lone.assign(attempt_id="span:" + lone["span_id"].astype(str),
                            tool_span_id=lone["span_id"], source="spans",
                            time_basis="tool_span", link="tool_span")
    calls = timeline.loc[kind == Kind.TOOL_CALL.value, _AGENT_READS]
    if len(calls):  # (none where spans are the only source: `spanned` not gathered)
        spanned = pd.concat([tools["tool_call_id"], wire["tool_call_id"]]).dropna()
        calls = calls[~isin(calls["tool_call_id"], spanned)]
    call_rows = calls.assign(attempt_id="call:" + calls["tool_call_id"].astype(str),
                             source="checkpoints", time_basis="checkpoint")
    cols = ["attempt_id", "at_aligned", "at", "tool_call_id", "thread_id", "subject", "amount",
            "currency", "worker", "source", "time_basis", "link", "request_id",
            "idempotency_key", "method", "path", "status", "http_span_id", "http_parent",
            "tool_span_id", "trace_id", "resend_count", "proxy_attempt"]
    with warnings.catch_warnings():
        # pandas 2.2 warns that 3 keeps the all-missing columns a kind lacks when it picks
        # dtypes; the attempts read the same under both (the fast tests run on both)
        warnings.filterwarnings("ignore", "The behavior of DataFrame concatenation",
                                FutureWarning)
        out = pd.concat([part.reindex(columns=cols)
                         for part in (wire_rows, tool_rows, call_rows) if len(part)],
                        ignore_index=True) if len(wire_rows) + len(tool_rows) + \
            len(call_rows) else pd.DataFrame(columns=cols)
    out = out.rename(columns={"at": "at_raw"}).rename(columns={"at_aligned": "at"})
    status = pd.to_numeric(out["status"], errors="coerce")
    out["effect"] = np.where(status.ge(400).fillna(False).astype(bool), "failed", "unknown")
    out["key_recorded"] = False
    out["initiator"] = "api"
    for col in ("resend_count", "proxy_attempt"):
        out[col] = whole_numbers(out[col])
    out = normalize(out.reindex(columns=[*ATTEMPT_COLUMNS, *AGENT_LINK_COLUMNS]))
    return sort_by_time_and_id(out)


def requests_named_by_spans(att: pd.DataFrame, http: pd.DataFrame, strong: pd.DataFrame,
                            provider_offset: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Provider requests known only from the client span that captured their request id (an
    idempotent replay emits no event, and events are often the only export): attempts too,
    on the span's time, answered as the span says (replayed, refused or unknown)."""
    if att.empty or http.empty or "request_id" not in http:
        return att, strong
    named = http[http["request_id"].notna() & ~isin(http["request_id"], att["request_id"])
                 & posts_moving_money(http)].drop_duplicates("request_id")
    if named.empty:
        return att, strong
    status = pd.to_numeric(named["status"], errors="coerce")
    refused = status.ge(400).fillna(False).astype(bool).to_numpy()
    replayed = (named["outcome"] == "replayed").fillna(False).astype(bool).to_numpy()
    effect = np.where(replayed, "replayed", np.where(refused, "failed", "unknown"))
    at = pd.to_datetime(named["at"], utc=True)
    extra = pd.DataFrame({
        "attempt_id": named["request_id"].to_numpy(), "request_id": named["request_id"].to_numpy(),
        "at": at.to_numpy(), "at_raw": (at + pd.to_timedelta(provider_offset, unit="s")).to_numpy(),
        "idempotency_key": named["idempotency_key"].to_numpy(), "method": "POST",
        "path": named["path"].to_numpy(), "status": status.to_numpy(), "effect": effect,
        "source": "spans", "key_recorded": False, "initiator": "api",
        "subject": named["subject"].to_numpy(), "amount": named["amount"].to_numpy(),
        "currency": named["currency"].to_numpy(), "time_basis": "http_span",
    })
    extra = normalize(extra.reindex(columns=att.columns))
    extra["at"] = pd.to_datetime(extra["at"], utc=True)
    extra.index = pd.RangeIndex(len(att), len(att) + len(extra))
    out = pd.concat([att, extra])
    matched = named.assign(link="request_id").set_index(extra.index)
    infer_replays(out)
    return out, pd.concat([strong, matched[[c for c in matched.columns if c in HTTP_COLS]
                                           + ["link"]]])
