"""Stripe's wire conventions the lab server shares: ids, form bodies, errors, list objects.

- ids look like Stripe's and are deterministic for a seed;
- POST bodies (and GET query strings) use Stripe's bracket form encoding;
- errors are `{"error": {"type", "message", "code", "param", ...}}` with an HTTP status;
- lists are `{"object": "list", "data": [newest first], "has_more", "url"}` with `limit`
  (1-100, default 10), `starting_after`, `ending_before` and `created[gt|gte|lt|lte]`.
"""

from __future__ import annotations

import copy
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

# The API version stripe-python 16.1 pins (stripe/_api_version.py); the lab account "uses" it.
API_VERSION = "2026-10-28.endive"

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


@dataclass(frozen=True)
class CallContext:
    """What every event created by one API call shares."""

    request_id: str
    idempotency_key: str | None
    now: float  # time.time() (+ the server's clock offset) when the request was handled


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
