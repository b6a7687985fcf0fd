"""The live Stripe connector: the Events of one customer, payment intent or charge, over the API.

`fetch_events` pages `GET /v1/events` (newest first) through the official SDK's raw requests
(`StripeClient.raw_request`: its errors, headers and key handling, but the page's JSON as sent:
an SDK object per event made the same fetch 2.6x slower, benchmarks/stripe_fetch_bench.py) for
a time window
and keeps the Events whose `data.object` concerns the subject; `load` turns them into the same
provider_event rows as `twice.connectors.provider.stripe_events` (save `events_document(...)` as
events.json and re-analysing it gives identical rows).

Facts this relies on (stripe-python 16 `stripe/_event_service.py`, `_list_object.py`,
`params/_event_list_params.py`, `_error.py`; Stripe API reference):
- `types[]` takes at most 20 *exact* event names; only `type` (one value) takes a `*` wildcard.
  A one-element `types` with a wildcard is therefore sent as `type`.
- `GET /v1/events` only goes back 30 days: an older window silently lists nothing.
- Stripe-compatible servers may refuse `types[]` (localstripe answers 400 "Unexpected types"):
  then the events of every type are listed and the asked-for types are kept here, with a
  warning saying so. One may refuse the `created` filter too (localstripe 1.15.5 and older:
  400 "Unexpected created, types"): then every event it holds is listed and the window is kept
  here, and since such a server need not list newest first (localstripe lists oldest first),
  every page is read rather than stopping at the first event older than the window.
- Errors carry the response headers (`exc.headers`, case-insensitive), so `Retry-After` is read
  from there. The 401/403 messages echo the API key masked (`sk_test_****1234`): every message
  goes through `redact` (twice.connectors.redaction) before it is shown.
- The SDK's own retries are off (`max_network_retries=0`): a 429 is retried here, per page, with
  the injected `sleep`; pagination is done page by page (what `auto_paging_iter` does: the next
  page is `starting_after` the last id) so that one page can be retried and what was already
  read survives an error.
- The SDK's HTTP goes through `BoundedHttp` (twice.connectors.live.http): no redirect to another
  host (`TWICE_STRIPE_BASE_URL` may name a proxy the form user does not control, and the answer
  of wherever a 302 points must not reach the page), time limits on connecting, each read and
  the whole request, and a size cap on each page. What the API answers is quoted at most as a
  short redacted excerpt.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import orjson
import stripe
from stripe._base_address import BaseAddresses

from twice.connectors.base import LoadResult, SourceError, SourceWarning, redact
from twice.connectors.jsonfile import TooDeep, check_nesting, check_size_of, loads
from twice.connectors.live.http import HttpRefused, Limits, excerpt, fetch
from twice.connectors.provider import stripe_events
from twice.formats import iso

name = "stripe_api"
SOURCE = "stripe api"
PAGE_SIZE = 100  # the API's maximum
MAX_TYPES = 20  # the API's maximum for `types[]`
EVENT_RETENTION = timedelta(days=30)
MAX_BACKOFF = 30.0  # seconds; also caps a server's Retry-After

# The events of effects (money moving, and the intents that move it): what a duplicate
# investigation counts. Exact names because `types[]` takes no wildcards; 20 is the API's limit.
DEFAULT_TYPES: tuple[str, ...] = (
    "charge.succeeded",
    "charge.failed",
    "charge.pending",
    "charge.captured",
    "charge.expired",
    "charge.refunded",
    "charge.refund.updated",
    "charge.dispute.created",
    "payment_intent.created",
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.processing",
    "payment_intent.requires_action",
    "payment_intent.amount_capturable_updated",
    "refund.created",
    "refund.updated",
    "refund.failed",
    "invoice.paid",
    "invoice.payment_failed",
)

_KINDS = {"cus_": "customer", "pi_": "payment_intent", "ch_": "charge"}
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^\"')\]]+)")
# a page of 100 events is a few hundred KiB; the SDK's own timeout is 80 s
LIMITS = Limits(connect_s=10.0, read_s=30.0, total_s=90.0, max_bytes=16 * 2**20)


class BoundedHttp(stripe.HTTPClient):
    """The SDK's HTTP client, made of `fetch` (bounded: see the module's docstring)."""

    name = "twice-bounded"

    def __init__(self, limits: Limits = LIMITS) -> None:
        super().__init__()
        self.limits = limits

    def request(self, method: str, url: str, headers: Mapping[str, str] | None,
                post_data: Any = None, *, _usage: list[str] | None = None
                ) -> tuple[Any, int, Mapping[str, str]]:
        try:
            answer = fetch(method, url, headers=headers, content=post_data, limits=self.limits)
            # the SDK turns the answer into objects level by level: a deep one must not reach it
            check_size_of(answer.content)
            check_nesting(answer.content)
        except HttpRefused as exc:
            raise stripe.APIConnectionError(str(exc)) from exc
        except TooDeep as exc:
            refused = HttpRefused(f"the answer {exc.msg}")
            raise stripe.APIConnectionError(str(refused)) from refused
        return answer.content, answer.status, answer.headers

    def request_stream(self, method: str, url: str, headers: Mapping[str, str] | None,
                       post_data: Any = None, *, _usage: list[str] | None = None
                       ) -> tuple[Any, int, Mapping[str, str]]:
        raise NotImplementedError("twice reads no streamed answers from Stripe")

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Subject:
    """What the on-call engineer knows: a customer, payment intent or charge id."""

    id: str

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError("subject id is empty: expected cus_..., pi_... or ch_...")
        if self.id.startswith("pi_") and "_secret_" in self.id:
            raise ValueError("that is a PaymentIntent client secret, not an id: pass pi_... only")
        if not any(self.id.startswith(p) and len(self.id) > len(p) for p in _KINDS):
            raise ValueError(
                f"cannot tell what {redact(self.id[:40])!r} is: expected a customer (cus_...), "
                "payment intent (pi_...) or charge (ch_...) id"
            )

    @property
    def kind(self) -> str:
        return next(kind for prefix, kind in _KINDS.items() if self.id.startswith(prefix))


def _ref(value: Any) -> str | None:
    """An expandable field: an id string, or an expanded object with an id."""
    if isinstance(value, Mapping):
        value = value.get("id")
    return value if isinstance(value, str) and value else None


def concerns(obj: Mapping[str, Any], subject: Subject) -> bool:
    """Does an Event's `data.object` concern the subject?"""
    if not isinstance(obj, Mapping):
        return False
    sid = subject.id
    if subject.kind == "customer":
        return (obj.get("object") == "customer" and obj.get("id") == sid) or _ref(
            obj.get("customer")
        ) == sid
    if subject.kind == "payment_intent":
        return obj.get("id") == sid or _ref(obj.get("payment_intent")) == sid
    return sid in (obj.get("id"), _ref(obj.get("charge")), _ref(obj.get("latest_charge")))


@dataclass
class Fetched:
    events: list[dict[str, Any]]  # raw Events that concern the subject, newest first
    scanned: int  # events read from the API in the window
    pages: int
    partial: bool  # stopped early on an error: `events` is what was read before it
    warnings: list[SourceWarning] = field(default_factory=list)


def _header(exc: stripe.StripeError, header: str) -> str | None:
    headers = exc.headers or {}
    wanted = header.lower()
    return next((str(v) for k, v in headers.items() if k.lower() == wanted), None)


def _reason(exc: stripe.StripeError, secrets: tuple[str, ...] = ()) -> str:
    """One clear line for the user; never the API key (Stripe echoes it masked), and of what
    the server said only a short excerpt."""
    status = exc.http_status
    message = excerpt(exc.user_message or "", secrets)
    if isinstance(exc, stripe.AuthenticationError):
        reason = "the API key was rejected (401): it is wrong, revoked or of another account"
    elif isinstance(exc, stripe.PermissionError):
        reason = ("the API key may not list events (403): a restricted key needs read access "
                  "to Events")
    elif isinstance(exc, stripe.RateLimitError):
        reason = "rate limited (429) and still limited after retrying"
    elif isinstance(exc, stripe.APIConnectionError) and isinstance(exc.__cause__, HttpRefused):
        reason = f"no answer from the Stripe API: {exc.__cause__}".replace(
            "no answer from the Stripe API: cannot reach it", "cannot reach the Stripe API")
    elif isinstance(exc, stripe.APIConnectionError):
        cause = _ERRNO.search(exc.user_message or "")
        detail = cause.group(1).strip() if cause else "network error"
        reason = f"cannot reach the Stripe API: {redact(detail).lower()}"
    elif status is not None and status >= 500:
        reason = f"the Stripe API failed ({status}): {message or 'server error'}"
    elif status is not None:
        reason = f"the Stripe API refused the request ({status}): {message}"
    else:
        reason = f"{type(exc).__name__}: {message}"
    request_id = exc.request_id
    return f"{reason} (request {request_id})" if request_id else reason


def _backoff(exc: stripe.StripeError, retry: int) -> float:
    """Seconds to wait before retry number `retry` (0-based): Retry-After, else 0.5 s doubling."""
    raw = _header(exc, "Retry-After")
    try:
        wait = float(raw) if raw is not None else None
    except ValueError:
        wait = None
    if wait is None or wait < 0:
        wait = 0.5 * 2**retry
    return min(wait, MAX_BACKOFF)


class _RateLimited:
    """Calls that are retried on 429, at most `max_retries` times each, waiting with `sleep`."""

    def __init__(self, max_retries: int, sleep: Callable[[float], None]) -> None:
        self.max_retries = max_retries
        self.sleep = sleep
        self.retries = 0  # over all calls
        self.waited = 0.0

    def call(self, request: Callable[[], Any]) -> Any:
        retry = 0
        while True:
            try:
                return request()
            except stripe.RateLimitError as exc:
                if retry >= self.max_retries:
                    raise
                wait = _backoff(exc, retry)
                self.sleep(wait)
                retry += 1
                self.retries += 1
                self.waited += wait


def _epoch(at: datetime, what: str) -> int:
    if at.tzinfo is None:
        raise ValueError(f"{what} must be timezone-aware (UTC), got {at.isoformat()}")
    return int(at.timestamp() // 1)


def _type_filter(types: list[str] | tuple[str, ...] | None) -> dict[str, Any]:
    chosen = list(DEFAULT_TYPES if types is None else types)
    if not chosen:
        return {}  # all event types
    if len(chosen) == 1:
        return {"type": chosen[0]}  # `type` takes a wildcard, `types[]` does not
    if any("*" in t for t in chosen):
        raise ValueError("a `*` wildcard works with one event type only (Stripe's `type`); "
                         "list exact event names to ask for several")
    if len(chosen) > MAX_TYPES:
        raise ValueError(f"Stripe lists at most {MAX_TYPES} event types at once, got "
                         f"{len(chosen)}")
    return {"types": chosen}


def _refuses_types(exc: Exception, query: Mapping[str, Any]) -> bool:
    """Did the server refuse the `types[]` filter itself (localstripe: 400 "Unexpected types")?"""
    return ("types" in query and isinstance(exc, stripe.InvalidRequestError)
            and exc.http_status == 400 and "types" in (exc.user_message or "").lower())


def _refuses_created(exc: Exception, query: Mapping[str, Any]) -> bool:
    """Did the server refuse the `created` filter as a parameter it does not know (localstripe
    1.15.5: 400 "Unexpected created, types")? A bad value of it is another error."""
    message = (exc.user_message or "").lower() if isinstance(exc, stripe.StripeError) else ""
    return ("created" in query and isinstance(exc, stripe.InvalidRequestError)
            and exc.http_status == 400 and "created" in message
            and ("unexpected" in message or "unknown" in message))


class _NotAPage(ValueError):
    """An answer that is not a list object of events."""


def _page(response: Any) -> tuple[list[dict[str, Any]], bool]:
    """(the page's Events as the API sent them, has_more), parsed as a saved events file is
    (orjson), so both give the same rows. Raises _NotAPage for anything else."""
    body = getattr(response, "body", None)
    try:
        doc = loads(body) if isinstance(body, (str, bytes)) and body else None
    except orjson.JSONDecodeError as exc:
        raise _NotAPage(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(data := doc.get("data"), list):
        raise _NotAPage("no `data` list")
    return [e for e in data if isinstance(e, dict)], doc.get("has_more") is True


def fetch_events(
    client: stripe.StripeClient,
    subject: Subject,
    since: datetime,
    until: datetime,
    *,
    types: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    max_rate_limit_retries: int = 5,
    sleep: Callable[[float], None] = time.sleep,
    secrets: tuple[str, ...] = (),
) -> Fetched:
    """The Events in [since, until] that concern `subject`, newest first.

    For a customer, also keeps the refunds/disputes of its charges and payment intents (a refund
    names its charge, not its customer). Raises SourceError when nothing could be read; an error
    after some pages returns them with `partial=True` and a warning.
    """
    gte, lte = _epoch(since, "since"), _epoch(until, "until")
    if lte < gte:
        raise ValueError("the window ends before it starts (until < since)")
    params: dict[str, Any] = {"created": {"gte": gte, "lte": lte}, "limit": PAGE_SIZE,
                              **_type_filter(types)}
    warnings: list[SourceWarning] = []
    retained_since = datetime.now(UTC) - EVENT_RETENTION
    if since < retained_since:
        warnings.append(SourceWarning(SOURCE, (
            f"Stripe lists events of the last {EVENT_RETENTION.days} days only: events before "
            f"{retained_since:%Y-%m-%dT%H:%MZ} are missing; use an exported events file for "
            "older incidents")))
    kept: list[tuple[int, dict[str, Any]]] = []
    others: list[tuple[int, dict[str, Any]]] = []  # may be refunds of the subject's charges
    scanned = pages = 0
    oldest: float | None = None
    stopped_early = False
    limited = _RateLimited(max_rate_limit_retries, sleep)
    starting_after: str | None = None
    cursors: set[str] = set()
    wanted: frozenset[str] | None = None  # types kept here when the server refused `types[]`
    unordered = False  # the server refused `created`: the window is kept here, every page read
    while True:
        query = params if starting_after is None else {**params, "starting_after": starting_after}
        try:
            # the raw answer: the SDK's objects for every event (most of the time a page took)
            # would only be turned back into JSON
            events, has_more = _page(limited.call(partial(
                client.raw_request, "get", "/v1/events", **query)))
        except (stripe.StripeError, _NotAPage, UnicodeDecodeError) as exc:
            # UnicodeDecodeError: the SDK itself chokes on an answer that is not UTF-8
            reason = _reason(exc, secrets) if isinstance(exc, stripe.StripeError) else (
                f"the answer is not a Stripe list of events ({excerpt(str(exc), secrets)})")
            dropped = False
            if pages == 0 and wanted is None and _refuses_types(exc, query):
                wanted = frozenset(params.pop("types"))
                warnings.append(SourceWarning(SOURCE, (
                    f"the server refused the `types[]` filter ({reason}): listed events of "
                    f"every type and kept the {len(wanted)} asked-for types here")))
                dropped = True
            if pages == 0 and not unordered and _refuses_created(exc, query):
                del params["created"]
                unordered = True
                warnings.append(SourceWarning(SOURCE, (
                    f"the server refused the `created` filter ({reason}): listed all its "
                    f"events (every page) and kept those from {_created(gte)} to "
                    f"{_created(lte)} here")))
                dropped = True
            if dropped:
                continue
            if pages == 0:
                raise SourceError(SOURCE, reason) from None
            stopped_early = True
            warnings.append(SourceWarning(SOURCE, (
                f"stopped after {pages} page(s) of events: {reason}; results are partial"
                + (f" (events before {_created(oldest)} not read)" if oldest is not None else ""))))
            break
        pages += 1
        below_window = False
        for event in events:
            created = event.get("created")
            if isinstance(created, (int, float)) and created < gte:
                if unordered:  # a server that did not filter need not list newest first
                    continue
                below_window = True  # newest first: everything after this is older still
                break
            if isinstance(created, (int, float)):
                if created > lte:
                    continue
                oldest = created if oldest is None else min(oldest, created)
            if wanted is not None and event.get("type") not in wanted:
                scanned += 1  # read, but of a type the server was asked not to send
                continue
            data = event.get("data")
            obj = data.get("object") if isinstance(data, Mapping) else None
            if isinstance(obj, Mapping) and concerns(obj, subject):
                kept.append((scanned, event))
            elif subject.kind == "customer" and isinstance(obj, Mapping) and (
                obj.get("charge") or obj.get("payment_intent")
            ):
                others.append((scanned, event))  # a refund names its charge, not the customer
            scanned += 1
        if progress is not None:
            progress(scanned, len(kept))
        if below_window or not has_more or not events:
            break
        last_id = events[-1].get("id")
        if not isinstance(last_id, str) or not last_id or last_id in cursors:
            # a broken server or proxy: asking for the next page would get the same page again
            warnings.append(SourceWarning(SOURCE, (
                f"page {pages} says has_more but its last event id ({str(last_id)[:40]!r}) "
                "would ask for the same page again; stopped paging, results may be partial")))
            break
        cursors.add(last_id)
        starting_after = last_id
    kept += _related(kept, others)
    kept.sort(key=lambda pair: pair[0])
    if limited.retries:
        warnings.insert(0, SourceWarning(SOURCE, (
            f"rate limited (429) {limited.retries} time(s); retried after {limited.waited:g} s "
            "in total")))
    return Fetched([e for _, e in kept], scanned, pages, stopped_early, warnings)


def _related(
    kept: list[tuple[int, dict[str, Any]]], others: list[tuple[int, dict[str, Any]]]
) -> list[tuple[int, dict[str, Any]]]:
    """Events of refunds/disputes whose charge or payment intent is one the subject owns."""
    owned = {_ref(e["data"]["object"].get("id")) for _, e in kept} - {None}
    related = []
    for index, event in others:
        data = event.get("data")
        obj = data.get("object") if isinstance(data, Mapping) else None
        if isinstance(obj, Mapping) and (
            _ref(obj.get("charge")) in owned or _ref(obj.get("payment_intent")) in owned
        ):
            related.append((index, event))
    return related


def _created(created: Any) -> str:
    """An event's `created` (unix seconds) for a message; as given when it is not a time."""
    try:
        return iso(float(created), "seconds")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(created)


def events_document(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A `GET /v1/events` list object holding `events`, to save as events.json."""
    return {"object": "list", "data": list(events), "has_more": False, "url": "/v1/events"}


def load(
    api_key: str,
    subject: Subject,
    since: datetime,
    until: datetime,
    *,
    base_url: str | None = None,
    types: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    limits: Limits = LIMITS,
) -> tuple[LoadResult, Fetched]:
    """Fetch the subject's Events and turn them into provider_event rows (source stripe_events).
    `limits`: the bounds of each HTTP request (twice.connectors.live.http)."""
    key = (api_key or "").strip()
    if not key:
        raise SourceError(SOURCE, "no API key given (is the key's environment variable set?)")
    if key.startswith("pk_"):
        raise SourceError(SOURCE, "a publishable key (pk_...) cannot list events: use a secret "
                          "(sk_...) or restricted (rk_...) key")
    # the SDK's own retries off: 429s are retried per page in fetch_events, nothing else is
    addresses: BaseAddresses = {"api": base_url} if base_url else {}
    client = stripe.StripeClient(key, max_network_retries=0, http_client=BoundedHttp(limits),
                                 base_addresses=addresses)
    try:
        fetched = fetch_events(client, subject, since, until, types=types, progress=progress,
                               secrets=(key,))
    except SourceError as exc:
        raise SourceError(exc.source, redact(exc.reason, [key])) from None
    fetched.warnings = [SourceWarning(w.source, redact(w.detail, [key]))
                        for w in fetched.warnings]
    origin = SOURCE + (f" {redact(base_url)}" if base_url else "")
    if not fetched.events:
        none = SourceWarning(SOURCE, (
            f"no events of {subject.kind} {subject.id} between {since:%Y-%m-%dT%H:%M:%SZ} and "
            f"{until:%Y-%m-%dT%H:%M:%SZ} ({fetched.scanned} events scanned)"))
        return LoadResult(source=stripe_events.name, warnings=[*fetched.warnings, none]), fetched
    result = stripe_events.parse_events(events_document(fetched.events), origin)
    return (
        LoadResult(source=result.source, rows=result.rows,
                   warnings=[*fetched.warnings, *result.warnings]),
        fetched,
    )
