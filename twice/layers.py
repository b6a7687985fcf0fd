"""The five layers that can execute one intended call twice, the time bands, and their fixes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Layer(StrEnum):
    SDK_RETRY = "sdk_retry"
    GATEWAY_RETRY = "gateway_retry"
    STEP_RETRY = "step_retry"
    REDELIVERY = "redelivery"
    MODEL_REEMISSION = "model_reemission"
    UNKNOWN = "unknown"


class Band(StrEnum):
    SECONDS = "seconds"
    TENS_OF_SECONDS = "tens_of_seconds"
    MINUTES = "minutes"
    BEYOND_RETENTION = "beyond_retention"


@dataclass(frozen=True)
class Bands:
    """Upper edges of the gap bands, in seconds. `retention` is the provider's key retention."""

    seconds: float = 10.0
    tens_of_seconds: float = 120.0
    retention: float = 24 * 3600.0

    def classify(self, gap_seconds: float) -> Band:
        if gap_seconds < self.seconds:
            return Band.SECONDS
        if gap_seconds < self.tens_of_seconds:
            return Band.TENS_OF_SECONDS
        if gap_seconds <= self.retention:
            return Band.MINUTES
        return Band.BEYOND_RETENTION


# Provider idempotency-key retention, seconds (domain.md).
KEY_RETENTION = {"stripe": 24 * 3600.0, "paypal": 6 * 3600.0, "adyen": 31 * 24 * 3600.0}

# Where each layer's gap usually lands; a gap elsewhere lowers confidence, never the layer.
TYPICAL_BANDS: dict[Layer, frozenset[Band]] = {
    Layer.SDK_RETRY: frozenset({Band.SECONDS}),
    Layer.GATEWAY_RETRY: frozenset({Band.SECONDS}),
    Layer.STEP_RETRY: frozenset({Band.TENS_OF_SECONDS, Band.SECONDS}),
    Layer.REDELIVERY: frozenset({Band.MINUTES, Band.BEYOND_RETENTION}),
    Layer.MODEL_REEMISSION: frozenset({Band.SECONDS, Band.TENS_OF_SECONDS}),
    Layer.UNKNOWN: frozenset(Band),
}

# The layers whose constants put them in a band, for timing-only guesses and chart labels.
BAND_LAYERS: dict[Band, tuple[Layer, ...]] = {
    Band.SECONDS: (Layer.SDK_RETRY, Layer.GATEWAY_RETRY),
    Band.TENS_OF_SECONDS: (Layer.STEP_RETRY, Layer.MODEL_REEMISSION),
    Band.MINUTES: (Layer.REDELIVERY,),
    Band.BEYOND_RETENTION: (Layer.REDELIVERY,),
}

PLAIN_WORDS: dict[Layer, str] = {
    Layer.SDK_RETRY: "the HTTP client / SDK resent the same request",
    Layer.GATEWAY_RETRY: "a proxy or gateway between the agent and the provider resent the request",
    Layer.STEP_RETRY: "the agent framework re-ran the tool step after it failed",
    Layer.REDELIVERY: (
        "the queue handed the run to a worker again and it resumed from its checkpoint"),
    Layer.MODEL_REEMISSION: "the model read a failure and asked for the same call again",
    Layer.UNKNOWN: "the evidence does not say which layer repeated the call",
}

DERIVED_KEY_FIX = (
    'derive the idempotency key from what every re-execution re-reads: '
    'sha256(f"{thread_id}:{tool_call_id}").hexdigest()[:32], never uuid4() inside the tool; '
    "then check in the provider's log that the key reached the wire and is identical on both "
    "attempts"
)

FIXES: dict[Layer, str] = {
    Layer.SDK_RETRY: (
        "Send an Idempotency-Key that the client reuses on its own retries (stripe-python does; "
        "a hand-rolled client must set it) and " + DERIVED_KEY_FIX + "."
    ),
    Layer.GATEWAY_RETRY: (
        "Stop the proxy from retrying non-idempotent POSTs to the provider (Envoy/Istio retry "
        "policy: no retry_on reset/5xx for these routes), or make the resend harmless: "
        + DERIVED_KEY_FIX + "."
    ),
    Layer.STEP_RETRY: (
        "The framework's retry re-runs the whole tool, so a key made inside the tool changes: "
        + DERIVED_KEY_FIX + "."
    ),
    Layer.REDELIVERY: (
        "A resumed run re-executes the tool with the same tool_call_id: " + DERIVED_KEY_FIX
        + "; keep the visibility timeout above the run time (or extend it while working), and "
        "record the agent's own effects durably for resumes longer than the key retention."
    ),
    Layer.MODEL_REEMISSION: (
        "Treat a timeout on a create call as an unknown outcome, not a failure: return "
        '{"status": "unknown", ...} to the model and give the agent a status-lookup tool keyed '
        "by the derived key. No idempotency key can catch the model asking twice."
    ),
    Layer.UNKNOWN: (
        "Export the missing evidence (checkpoints, spans with request ids, the provider's request "
        "log with idempotency keys) and re-run; meanwhile " + DERIVED_KEY_FIX + "."
    ),
}

CODE_EXAMPLES: dict[Layer, str] = {
    Layer.STEP_RETRY: (
        "def charge_subscription(customer_id, amount, *, config):\n"
        "    thread_id = config['configurable']['thread_id']\n"
        "    key = hashlib.sha256(f'{thread_id}:{tool_call_id}'.encode()).hexdigest()[:32]\n"
        "    return client.v1.payment_intents.create(params, options={'idempotency_key': key})"
    ),
    Layer.MODEL_REEMISSION: (
        "except stripe.APIConnectionError:\n"
        "    # the provider may have committed: do not say 'failed'\n"
        "    return {'status': 'unknown', 'idempotency_key': key,\n"
        "            'next': 'call get_charge_status(idempotency_key) before retrying'}"
    ),
}
CODE_EXAMPLES[Layer.REDELIVERY] = CODE_EXAMPLES[Layer.STEP_RETRY]
CODE_EXAMPLES[Layer.SDK_RETRY] = CODE_EXAMPLES[Layer.STEP_RETRY]
CODE_EXAMPLES[Layer.GATEWAY_RETRY] = CODE_EXAMPLES[Layer.STEP_RETRY]
