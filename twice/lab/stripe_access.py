"""Who may call the lab Stripe account, and which calls are repeats: API keys and idempotency keys.

API keys: `Authorization: Bearer <key>` (the SDK) or basic auth with the key as user name (curl
`-u sk_test_...:`). An unknown key is a 401 naming the key masked as Stripe masks it (prefix and
last 4 characters kept); a `read_only` restricted key gets a 403 permission error on writes.

Idempotency keys (Stripe's documented behaviour): the first request's status and body are stored
when the endpoint ran; a later request with the same key and the same parameters gets them back;
other parameters or another endpoint is a 400 `idempotency_error`; a request arriving while the
first is still executing is a 409; keys are pruned after 24 h (of `time.time()`, so a virtual
clock can expire them).

A lab run may move the virtual clock backwards (runs that overlap in virtual time). A key is then
kept while it is younger than 24 h at the request's time, and a key stored "later" than the
request (a negative age) is kept and found: retention counts forward from the key's first use
only, so going back in time never expires a key nor fails.
"""

from __future__ import annotations

import base64
import binascii
import threading
from dataclasses import dataclass

from twice.lab.stripe_wire import ApiError, JsonObject

KEY_RETENTION_SECONDS = 24 * 3600


def mask_key(key: str) -> str:
    """`sk_test_abcdefgh1234` -> `sk_test_********1234`."""
    prefix_end = key.find("_", key.find("_") + 1) + 1 if key.count("_") >= 2 else 0
    hidden = len(key) - prefix_end
    kept = 4 if hidden > 4 else 0
    return key[:prefix_end] + "*" * (hidden - kept) + key[len(key) - kept :]


def api_key_from(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip() or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[0] or None
    return None


def authenticate(
    api_keys: dict[str, str], authorization: str | None, method: str, account: str
) -> ApiError | None:
    """None when the call may proceed, else the 401/403 Stripe would answer."""
    api_key = api_key_from(authorization)
    if not api_key:
        return ApiError(
            401,
            "You did not provide an API key. You need to provide your API key in the "
            "Authorization header, using Bearer auth (e.g. 'Authorization: Bearer "
            "YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, "
            "or we can help at https://support.stripe.com/.",
        )
    role = api_keys.get(api_key)
    if role is None:
        return ApiError(401, f"Invalid API Key provided: {mask_key(api_key)}")
    if role == "read_only" and method != "GET":
        return ApiError(
            403,
            f"The provided key '{mask_key(api_key)}' does not have the required permissions "
            f"for this endpoint on account '{account}'. Having the 'rak_write' permission "
            "would allow this request to continue.",
        )
    return None


@dataclass(frozen=True)
class StoredResponse:
    method: str
    path: str
    params: JsonObject
    status: int
    body: bytes
    request_id: str
    created: float


class IdempotencyKeys:
    """The account's idempotency-key store. Thread-safe."""

    def __init__(self, retention: float = KEY_RETENTION_SECONDS) -> None:
        self.retention = retention
        self._stored: dict[str, StoredResponse] = {}
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()

    def claim(
        self, key: str, method: str, path: str, params: JsonObject, now: float
    ) -> StoredResponse | None:
        """The answer to replay for `key`, or None after marking `key` in flight for this call.

        Raises the `idempotency_error` Stripe answers for a conflicting reuse.
        """
        with self._lock:
            # Only keys older than the retention go; a negative age (clock moved back) keeps them.
            for old in [k for k, s in self._stored.items() if now - s.created > self.retention]:
                del self._stored[old]
            stored = self._stored.get(key)
            if stored is None:
                if key in self._in_flight:
                    raise ApiError(
                        409,
                        "There is currently another in-progress request using this Stripe "
                        f"Idempotency-Key ('{key}'). Please try again later.",
                        type="idempotency_error",
                    )
                self._in_flight.add(key)
                return None
        if (stored.method, stored.path) != (method, path):
            raise ApiError(
                400,
                "Keys for idempotent requests can only be used for the same endpoint they were "
                f"first used for ('{stored.path}' vs '{path}'). Try using a key other than "
                f"'{key}' if you meant to execute a different request.",
                type="idempotency_error",
            )
        if stored.params != params:
            raise ApiError(
                400,
                "Keys for idempotent requests can only be used with the same parameters they "
                f"were first used with. Try using a key other than '{key}' if you meant to "
                "execute a different request.",
                type="idempotency_error",
            )
        return stored

    def store(self, key: str, response: StoredResponse) -> None:
        with self._lock:
            self._stored[key] = response

    def release(self, key: str) -> None:
        with self._lock:
            self._in_flight.discard(key)
