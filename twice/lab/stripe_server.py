"""A Stripe-compatible HTTP server on loopback, with idempotency keys and injectable faults.

The real stripe-python SDK talks to it through `StripeClient(key, base_addresses={"api": url})`.
It answers like Stripe does where a duplicate investigation looks:

- every response carries `Request-Id` (a new id per request, replays included); POSTs also carry
  `Idempotency-Key` and `Original-Request`. A replay answers the stored status and body byte for
  byte with `Idempotent-Replayed: true` and `Original-Request` naming the first request, as the
  real API does (captured responses show `request-id` != `original-request` on a replay);
- keys live 24 h of `time.time()` (so `time-machine` can age them), are scoped to the account,
  and a reuse with other parameters or another endpoint is a 400 `idempotency_error`;
- results are stored only when the endpoint ran (2xx, and 402 card declines); validation errors,
  auth errors and injected faults before the commit are not, so a retry can still succeed;
- `Fault`s fire before the commit (reset, 500, 429) or after it (reset, delay): after-commit
  faults leave the object and its events in place although the client never got the answer.

Timestamps are `time.time() + clock_offset` when the request is handled.

API versions: the account's `api_version` (default: the one stripe-python 16.1 pins) shapes every
event's `data`; an answer is shaped by the request's `Stripe-Version` (the SDK always sends its
pinned one), else the account's. So a `2024-06-20` account driven by stripe-python 16 gets basil+
answers but pre-basil events, as on Stripe.

Automatic flows (`renew`) make events with `request.id` null and no request-log row: no API
request happened.

Modules: `stripe_wire` (ids, form bodies, errors, lists, versions), `stripe_access` (API keys,
idempotency keys), `stripe_state` (objects and events), `stripe_billing` (subscriptions,
invoices, renewals), `stripe_logs` (export writers), this one (HTTP, faults, the request log).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from twice.lab.loopback import LoopbackHandler, LoopbackService
from twice.lab.stripe_access import IdempotencyKeys, StoredResponse, authenticate, mask_key
from twice.lab.stripe_billing import FINALIZE_AFTER_SECONDS
from twice.lab.stripe_logs import Precision, write_events, write_logs_tail, write_request_log
from twice.lab.stripe_state import StripeState
from twice.lab.stripe_wire import (
    API_VERSION,
    ApiError,
    CallContext,
    IdFactory,
    JsonObject,
    parse_form,
    render,
)

__all__ = ["Fault", "FaultKind", "RequestRecord", "StripeServer", "mask_key"]

FaultKind = Literal[
    "delay_after_commit", "reset_after_commit", "reset_before_commit", "status_500", "status_429"
]


@dataclass
class Fault:
    """An injected failure for requests whose path starts with `path` (the next `times` of them).

    `method=None` matches any method. `seconds` is the delay of `delay_after_commit`.
    For `status_429`, `retry_after` sets a `Retry-After` header; for both status faults
    `should_retry` sets `Stripe-Should-Retry` (None: header absent, so stripe-python retries
    a 500 and does not retry a 429).
    """

    kind: FaultKind
    method: str | None = "POST"
    path: str = "/v1/"
    times: int = 1
    seconds: float = 0.0
    retry_after: float | None = None
    should_retry: bool | None = None
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return (
            self.hits < self.times
            and (self.method is None or self.method.upper() == method)
            and path.startswith(self.path)
        )


@dataclass(frozen=True)
class RequestRecord:
    """One request as the provider saw it (what a Dashboard request log row shows, and more)."""

    request_id: str
    created: float
    method: str
    path: str
    idempotency_key: str | None
    status: int  # 0: the connection died before the API answered (reset_before_commit)
    body: str  # the request body as sent (form-encoded)
    replayed: bool
    query: str = ""
    original_request_id: str | None = None  # the request whose stored answer was replayed
    outcome: str = "answered"  # or the fault kind that hit this request
    logged: bool = True  # False when the request never reached the API (not in Stripe's logs)
    error: JsonObject | None = None
    response_body: str = ""
    envoy_attempt_count: int | None = None  # `x-envoy-attempt-count` if a gateway added it
    headers: dict[str, str] = field(default_factory=dict)  # minus Authorization


@dataclass
class _Answer:
    status: int
    body: bytes
    headers: dict[str, str]
    error: JsonObject | None = None


def _json_bytes(obj: JsonObject) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


class _Handler(LoopbackHandler):
    do_POST = LoopbackHandler.do_GET  # noqa: N815
    do_DELETE = LoopbackHandler.do_GET  # noqa: N815

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass  # the socket was reset on purpose


class StripeServer(LoopbackService):
    handler = _Handler
    thread_name = "lab-stripe-server"

    """A lab Stripe account served on 127.0.0.1 (free port) from a daemon thread."""

    def __init__(
        self,
        api_keys: dict[str, str] | None = None,
        *,
        seed: int | None = None,
        clock_offset: float = 0.0,
        customers: list[str] | dict[str, JsonObject] | None = None,
        faults: list[Fault] | None = None,
        api_version: str = API_VERSION,
    ) -> None:
        self.api_keys = dict(api_keys or {"sk_test_twice": "full"})
        self.clock_offset = clock_offset
        self.api_version = api_version
        self.ids = IdFactory(seed)
        self.state = StripeState(self.ids, api_version)
        self.faults: list[Fault] = list(faults or [])
        self.requests: list[RequestRecord] = []
        self.idempotency_keys = IdempotencyKeys()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        # called first thing for every request (`twice.lab.repeatable`: a drawn latency)
        self.before_answer: Callable[[], None] | None = None
        for customer_id, fields in _customer_specs(customers):
            self.add_customer(customer_id, **fields)

    # -- lifecycle (start/stop/url from LoopbackService) --------------------------------
    def _on_start(self) -> None:
        self._stopping.clear()

    def _on_stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in delay_after_commit

    # -- scenario helpers -----------------------------------------------------------------
    def now(self) -> float:
        return time.time() + self.clock_offset

    def add_fault(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def add_customer(self, customer_id: str | None = None, **fields: Any) -> JsonObject:
        """Pre-create a customer (no event: it existed before the scenario)."""
        return self.state.add_customer(self.now(), customer_id, **fields)

    def add_subscription(
        self,
        customer_id: str,
        amount: int,
        currency: str = "usd",
        *,
        payment_method: str = "pm_card_visa",
        interval: str = "month",
        **metadata: str,
    ) -> str:
        """An active subscription that existed before the scenario (no events); its id.

        `amount` per `interval` (month or year); its current period ends now, so `renew` is due.
        `metadata` becomes the subscription's (keys `payment_method`/`interval` are taken).
        """
        with self.state.lock:
            subscription = self.state.billing.add_subscription(
                self.now(),
                customer_id,
                amount,
                currency,
                payment_method=payment_method,
                interval=interval,
                metadata=metadata,
            )
        return str(subscription["id"])

    def renew(
        self,
        subscription_id: str,
        *,
        declined: bool = False,
        finalize_after: float = FINALIZE_AFTER_SECONDS,
    ) -> dict[str, str]:
        """Stripe's automatic renewal of a subscription, starting at `now()`: no API request.

        Events at `now()`: `invoice.created`, `customer.subscription.updated`; at
        `now() + finalize_after` (Stripe's one-hour draft window; 0 for all at once):
        `payment_intent.created`, `invoice.updated`, `invoice.finalized`, then either
        `charge.succeeded`, `payment_intent.succeeded`, `invoice.updated`, `invoice.paid`,
        `invoice.payment_succeeded` (+ `invoice_payment.paid` from 2025-05-28) or, `declined`,
        `charge.failed`, `payment_intent.payment_failed`, `invoice.updated`,
        `invoice.payment_failed`, `customer.updated`, `customer.subscription.updated`. Every
        `request` is `{"id": None, "idempotency_key": None}`. Returns the ids made: `invoice`,
        `payment_intent`, `charge` (its id body is the intent's), `invoice_payment`,
        `subscription`.
        """
        with self.state.lock:
            return self.state.billing.renew(
                self.now(), subscription_id, declined=declined, finalize_after=finalize_after
            )

    @property
    def customers(self) -> dict[str, JsonObject]:
        return self.state.customers

    @property
    def subscriptions(self) -> dict[str, JsonObject]:
        return self.state.billing.subscriptions

    @property
    def invoices(self) -> dict[str, JsonObject]:
        return self.state.billing.invoices

    @property
    def charges(self) -> dict[str, JsonObject]:
        return self.state.charges

    @property
    def payment_intents(self) -> dict[str, JsonObject]:
        return self.state.payment_intents

    @property
    def events(self) -> list[JsonObject]:
        return self.state.events

    def write_events(self, path: str | Path) -> Path:
        return write_events(self.events, path)

    def write_logs_tail(self, path: str | Path) -> Path:
        return write_logs_tail(self.requests, path)

    def write_request_log(self, path: str | Path, precision: Precision = "ms") -> Path:
        return write_request_log(self.requests, path, precision=precision)

    # -- request handling -----------------------------------------------------------------
    def answer(self, handler: _Handler) -> None:  # type: ignore[override]
        if self.before_answer is not None:
            self.before_answer()
        now = self.now()
        request_id = self.ids.request_id()
        method = handler.command.upper()
        split = urlsplit(handler.path)
        path, query = split.path, split.query
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode("utf-8", "replace") if length else ""
        headers = {k: v for k, v in handler.headers.items() if k.lower() != "authorization"}
        key = handler.headers.get("Idempotency-Key") or None
        attempt = handler.headers.get("x-envoy-attempt-count")
        version = handler.headers.get("Stripe-Version") or self.api_version
        record: dict[str, Any] = {
            "request_id": request_id,
            "created": now,
            "method": method,
            "path": path,
            "idempotency_key": key,
            "body": body,
            "query": query,
            "envoy_attempt_count": int(attempt) if attempt and attempt.isdigit() else None,
            "headers": headers,
        }

        def respond(answer: _Answer, **extra: Any) -> None:
            self._record(record, answer, **extra)
            self._send(handler, answer)

        base_headers = {"Request-Id": request_id, "Stripe-Version": version}
        account = f"acct_1{self.ids.account_fragment}"
        denied = authenticate(self.api_keys, handler.headers.get("Authorization"), method, account)
        if denied is not None:
            respond(self._error_answer(denied, base_headers))
            return
        fault = self._take_fault(method, path)
        if fault is not None and fault.kind == "reset_before_commit":
            self._record(record, _Answer(0, b"", {}), outcome=fault.kind, logged=False)
            self._reset(handler)
            return
        if fault is not None and fault.kind in ("status_500", "status_429"):
            respond(self._fault_answer(fault, base_headers), outcome=fault.kind)
            return

        replay: StoredResponse | None = None
        if method == "POST" and key:
            base_headers |= {"Idempotency-Key": key}
            params = parse_form(body)
            try:
                replay = self.idempotency_keys.claim(key, method, path, params, now)
            except ApiError as exc:
                respond(self._error_answer(exc, base_headers | {"Original-Request": request_id}))
                return
        if replay is not None:
            answer = _Answer(
                replay.status,
                replay.body,
                base_headers
                | {"Original-Request": replay.request_id, "Idempotent-Replayed": "true"},
                error=_error_of(replay.status, replay.body),
            )
            record |= {"replayed": True, "original_request_id": replay.request_id}
        else:
            try:
                answer = self._execute(method, path, query, body, request_id, key, now, version)
            finally:
                if method == "POST" and key:
                    self.idempotency_keys.release(key)
            if method == "POST":
                answer.headers = base_headers | {"Original-Request": request_id}
            else:
                answer.headers = base_headers
        if fault is not None and fault.kind == "reset_after_commit":
            self._record(record, answer, outcome=fault.kind)
            self._reset(handler)
            return
        if fault is not None and fault.kind == "delay_after_commit":
            self._record(record, answer, outcome=fault.kind)
            if self._stopping.wait(fault.seconds):
                self._reset(handler)
                return
            self._send(handler, answer)
            return
        respond(answer)

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    return fault
        return None

    def _execute(
        self,
        method: str,
        path: str,
        query: str,
        body: str,
        request_id: str,
        key: str | None,
        now: float,
        version: str,
    ) -> _Answer:
        params = parse_form(body) if method == "POST" else parse_form(query)
        ctx = CallContext(request_id, key if method == "POST" else None, now)
        with self.state.lock:
            try:
                status, obj = 200, self._route(method, path, params, ctx)
            except ApiError as exc:
                status, obj = exc.status, exc.body()
            obj = render(obj, version)
            payload = _json_bytes(obj)
            if method == "POST" and key and (status < 400 or status == 402):
                self.idempotency_keys.store(
                    key, StoredResponse(method, path, params, status, payload, request_id, now)
                )
        return _Answer(status, payload, {}, error=obj.get("error") if status >= 400 else None)

    def _route(self, method: str, path: str, params: JsonObject, ctx: CallContext) -> JsonObject:
        parts = path.strip("/").split("/")
        if len(parts) < 2 or parts[0] != "v1" or parts[1] not in self.state.collections():
            raise ApiError(404, f"Unrecognized request URL ({method}: {path}).")
        collection, rest = parts[1], parts[2:]
        state = self.state
        if method == "GET" and not rest:
            return state.list(collection, params)
        if method == "GET" and len(rest) == 1:
            return state.retrieve(collection, rest[0])
        if method == "POST" and not rest:
            create = {
                "customers": state.create_customer,
                "charges": state.create_charge,
                "payment_intents": state.create_payment_intent,
                "refunds": state.create_refund,
                "subscriptions": state.billing.create_subscription,
            }.get(collection)
            if create is not None:
                return create(ctx, params)
        if method == "POST" and collection == "customers" and len(rest) == 1:
            return state.update_customer(ctx, rest[0], params)
        action = {
            ("payment_intents", "confirm"): state.confirm_payment_intent,
            ("invoices", "send"): state.billing.send_invoice,
            ("invoices", "void"): state.billing.void_invoice,
        }.get((collection, rest[1]) if method == "POST" and len(rest) == 2 else ("", ""))
        if action is not None:
            return action(ctx, rest[0], params)
        raise ApiError(404, f"Unrecognized request URL ({method}: {path}).")

    def _fault_answer(self, fault: Fault, headers: dict[str, str]) -> _Answer:
        extra: dict[str, str] = {}
        if fault.should_retry is not None:
            extra["Stripe-Should-Retry"] = "true" if fault.should_retry else "false"
        if fault.kind == "status_429":
            if fault.retry_after is not None:
                extra["Retry-After"] = f"{fault.retry_after:g}"
            err = ApiError(
                429,
                "Request rate limit exceeded. Learn more about rate limits here "
                "https://stripe.com/docs/rate-limits.",
                code="rate_limit",
            )
        else:
            err = ApiError(
                500,
                "An unknown error occurred. Please try again later.",
                type="api_error",
            )
        return self._error_answer(err, headers | extra)

    @staticmethod
    def _error_answer(exc: ApiError, headers: dict[str, str]) -> _Answer:
        return _Answer(exc.status, _json_bytes(exc.body()), dict(headers), error=dict(exc.error))

    def _record(self, record: dict[str, Any], answer: _Answer, **extra: Any) -> None:
        fields = {"replayed": False, **record, **extra}
        entry = RequestRecord(
            status=answer.status,
            error=answer.error,
            response_body=answer.body.decode(),
            **fields,
        )
        with self._lock:
            self.requests.append(entry)

    @staticmethod
    def _send(handler: _Handler, answer: _Answer) -> None:
        try:
            handler.send_response(answer.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(answer.body)))
            handler.send_header("Cache-Control", "no-cache, no-store")
            for name, value in answer.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(answer.body)
            handler.wfile.flush()
        except OSError:
            handler.close_connection = True  # the client went away (e.g. after its timeout)

    @staticmethod
    def _reset(handler: _Handler) -> None:
        """Drop the connection without an answer: RST, as a crashed peer or a cut network does."""
        handler.close_connection = True
        sock = handler.connection
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        except OSError:
            pass


def _error_of(status: int, body: bytes) -> JsonObject | None:
    if status < 400:
        return None
    try:
        error = json.loads(body).get("error")
    except ValueError:
        return None
    return error if isinstance(error, dict) else None


def _customer_specs(
    customers: list[str] | dict[str, JsonObject] | None,
) -> list[tuple[str, JsonObject]]:
    if customers is None:
        return []
    if isinstance(customers, dict):
        return [(cid, dict(fields)) for cid, fields in customers.items()]
    return [(cid, {}) for cid in customers]
