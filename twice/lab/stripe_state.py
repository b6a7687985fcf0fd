"""The provider side of the lab Stripe server: objects, events and their ids.

Pure state, no sockets: `StripeState` applies one already-authenticated API call at a time and
returns the JSON object to answer with, or raises `ApiError` with Stripe's error shape. The HTTP
layer (`twice.lab.stripe_server`) handles auth, idempotency keys and injected faults around it.

Shapes follow Stripe's API reference and the stripe-python 16 SDK (objects carry `id`, `object`,
`created` in unix seconds, `livemode`, `metadata`); only the fields an investigation reads are
modelled, plus enough for the SDK to deserialize them. Objects are kept in one canonical form
with every API version's references (`charge.invoice` and `invoice.parent` alike); events are
rendered with the account's `api_version` when emitted (`twice.lab.stripe_wire.render`).

Subscriptions, invoices and their automatic flows live in `twice.lab.stripe_billing`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from typing import Any

from twice.lab.stripe_billing import Billing
from twice.lab.stripe_wire import (
    API_VERSION,
    DECLINING_METHODS,
    REFUND_EVENTS_FOR_CHARGES,
    REQUEST_OBJECT,
    ApiError,
    CallContext,
    IdFactory,
    JsonObject,
    amount_param,
    card_declined,
    created_matches,
    currency_param,
    filter_types,
    metadata_param,
    missing,
    newest_first,
    paginate,
    previous_attributes,
    render,
    truthy,
    version_at_least,
)


class StripeState:
    """Objects and events of one lab Stripe account. Thread-safe: one lock around every call."""

    def __init__(self, ids: IdFactory, api_version: str = API_VERSION) -> None:
        self.ids = ids
        self.api_version = api_version
        self.lock = threading.RLock()
        self.customers: dict[str, JsonObject] = {}
        self.charges: dict[str, JsonObject] = {}
        self.payment_intents: dict[str, JsonObject] = {}
        self.refunds: dict[str, JsonObject] = {}
        self.events: list[JsonObject] = []  # in emission order (not always `created` order)
        self.billing = Billing(self)

    # -- events ---------------------------------------------------------------------------
    def emit(
        self, ctx: CallContext, type_: str, obj: JsonObject, previous: JsonObject | None = None
    ) -> None:
        """Record an event on `obj` as it is now, rendered with the account's API version."""
        data: JsonObject = {"object": render(obj, self.api_version)}
        if previous is not None:
            data["previous_attributes"] = previous
        self.events.append(
            {
                "id": self.ids.long("evt", version="1"),
                "object": "event",
                "api_version": self.api_version,
                "created": int(ctx.now),
                "data": data,
                "livemode": False,
                "pending_webhooks": 0,
                "request": self._request(ctx),
                "type": type_,
            }
        )

    def _request(self, ctx: CallContext) -> Any:
        """An Event's `request`: `{"id", "idempotency_key"}` from API version 2017-05-25 on,
        before it the request id as a plain string (null for automatic events)."""
        if not self.version_at_least(REQUEST_OBJECT):
            return ctx.request_id
        return {"id": ctx.request_id, "idempotency_key": ctx.idempotency_key}

    def emit_update(
        self, ctx: CallContext, type_: str, before: JsonObject, obj: JsonObject
    ) -> None:
        """An event whose `previous_attributes` are what changed from `before` to `obj`."""
        changed = previous_attributes(
            render(before, self.api_version), render(obj, self.api_version)
        )
        self.emit(ctx, type_, obj, previous=changed)

    def version_at_least(self, gate: str) -> bool:
        return version_at_least(self.api_version, gate)

    # -- customers ------------------------------------------------------------------------
    def add_customer(self, now: float, customer_id: str | None = None, **fields: Any) -> JsonObject:
        """A customer that existed before the scenario: no event, caller-chosen id."""
        with self.lock:
            customer = self._customer(now, customer_id or self.ids.short("cus"), fields)
            self.customers[customer["id"]] = customer
            return customer

    def _customer(self, now: float, customer_id: str, params: Mapping[str, Any]) -> JsonObject:
        return {
            "id": customer_id,
            "object": "customer",
            "balance": 0,
            "created": int(now),
            "currency": None,
            "delinquent": False,
            "description": params.get("description"),
            "email": params.get("email"),
            "livemode": False,
            "metadata": metadata_param(params),
            "name": params.get("name"),
        }

    def create_customer(self, ctx: CallContext, params: JsonObject) -> JsonObject:
        customer = self._customer(ctx.now, self.ids.short("cus"), params)
        self.customers[customer["id"]] = customer
        self.emit(ctx, "customer.created", customer)
        return customer

    def update_customer(self, ctx: CallContext, customer_id: str, params: JsonObject) -> JsonObject:
        """`POST /v1/customers/{id}`: `customer.updated` with the changed attributes, if any.

        `metadata[k]=` (empty) removes `k`, as on Stripe. A call that changes nothing emits no
        event.
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            raise missing("customer", customer_id)
        before = copy.deepcopy(customer)
        for field in ("description", "email", "name"):
            if field in params:
                customer[field] = params[field] or None
        for key, value in metadata_param(params).items():
            if value == "":
                customer["metadata"].pop(key, None)
            else:
                customer["metadata"][key] = value
        if customer != before:
            self.emit_update(ctx, "customer.updated", before, customer)
        return customer

    def _check_customer(self, params: Mapping[str, Any]) -> str | None:
        customer = params.get("customer")
        if customer and customer not in self.customers:
            raise missing("customer", str(customer), param="customer", status=400)
        return str(customer) if customer else None

    # -- charges --------------------------------------------------------------------------
    def _charge(
        self,
        ctx: CallContext,
        *,
        charge_id: str,
        amount: int,
        currency: str,
        customer: str | None,
        payment_method: str,
        description: Any,
        metadata: dict[str, str],
        payment_intent: str | None,
        invoice: str | None = None,
    ) -> JsonObject:
        declined = payment_method in DECLINING_METHODS
        return {
            "id": charge_id,
            "object": "charge",
            "amount": amount,
            "amount_captured": 0 if declined else amount,
            "amount_refunded": 0,
            "balance_transaction": None if declined else self.ids.long("txn"),
            "captured": not declined,
            "created": int(ctx.now),
            "currency": currency,
            "customer": customer,
            "description": description,
            "failure_code": "card_declined" if declined else None,
            "failure_message": "Your card was declined." if declined else None,
            "invoice": invoice,  # before basil only (rendered away from 2025-03-31 on)
            "livemode": False,
            "metadata": dict(metadata),
            "outcome": {
                "network_status": "declined_by_network" if declined else "approved_by_network",
                "reason": "generic_decline" if declined else None,
                "risk_level": "normal",
                "seller_message": "The bank did not return any further details with this decline."
                if declined
                else "Payment complete.",
                "type": "issuer_declined" if declined else "authorized",
            },
            "paid": not declined,
            "payment_intent": payment_intent,
            "payment_method": self.ids.long("pm", version="1"),
            "receipt_url": None,
            "refunded": False,
            "status": "failed" if declined else "succeeded",
        }

    def _settle_charge(self, ctx: CallContext, charge: JsonObject) -> None:
        """Store a charge and emit its event; a declined card ends the call with a 402."""
        self.charges[charge["id"]] = charge
        if charge["status"] == "failed":
            self.emit(ctx, "charge.failed", charge)
            raise card_declined(charge["id"])
        self.emit(ctx, "charge.succeeded", charge)

    def create_charge(self, ctx: CallContext, params: JsonObject) -> JsonObject:
        amount = amount_param(params)
        assert amount is not None
        currency = currency_param(params)
        customer = self._check_customer(params)
        charge = self._charge(
            ctx,
            charge_id=self.ids.long("ch"),
            amount=amount,
            currency=currency,
            customer=customer,
            payment_method=str(params.get("source") or "tok_visa"),
            description=params.get("description"),
            metadata=metadata_param(params),
            payment_intent=None,
        )
        self._settle_charge(ctx, charge)
        return charge

    # -- payment intents ------------------------------------------------------------------
    def new_intent(
        self,
        ctx: CallContext,
        *,
        amount: int,
        currency: str,
        customer: str | None,
        description: Any,
        metadata: dict[str, str],
        payment_method: Any,
        invoice: str | None = None,
    ) -> JsonObject:
        """Store a PaymentIntent and emit `payment_intent.created`."""
        intent_id = self.ids.long("pi")
        intent: JsonObject = {
            "id": intent_id,
            "object": "payment_intent",
            "amount": amount,
            "amount_received": 0,
            "canceled_at": None,
            "cancellation_reason": None,
            "capture_method": "automatic",
            "client_secret": f"{intent_id}_secret_{self.ids.secret()}",
            "confirmation_method": "automatic",
            "created": int(ctx.now),
            "currency": currency,
            "customer": customer,
            "description": description,
            "invoice": invoice,  # before basil only (rendered away from 2025-03-31 on)
            "last_payment_error": None,
            "latest_charge": None,
            "livemode": False,
            "metadata": dict(metadata),
            "payment_method": payment_method,
            "payment_method_types": ["card"],
            "status": "requires_confirmation" if payment_method else "requires_payment_method",
        }
        self.payment_intents[intent_id] = intent
        self.emit(ctx, "payment_intent.created", intent)
        return intent

    def create_payment_intent(self, ctx: CallContext, params: JsonObject) -> JsonObject:
        amount = amount_param(params)
        assert amount is not None
        currency = currency_param(params)
        customer = self._check_customer(params)
        payment_method = params.get("payment_method")
        if truthy(params.get("confirm", "false")) and not payment_method:
            raise ApiError(
                400,
                "You cannot confirm this PaymentIntent because it's missing a payment method.",
                code="payment_intent_unexpected_state",
                param="payment_method",
            )
        intent = self.new_intent(
            ctx,
            amount=amount,
            currency=currency,
            customer=customer,
            description=params.get("description"),
            metadata=metadata_param(params),
            payment_method=payment_method,
        )
        if truthy(params.get("confirm", "false")):
            self.confirm(ctx, intent)
        return intent

    def confirm_payment_intent(
        self, ctx: CallContext, intent_id: str, params: JsonObject
    ) -> JsonObject:
        intent = self.payment_intents.get(intent_id)
        if intent is None:
            raise missing("payment_intent", intent_id, param="intent")
        if params.get("payment_method"):
            intent["payment_method"] = params["payment_method"]
        if not intent["payment_method"]:
            raise ApiError(
                400,
                "You cannot confirm this PaymentIntent because it's missing a payment method.",
                code="payment_intent_unexpected_state",
                param="payment_method",
            )
        if intent["status"] == "succeeded":
            raise ApiError(
                400,
                "This PaymentIntent's payment_method could not be updated because it has a "
                "status of succeeded.",
                code="payment_intent_unexpected_state",
            )
        self.confirm(ctx, intent)
        return intent

    def confirm(self, ctx: CallContext, intent: JsonObject) -> None:
        """Charge `intent`'s payment method; a decline emits its events, then raises the 402."""
        # A charge made by a PaymentIntent shares the intent's id body, as on Stripe.
        charge = self._charge(
            ctx,
            charge_id="ch_" + intent["id"].removeprefix("pi_"),
            amount=intent["amount"],
            currency=intent["currency"],
            customer=intent["customer"],
            payment_method=str(intent["payment_method"]),
            description=intent["description"],
            metadata=intent["metadata"],
            payment_intent=intent["id"],
            invoice=intent.get("invoice"),
        )
        intent["latest_charge"] = charge["id"]
        if charge["status"] == "failed":
            intent["status"] = "requires_payment_method"
            intent["last_payment_error"] = {
                "type": "card_error",
                "code": "card_declined",
                "decline_code": "generic_decline",
                "charge": charge["id"],
                "message": "Your card was declined.",
            }
            self.charges[charge["id"]] = charge
            self.emit(ctx, "charge.failed", charge)
            self.emit(ctx, "payment_intent.payment_failed", intent)
            raise card_declined(charge["id"], payment_intent=copy.deepcopy(intent))
        intent["status"] = "succeeded"
        intent["amount_received"] = intent["amount"]
        intent["payment_method"] = charge["payment_method"]
        self._settle_charge(ctx, charge)
        self.emit(ctx, "payment_intent.succeeded", intent)

    # -- refunds --------------------------------------------------------------------------
    def create_refund(self, ctx: CallContext, params: JsonObject) -> JsonObject:
        charge_id = params.get("charge")
        if not charge_id and params.get("payment_intent"):
            intent = self.payment_intents.get(str(params["payment_intent"]))
            if intent is None:
                raise missing(
                    "payment_intent", str(params["payment_intent"]), "payment_intent", 400
                )
            charge_id = intent["latest_charge"]
        if not charge_id:
            raise ApiError(
                400,
                "One of the following params should be provided for this request: "
                "payment_intent or charge.",
                code="parameter_missing",
            )
        charge = self.charges.get(str(charge_id))
        if charge is None:
            raise missing("charge", str(charge_id), param="charge", status=400)
        remaining = charge["amount_captured"] - charge["amount_refunded"]
        amount = amount_param(params, required=False) or remaining
        if amount > remaining:
            raise ApiError(
                400,
                f"Refund amount ({amount}) is greater than unrefunded amount on charge "
                f"({remaining})",
                code="amount_too_large",
                param="amount",
            )
        refund = {
            "id": self.ids.long("re"),
            "object": "refund",
            "amount": amount,
            "balance_transaction": self.ids.long("txn"),
            "charge": charge["id"],
            "created": int(ctx.now),
            "currency": charge["currency"],
            "metadata": metadata_param(params),
            "payment_intent": charge["payment_intent"],
            "reason": params.get("reason"),
            "status": "succeeded",
        }
        self.refunds[refund["id"]] = refund
        before = copy.deepcopy(charge)
        charge["amount_refunded"] += amount
        charge["refunded"] = charge["amount_refunded"] >= charge["amount_captured"]
        # A card refund succeeds at once, so no `refund.updated` / `charge.refund.updated` follows
        # ("charge.refund.updated: on selected payment methods"). `refund.created` is sent for a
        # refund of a charge only from 2024-10-28.acacia on; before, `charge.refunded` alone.
        # Their relative order is not documented: the charge's event first, as the lab always had.
        self.emit_update(ctx, "charge.refunded", before, charge)
        if self.version_at_least(REFUND_EVENTS_FOR_CHARGES):
            self.emit(ctx, "refund.created", refund)
        return refund

    # -- reads ----------------------------------------------------------------------------
    def retrieve(self, collection: str, object_id: str) -> JsonObject:
        kind, objects = self.collections()[collection]
        found = objects().get(object_id) if collection != "events" else self._event(object_id)
        if found is None:
            raise missing(kind, object_id)
        return found

    def _event(self, event_id: str) -> JsonObject | None:
        return next((e for e in self.events if e["id"] == event_id), None)

    def collections(self) -> dict[str, tuple[str, Callable[[], dict[str, JsonObject]]]]:
        billing = self.billing
        return {
            "customers": ("customer", lambda: self.customers),
            "charges": ("charge", lambda: self.charges),
            "payment_intents": ("payment_intent", lambda: self.payment_intents),
            "refunds": ("refund", lambda: self.refunds),
            "subscriptions": ("subscription", lambda: billing.subscriptions),
            "invoices": ("invoice", lambda: billing.invoices),
            "invoice_payments": ("invoice_payment", lambda: billing.invoice_payments),
            "events": ("event", lambda: {e["id"]: e for e in self.events}),
        }

    def list(self, collection: str, query: JsonObject) -> JsonObject:
        """A Stripe list object, newest first, with Stripe's filters and cursor pagination."""
        kind, objects = self.collections()[collection]
        items = newest_first(objects().values())
        items = [o for o in items if created_matches(o["created"], query.get("created"))]
        if collection == "events":
            items = filter_types(items, query)
        for field in LIST_FILTERS:
            if collection != "events" and query.get(field) and query[field] != "all":
                items = [o for o in items if o.get(field) == query[field]]
        return paginate(items, query, f"/v1/{collection}", kind)


# `GET /v1/<collection>?<field>=` filters (each list endpoint of Stripe takes a subset of them).
LIST_FILTERS = ("customer", "payment_intent", "charge", "subscription", "invoice", "status")
