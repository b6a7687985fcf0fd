"""Stripe Event objects (`GET /v1/events`, webhook payloads) as provider_event rows.

Accepted input: the JSON of a list call (`{"object": "list", "data": [...], "has_more": ...}`),
a plain JSON array of Events, or JSON lines of Events (or of list objects).

Facts this relies on (stripe-python 16 `stripe/_event.py`, Stripe API reference):
- `request` is `{"id": "req_..." | null, "idempotency_key": ... | null}`; `request.id` is null for
  automatic events. Before API version 2017-05-25 `request` was the request id as a plain string,
  and `idempotency_key` is only populated for events from 2017-05-23 on. Fakes such as localstripe
  leave `request` out altogether. In all of these cases the key is *unknown*, not absent.
- Events carry no HTTP method or path. One request can emit events for several objects (confirming
  a PaymentIntent emits `payment_intent.*` and `charge.*` events with the same request id; creating
  a refund emits `charge.refunded`), so the path cannot be read off the object type: we leave
  `method`/`path` null rather than guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter
from pathlib import Path
from typing import Any

from twice.connectors._parsing import (
    Skip,
    ids_from_metadata,
    is_object,
    minor_units,
    short,
    text_or_none,
    unix_ns,
)
from twice.connectors.base import LoadResult, SourceError, SourceWarning, Warnings, redact
from twice.connectors.jsonfile import (
    MAX_BAD_LEAD,
    MAX_FILE_BYTES,
    check_size,
    json_documents,
    require_regular_file,
)
from twice.timeline import Kind, canonical_json, from_columns

name = "stripe_events"

_STATUS_OUTCOME = {
    "succeeded": "ok",
    "requires_capture": "ok",  # authorised: the hold on the card is already an effect
    "failed": "error",
    "canceled": "error",
    "pending": "unknown",
    "processing": "unknown",
    "requires_action": "unknown",
    "requires_confirmation": "unknown",
}
_OUTCOME_TYPES = frozenset({"charge", "payment_intent", "refund"})
_PROVIDER_EVENT = Kind.PROVIDER_EVENT.value
# the timeline columns an Event fills: every row dict `_event_row` returns has all of them
EVENT_COLUMNS = ("at", "source", "origin", "kind", "event_id", "event_type", "request_id",
           "idempotency_key", "object_id", "object_type", "subject", "amount", "currency",
           "outcome", "detail", "args", "thread_id", "tool_call_id", "belongs_to", "initiator",
           "key_recorded", "livemode")


def _object_id(value: Any) -> str | None:
    """An expandable field: an id string or an expanded object with an id."""
    if is_object(value):
        return text_or_none(value.get("id"))
    return text_or_none(value)


def _outcome(obj: Mapping[str, Any], object_type: str | None, event_type: str) -> str | None:
    if object_type not in _OUTCOME_TYPES:
        return "error" if event_type.endswith("failed") else None
    status = obj.get("status")
    if object_type == "payment_intent" and status == "requires_payment_method":
        # the state before any attempt, and the state a failed attempt returns to
        return "error" if obj.get("last_payment_error") else "unknown"
    if isinstance(status, str):
        return _STATUS_OUTCOME.get(status, "unknown")
    return None


def _detail(obj: Mapping[str, Any]) -> str | None:
    last_error = obj.get("last_payment_error")
    error_message = last_error.get("message") if is_object(last_error) else None
    for candidate in (
        obj.get("failure_message"),
        error_message,
        obj.get("failure_reason"),
        obj.get("cancellation_reason") and f"canceled: {obj.get('cancellation_reason')}",
        obj.get("description"),
    ):
        text = short(candidate) if isinstance(candidate, str) else None
        if text:
            return text
    return None


# Where an object names the payment it is part of (Stripe API reference; the fields moved in
# API version 2025-03-31.basil): a charge's PaymentIntent (and, before basil, its invoice); a
# PaymentIntent's invoice (before basil); an invoice's subscription (`subscription` before
# basil, `parent.subscription_details.subscription` from it); an invoice payment ties its
# invoice to the PaymentIntent (or charge) that paid it (basil on). A refund or a dispute
# names a charge too, but is an effect of its own, so those are not followed.
_BELONGS_TO: dict[str, tuple[tuple[str, ...], ...]] = {
    "charge": (("payment_intent",), ("invoice",)),
    "payment_intent": (("invoice",),),
    "invoice": (("subscription",), ("parent", "subscription_details", "subscription")),
    "invoice_payment": (("invoice",), ("payment", "payment_intent"), ("payment", "charge")),
}


def belongs_to(obj: Mapping[str, Any], object_type: str | None) -> str | None:
    """The ids `obj` is part of (see `_BELONGS_TO`), comma-separated, or None."""
    paths = _BELONGS_TO.get(object_type or "")
    if not paths:
        return None
    ids: list[str] = []
    for path in paths:
        value: Any = obj
        for step in path:
            value = value.get(step) if is_object(value) else None
        ref = _object_id(value)
        if ref and ref not in ids and "," not in ref:
            ids.append(ref)
    return ",".join(ids) or None


def _request(event: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(request id, idempotency key, why the key is unknown or None)."""
    if "request" not in event:
        return None, None, "no `request` field"
    req = event["request"]
    if isinstance(req, str):
        return (req.strip() or None), None, "pre-2017-05-25 string `request`"
    if is_object(req):
        return text_or_none(req.get("id")), text_or_none(req.get("idempotency_key")), None
    if req is None:
        return None, None, None
    raise Skip(f"`request` is a {type(req).__name__}, expected an object or a string")


def _event_row(
    event: Any, origin: str, warnings: list[SourceWarning]
) -> tuple[dict[str, Any], str | None]:
    """One Stripe Event -> one timeline row (all of `EVENT_COLUMNS`, `at` in ns since the epoch)
    and why the event's idempotency key is unknown (None: it is known). Raises Skip for
    records that are not usable."""
    if not is_object(event):
        raise Skip(f"expected an Event object, got {type(event).__name__}")
    if event.get("object") != "event":
        raise Skip(f"not a Stripe Event (object: {short(repr(event.get('object')), 40)})")
    event_id = text_or_none(event.get("id"))
    event_type = event.get("type")
    if not event_id or not isinstance(event_type, str):
        raise Skip("Event without `id` or `type`")
    at = unix_ns(event.get("created"))
    data = event.get("data")
    obj = data.get("object") if is_object(data) else None
    if not is_object(obj):
        raise Skip("Event without `data.object`")
    request_id, key, unknown_key = _request(event)
    object_type = text_or_none(obj.get("object"))
    object_id = text_or_none(obj.get("id"))
    subject = object_id if object_type == "customer" else _object_id(obj.get("customer"))
    amount = None
    if obj.get("amount") is not None:
        try:
            amount = minor_units(obj["amount"])
        except ValueError as exc:
            warnings.append(SourceWarning(origin, f"{exc}; amount left empty"))
    currency = text_or_none(obj.get("currency"))
    metadata = obj.get("metadata")
    if not is_object(metadata) or not metadata:
        metadata = None
    ids = ids_from_metadata(metadata)
    row = {
        "at": at,
        "source": name,
        "origin": origin,
        "kind": _PROVIDER_EVENT,
        "event_id": event_id,
        "event_type": event_type,
        "request_id": request_id,
        "idempotency_key": key,
        "object_id": object_id,
        "object_type": object_type,
        "subject": subject,
        "amount": amount,
        "currency": currency.lower() if currency else None,
        "outcome": _outcome(obj, object_type, event_type),
        "detail": _detail(obj),
        "args": None if metadata is None else canonical_json(metadata),
        "thread_id": ids.get("thread_id"),
        "tool_call_id": ids.get("tool_call_id"),
        "belongs_to": belongs_to(obj, object_type),
        # `request` present with a null id: the provider's own flow (a renewal, a payout);
        # absent or a pre-2017 string: not said
        "initiator": "api" if request_id else ("automatic" if unknown_key is None else None),
        "key_recorded": 0 if unknown_key else 1,
        "livemode": int(event["livemode"]) if isinstance(event.get("livemode"), bool) else None,
    }
    return row, unknown_key


def _events_in(locator: str, value: Any) -> Iterable[tuple[str, Any]]:
    """The Event records of one parsed JSON document (list object, array or single Event)."""
    if is_object(value) and value.get("object") == "list":
        data = value.get("data")
        items = data if isinstance(data, list) else []
        return [(f"{locator}:data[{i}]", item) for i, item in enumerate(items)]
    if isinstance(value, list):
        return [(f"{locator}[{i}]", item) for i, item in enumerate(value)]
    return [(locator, value)]


def parse_documents(documents: Iterable[tuple[str, Any]], origin: str) -> LoadResult:
    """Parsed JSON documents (locator, value) -> provider_event rows and warnings.

    Raises SourceError when nothing in the input even looks like a Stripe Event.
    """
    warnings: list[SourceWarning] = Warnings()
    rows: list[tuple[Any, ...]] = []  # in `EVENT_COLUMNS` order: a tuple is 6x smaller than a dict
    row_values = itemgetter(*EVENT_COLUMNS)
    seen: set[str] = set()
    duplicates: list[str] = []
    unknown_keys: dict[str, int] = {}
    modes: dict[bool, int] = {}
    event_like = skipped = 0
    more_pages = False
    for locator, document in documents:
        if is_object(document) and document.get("object") == "list":
            more_pages = more_pages or document.get("has_more") is True
        for where, event in _events_in(locator, document):
            if is_object(event) and event.get("object") == "event":
                event_like += 1
            try:
                row, unknown_key = _event_row(event, where, warnings)
            except Skip as exc:
                warnings.append(SourceWarning(where, f"{exc}; skipped"))
                skipped += 1
                if event_like == 0 and skipped >= MAX_BAD_LEAD:  # junk: do not read it all
                    raise SourceError(origin, "no Stripe Event objects (\"object\": \"event\") "
                                              f"in the first {skipped:,} records") from None
                continue
            if row["event_id"] in seen:
                duplicates.append(row["event_id"])
                continue
            seen.add(row["event_id"])
            if isinstance(event.get("livemode"), bool):
                modes[event["livemode"]] = modes.get(event["livemode"], 0) + 1
            if unknown_key:
                unknown_keys[unknown_key] = unknown_keys.get(unknown_key, 0) + 1
            rows.append(row_values(row))
    if event_like == 0 and warnings:
        raise SourceError(origin, "no Stripe Event objects (\"object\": \"event\") found")
    _summarise(origin, warnings, modes, duplicates, unknown_keys, more_pages, event_like)
    columns = {}
    if rows:
        columns = dict(zip(EVENT_COLUMNS, map(list, zip(*rows, strict=True)), strict=True))
    return LoadResult(source=name, rows=from_columns(columns, len(rows)), warnings=warnings)


MORE_PAGES = "list has more pages (has_more: true): events past the last one are missing"


def _summarise(
    origin: str,
    warnings: list[SourceWarning],
    modes: dict[bool, int],
    duplicates: list[str],
    unknown_keys: dict[str, int],
    more_pages: bool,
    event_like: int,
) -> None:
    """File-level warnings: each said once, however many events it concerns."""
    if event_like == 0:
        warnings.append(SourceWarning(origin, "no events in file"))
    if len(modes) == 2:
        warnings.append(SourceWarning(
            origin, f"file mixes live-mode ({modes[True]}) and test-mode ({modes[False]}) "
            "events; kept all"))
    if duplicates:
        shown = ", ".join(sorted(set(duplicates))[:5])
        warnings.append(SourceWarning(
            origin, f"{len(duplicates)} duplicate event id(s) ({shown}); kept the first of each"))
    for why, count in sorted(unknown_keys.items()):
        warnings.append(SourceWarning(
            origin, f"{count} event(s) with {why}: their idempotency key is unknown, "
            "not absent"))
    if more_pages:
        warnings.append(SourceWarning(origin, MORE_PAGES))


def parse_events(payload: Any, origin: str) -> LoadResult:
    """One parsed JSON document (list object, array or Event) -> provider_event rows."""
    return parse_documents([(origin, payload)], origin)


def load(target: str | Path, max_bytes: int = MAX_FILE_BYTES) -> LoadResult:
    """Rows of a Stripe events file. A big clean export (JSON lines, or one list) is read by
    DuckDB: no size cap. Any other file is read whole by the Python path, so one past
    `max_bytes` is one clear error, before that reader starts."""
    path = Path(target)
    origin = redact(str(path))
    require_regular_file(path)  # a FIFO or a device is refused before anything opens it
    from twice.connectors.provider import (
        stripe_events_duckdb,  # big clean JSON-lines files: DuckDB reads them
    )

    fast = stripe_events_duckdb.load(path, origin)
    if fast is not None:
        return fast
    check_size(path, max_bytes)
    warnings: list[SourceWarning] = Warnings()
    result = parse_documents(json_documents(path, warnings), origin)
    result.warnings[:0] = warnings
    return result


def sniff(path: Path, head: bytes) -> bool:
    text = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
    if not text.startswith(("{", "[")):
        return False
    compact = "".join(text[:65536].split())
    return '"object":"event"' in compact
