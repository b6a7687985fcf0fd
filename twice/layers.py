"""The five layers that can execute one intended call twice: one table every part reads.

Each row of `LAYERS` holds what twice knows about a layer: its plain words, the gap bands it
usually lands in, the fingerprints that give it away, its fix (and a code example), how bad it
is to have found it, and its colour in charts. The verdict rules (`twice.verdict`), the
findings, the charts, the reports and the drills all read this table; nothing else restates it.
"""

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

DERIVED_KEY_FIX = (
    'derive the idempotency key from what every re-execution re-reads: '
    'sha256(f"{thread_id}:{tool_call_id}").hexdigest()[:32], never uuid4() inside the tool; '
    "then check in the provider's log that the key reached the wire and is identical on both "
    "attempts"
)


@dataclass(frozen=True)
class Remedy:
    """One fix, as a short choice (drills) and in full (verdicts)."""

    short: str
    text: str


REMEDIES: dict[str, Remedy] = {
    "derived_key": Remedy("derive the idempotency key from thread_id:tool_call_id",
                          DERIVED_KEY_FIX[0].upper() + DERIVED_KEY_FIX[1:] + "."),
    "client_key": Remedy(
        "send a key the HTTP client reuses on its own retries",
        "Send an Idempotency-Key that the client reuses on its own retries (stripe-python "
        "does; a hand-rolled client must set it) and " + DERIVED_KEY_FIX + "."),
    "proxy_no_retry": Remedy(
        "stop the proxy retrying non-idempotent POSTs",
        "Stop the proxy from retrying non-idempotent POSTs to the provider (Envoy/Istio retry "
        "policy: no retry_on reset/5xx for these routes), or make the resend harmless: "
        + DERIVED_KEY_FIX + "."),
    "unknown_outcome": Remedy(
        "report a timed-out create as unknown, add a status lookup",
        "Treat a timeout on a create call as an unknown outcome, not a failure: return "
        '{"status": "unknown", ...} to the model and give the agent a status-lookup tool keyed '
        "by the derived key. No idempotency key can catch the model asking twice."),
    "visibility_timeout": Remedy(
        "raise the queue's visibility timeout above the run time",
        "A resumed run re-executes the tool with the same tool_call_id: " + DERIVED_KEY_FIX
        + "; keep the visibility timeout above the run time (or extend it while working), and "
        "record the agent's own effects durably for resumes longer than the key retention."),
    "effects_record": Remedy(
        "keep a durable record of the agent's own effects, check it first",
        "Keep a durable record of the agent's own effects keyed by the derived key (e.g. a "
        "table beside the checkpoints) and check it before any create that resumes after the "
        "provider's key retention, or look the object up by its metadata first."),
    "export_evidence": Remedy(
        "export the missing evidence and re-run",
        "Export the missing evidence (checkpoints, spans with request ids, the provider's "
        "request log with idempotency keys) and re-run; meanwhile " + DERIVED_KEY_FIX + "."),
    "nothing": Remedy("nothing to fix: no second charge was made by a re-execution",
                      "Nothing to change: the provider created one effect per intended call."),
}

_KEYED_CALL = (
    "def charge_subscription(customer_id, amount, *, config):\n"
    "    thread_id = config['configurable']['thread_id']\n"
    "    key = hashlib.sha256(f'{thread_id}:{tool_call_id}'.encode()).hexdigest()[:32]\n"
    "    return client.v1.payment_intents.create(params, options={'idempotency_key': key})"
)


@dataclass(frozen=True)
class LayerInfo:
    layer: Layer
    plain: str  # what re-executed, in plain words
    home: frozenset[Band]  # where its constants put the gap: the usual suspect there
    bands: frozenset[Band]  # where its gap may land; elsewhere lowers confidence
    fingerprints: str  # what gives it away, in the evidence
    fix: str  # the fix a verdict states
    remedies: frozenset[str]  # the REMEDIES that stop its second effect
    severity: int  # 0 = worst to have found (unprotected layers first in summaries)
    colour: str  # Okabe-Ito: distinguishable with the common colour-vision deficiencies
    code: str | None = None  # a code example of the fix


LAYERS: dict[Layer, LayerInfo] = {info.layer: info for info in (
    LayerInfo(
        Layer.REDELIVERY,
        "the queue handed the run to a worker again and it resumed from its checkpoint",
        frozenset({Band.MINUTES, Band.BEYOND_RETENTION}),
        frozenset({Band.MINUTES, Band.BEYOND_RETENTION}),
        "the same tool_call_id minutes apart, a new run (another trace, another worker), a "
        "queue receive/delivery count above 1",
        REMEDIES["visibility_timeout"].text, frozenset({"derived_key", "visibility_timeout"}),
        0, "#D55E00", _KEYED_CALL),
    LayerInfo(
        Layer.STEP_RETRY, "the agent framework re-ran the tool step after it failed",
        frozenset({Band.TENS_OF_SECONDS}), frozenset({Band.TENS_OF_SECONDS, Band.SECONDS}),
        "the same tool_call_id, a new tool execution in the same run, a new request id and "
        "(a key made inside the tool) a new key, about a client timeout plus backoff apart",
        "The framework's retry re-runs the whole tool, so a key made inside the tool changes: "
        + DERIVED_KEY_FIX + ".", frozenset({"derived_key"}), 1, "#E69F00", _KEYED_CALL),
    LayerInfo(
        Layer.MODEL_REEMISSION, "the model read a failure and asked for the same call again",
        frozenset({Band.TENS_OF_SECONDS}), frozenset({Band.SECONDS, Band.TENS_OF_SECONDS}),
        "a different tool_call_id with the same tool and arguments, right after a tool result "
        "that reported failure or timeout",
        REMEDIES["unknown_outcome"].text, frozenset({"unknown_outcome"}), 2, "#CC79A7", (
            "except stripe.APIConnectionError:\n"
            "    # the provider may have committed: do not say 'failed'\n"
            "    return {'status': 'unknown', 'idempotency_key': key,\n"
            "            'next': 'call get_charge_status(idempotency_key) before retrying'}")),
    LayerInfo(
        Layer.GATEWAY_RETRY,
        "a proxy or gateway between the agent and the provider resent the request",
        frozenset({Band.SECONDS}), frozenset({Band.SECONDS}),
        "one client HTTP span but two provider requests with identical bodies (and keys); "
        "x-envoy-attempt-count >= 2 where the proxy stamps it",
        REMEDIES["proxy_no_retry"].text, frozenset({"proxy_no_retry", "derived_key"}), 3,
        "#56B4E9", _KEYED_CALL),
    LayerInfo(
        Layer.SDK_RETRY, "the HTTP client / SDK resent the same request",
        frozenset({Band.SECONDS}), frozenset({Band.SECONDS}),
        "two client HTTP attempts inside one tool execution (http.request.resend_count >= 1), "
        "the same key on both when one was set, seconds apart",
        REMEDIES["client_key"].text, frozenset({"client_key", "derived_key"}), 4, "#0072B2",
        _KEYED_CALL),
    LayerInfo(
        Layer.UNKNOWN, "the evidence does not say which layer repeated the call",
        frozenset(), frozenset(Band), "no fingerprint of any layer",
        REMEDIES["export_evidence"].text, frozenset({"derived_key"}), 5, "#999999"),
)}

# Worst first: the order of "worst layer" summaries.
BY_SEVERITY: tuple[Layer, ...] = tuple(sorted(LAYERS, key=lambda layer: LAYERS[layer].severity))


def usual_suspects(band: Band) -> tuple[Layer, ...]:
    """The layers whose constants put their gap in `band` (timing-only guesses, chart labels),
    in the order of `Layer`: the first is the guess when nothing but timing is known."""
    return tuple(layer for layer in Layer if band in LAYERS[layer].home)
