"""Stripe's wire conventions the lab server shares: ids, form bodies, errors, list objects.

- ids look like Stripe's and are deterministic for a seed;
- POST bodies (and GET query strings) use Stripe's bracket form encoding;
- errors are `{"error": {"type", "message", "code", "param", ...}}` with an HTTP status;
- lists are `{"object": "list", "data": [newest first], "has_more", "url"}` with `limit`
  (1-100, default 10), `starting_after`, `ending_before` and `created[gt|gte|lt|lte]`;
- objects are stored in one canonical form carrying every version's references and rendered per
  API version on the way out (`render`): an event's `data` with the account's version, an API
  answer with the request's `Stripe-Version`.
"""

from __future__ import annotations

import copy
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

# The API version stripe-python 16.1 pins (stripe/_api_version.py); the lab account "uses" it.
API_VERSION = "2026-10-28.endive"
LEGACY_API_VERSION = "2024-06-20"  # what stripe-python 10.0.0 pinned: the last pre-acacia version

# Version gates (the date part of a version compares as a string). Sources: Stripe's changelog and
# stripe-python's CHANGELOG.md (v12.0.0 for basil, v12.2.0 for invoice_payment.paid).
# 2024-10-28.acacia: refund.created/updated/failed are sent for every refund, card refunds included
# ("previously only for refunds without a corresponding charge").
REFUND_EVENTS_FOR_CHARGES = "2024-10-28"
# 2025-03-31.basil: Invoice loses `charge`, `payment_intent`, `paid`, `paid_out_of_band`,
# `subscription`, `subscription_details` and gains `parent`, `payments`, `amount_overpaid`;
# Charge and PaymentIntent lose `invoice`; InvoicePayment appears; Subscription's
# `current_period_start/end` move to its items.
BASIL = "2025-03-31"
# 2017-05-25: an Event's `request` became `{"id", "idempotency_key"}`; before, the id as a string
REQUEST_OBJECT = "2017-05-25"
# 2025-05-28.basil: the `invoice_payment.paid` event.
INVOICE_PAYMENT_PAID_EVENT = "2025-05-28"

# Fields present only before basil / only from basil on, per object type. `render` drops the
# fields the version does not have; every other field is common to both.
_LEGACY_ONLY: dict[str, frozenset[str]] = {
    "charge": frozenset({"invoice"}),
    "payment_intent": frozenset({"invoice"}),
    "invoice": frozenset(
        {"charge", "paid", "paid_out_of_band", "payment_intent", "subscription",
         "subscription_details"}
    ),
    "line_item": frozenset({"subscription_item", "type"}),
    "subscription": frozenset({"current_period_start", "current_period_end"}),
}
_MODERN_ONLY: dict[str, frozenset[str]] = {
    "invoice": frozenset({"amount_overpaid", "parent"}),
    "line_item": frozenset({"parent"}),
    "subscription_item": frozenset({"current_period_start", "current_period_end"}),
}

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

JsonObject = dict[str, Any]


class ApiError(Exception):
    """A Stripe API error: HTTP status plus the body's `error` object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # noqa: A002 - Stripe's own field name
        code: str | None = None,
        param: str | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error: JsonObject = {"type": type, "message": message}
        if code is not None:
            self.error["code"] = code
        if param is not None:
            self.error["param"] = param
        self.error.update(extra)

    def body(self) -> JsonObject:
        return {"error": dict(self.error)}


def version_at_least(api_version: str, gate: str) -> bool:
    """Whether `api_version` (`2025-03-31.basil`, `2024-06-20`) is `gate` or later."""
    return api_version[:10] >= gate


def render(obj: Any, api_version: str) -> Any:
    """A deep copy of `obj` as the API renders it at `api_version`.

    Nested objects (an invoice's lines, a subscription's items, a list's data, an error's
    payment_intent) are rendered too; an `event` is left as it is: its `data` was rendered once,
    with the account's version, when it was created, and "never changes".
    """
    if isinstance(obj, list):
        return [render(item, api_version) for item in obj]
    if not isinstance(obj, dict):
        return copy.deepcopy(obj)
    if obj.get("object") == "event":
        return copy.deepcopy(obj)
    kind = obj.get("object")
    table = _LEGACY_ONLY if version_at_least(api_version, BASIL) else _MODERN_ONLY
    drop = table.get(kind, frozenset()) if isinstance(kind, str) else frozenset()
    return {k: render(v, api_version) for k, v in obj.items() if k not in drop}


def previous_attributes(before: JsonObject, after: JsonObject) -> JsonObject:
    """`data.previous_attributes` of an update event: the changed attributes' former values.

    As Stripe shows them: a changed hash lists only its changed keys (`status_transitions:
    {paid_at: null}`, `metadata: {key: null}` for a key that was added); an array is given whole.
    """
    changed: JsonObject = {}
    for key in list(before) + [k for k in after if k not in before]:
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            changed[key] = previous_attributes(old, new)
        else:
            changed[key] = copy.deepcopy(old)
    return changed


@dataclass(frozen=True)
class CallContext:
    """What every event created by one API call (or one automatic step) shares.

    `request_id` None: an automatic event (a renewal, Stripe's own follow-up work); its Event
    `request` is then `{"id": null, "idempotency_key": null}`.
    """

    request_id: str | None
    idempotency_key: str | None
    now: float  # time.time() (+ the server's clock offset) when the request was handled

    def automatic(self, now: float | None = None) -> CallContext:
        """The same moment (or `now`), as Stripe's own work rather than an API request's."""
        return CallContext(None, None, self.now if now is None else now)


class IdFactory:
    """Stripe-looking ids, deterministic for a given seed.

    Real object ids embed an account fragment (`pi_3MtwBwLkdIwHu7ix28a3tqPa`: version digit,
    `M`-era letter, 4 chars, 10-char account fragment, 8 chars); request ids are `req_` + 14.
    """

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.account_fragment = self._chars(10)

    def _chars(self, n: int) -> str:
        return "".join(self._random.choice(BASE62) for _ in range(n))

    def request_id(self) -> str:
        with self._lock:
            return "req_" + self._chars(14)

    def short(self, prefix: str) -> str:
        """`cus_NffrFeUfNV2Hib` style: prefix + 14 chars."""
        with self._lock:
            return f"{prefix}_{self._chars(14)}"

    def long(self, prefix: str, version: str = "3") -> str:
        """`pi_3P...` style: prefix + 24 chars embedding the account fragment."""
        with self._lock:
            body = version + "P" + self._chars(4) + self.account_fragment + self._chars(8)
            return f"{prefix}_{body}"

    def secret(self) -> str:
        with self._lock:
            return self._chars(25)


def truthy(value: Any) -> bool:
    return str(value).lower() in ("true", "1", "yes", "on")


def amount_param(
    params: Mapping[str, Any],
    *,
    required: bool = True,
    name: str = "amount",
    label: str | None = None,
) -> int | None:
    """A positive integer parameter (`label`: how errors name it, e.g. `items[0][...]`)."""
    label = label or name
    raw = params.get(name)
    if raw is None or raw == "":
        if not required:
            return None
        raise ApiError(
            400, f"Missing required param: {label}.", code="parameter_missing", param=label
        )
    try:
        value = int(str(raw))
    except ValueError:
        raise ApiError(
            400, f"Invalid integer: {raw}", code="parameter_invalid_integer", param=label
        ) from None
    if value <= 0:
        raise ApiError(
            400,
            "This value must be greater than or equal to 1.",
            code="parameter_invalid_integer",
            param=label,
        )
    return value


def currency_param(params: Mapping[str, Any], label: str = "currency") -> str:
    currency = params.get("currency")
    if not currency:
        raise ApiError(
            400, f"Missing required param: {label}.", code="parameter_missing", param=label
        )
    return str(currency).lower()


def metadata_param(params: Mapping[str, Any]) -> dict[str, str]:
    raw = params.get("metadata")
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


# Stripe's test payment methods and tokens whose charge is declined (generic_decline).
DECLINING_METHODS = {"pm_card_chargeDeclined", "tok_chargeDeclined", "pm_card_visa_chargeDeclined"}


def card_declined(charge_id: str, **extra: Any) -> ApiError:
    """Stripe's 402 for a declined card, naming the charge (and what else the caller adds)."""
    return ApiError(402, "Your card was declined.", type="card_error", code="card_declined",
                    decline_code="generic_decline", charge=charge_id, **extra)


def parse_form(body: str) -> JsonObject:
    """Decode Stripe's form encoding: `metadata[k]=v`, `types[]=a`, `created[gte]=1`, `items[0][x]`.

    Values stay strings, as the API receives them; the endpoint coerces what it needs.
    """
    params: JsonObject = {}
    for raw_key, value in parse_qsl(body, keep_blank_values=True):
        parts = _key_parts(raw_key)
        node: Any = params
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt = None if last else parts[i + 1]
            if part == "":  # `types[]=` appends
                if not isinstance(node, list):
                    break
                if last:
                    node.append(value)
                else:
                    child: Any = [] if nxt == "" else {}
                    node.append(child)
                    node = child
                continue
            if isinstance(node, list):  # `items[0][x]`: numeric index into a list-as-dict
                break
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, [] if nxt == "" else {})
    return params


def _key_parts(raw_key: str) -> list[str]:
    head, sep, rest = raw_key.partition("[")
    parts = [head]
    if sep:
        parts += rest.rstrip("]").split("][")
    return parts


def created_matches(created: int, condition: Any) -> bool:
    if condition is None:
        return True
    try:
        if not isinstance(condition, dict):
            return created == int(condition)
        checks: dict[str, Callable[[int, int], bool]] = {
            "gte": lambda a, b: a >= b,
            "gt": lambda a, b: a > b,
            "lte": lambda a, b: a <= b,
            "lt": lambda a, b: a < b,
        }
        return all(
            checks[op](created, int(value)) for op, value in condition.items() if op in checks
        )
    except ValueError:
        raise ApiError(
            400, f"Invalid integer: {condition}", code="parameter_invalid_integer", param="created"
        ) from None


def _type_matches(event_type: str, pattern: str) -> bool:
    if pattern.endswith("*"):  # Stripe accepts `charge.*`
        return event_type.startswith(pattern[:-1])
    return event_type == pattern


def filter_types(items: Iterable[JsonObject], query: JsonObject) -> list[JsonObject]:
    if query.get("type") and query.get("types"):
        raise ApiError(400, "You may only specify one of these parameters: type, types.")
    patterns: list[str] = []
    if query.get("type"):
        patterns = [str(query["type"])]
    elif query.get("types"):
        raw = query["types"]
        patterns = [str(t) for t in (raw if isinstance(raw, list) else raw.values())]
    if not patterns:
        return list(items)
    return [e for e in items if any(_type_matches(e["type"], p) for p in patterns)]


def missing(kind: str, object_id: str, param: str = "id", status: int = 404) -> ApiError:
    return ApiError(status, f"No such {kind}: '{object_id}'", code="resource_missing", param=param)


def newest_first(items: Iterable[JsonObject]) -> list[JsonObject]:
    """Newest `created` first; objects of one second in reverse insertion order, as Stripe lists.

    Insertion order is not `created` order once the virtual clock has moved backwards.
    """
    indexed = list(enumerate(items))
    indexed.sort(key=lambda pair: (pair[1]["created"], pair[0]), reverse=True)
    return [obj for _, obj in indexed]


def paginate(items: list[JsonObject], query: JsonObject, url: str, kind: str) -> JsonObject:
    raw_limit = query.get("limit", 10)
    try:
        limit = int(str(raw_limit))
    except ValueError:
        raise ApiError(
            400, f"Invalid integer: {raw_limit}", code="parameter_invalid_integer", param="limit"
        ) from None
    if not 1 <= limit <= 100:
        raise ApiError(
            400,
            "This value must be greater than or equal to 1 and less than or equal to 100.",
            code="parameter_invalid_integer",
            param="limit",
        )
    ids = [o["id"] for o in items]
    after, before = query.get("starting_after"), query.get("ending_before")
    if after:
        if after not in ids:
            raise missing(kind, str(after), param="starting_after", status=400)
        start = ids.index(after) + 1
        page, has_more = items[start : start + limit], start + limit < len(items)
    elif before:
        if before not in ids:
            raise missing(kind, str(before), param="ending_before", status=400)
        end = ids.index(before)
        page, has_more = items[max(0, end - limit) : end], end - limit > 0
    else:
        page, has_more = items[:limit], limit < len(items)
    return {"object": "list", "data": copy.deepcopy(page), "has_more": has_more, "url": url}
