"""Field realism: a lab incident as hard as a production one.

`run_scenario(name, out, seed, realism="field")` (or `python -m twice.lab run NAME --realism
field`) draws, from the seed, a variant of the scenario (`draw_variant`) and runs it inside a busy
day (`twice.lab.busy_day`). `field_scenario(seed)` draws which scenario a seed is (`FIELD_MIX`), so
a range of seeds is a realistic mix of layers and controls (`python -m twice.lab run drawn
--realism field`).

What a variant draws (all recorded in truth.json's `variant`):
- the scenario's own timings: client timeouts 2-125 s (step_retry, model_reemission), LangGraph
  RetryPolicy backoff, SQS visibility timeouts 30 s-15 min, human pauses (some within the key
  retention: protected), the model's think times; ~15% of the layer scenarios in their fixed form
  (derived key, unknown outcome, effects ledger);
- the provider: clock skew +-1..8 s either sign, which exports exist (events.json always; the
  `stripe logs tail` lines and a request-log CSV in some), whole-second request-log times, the
  account's API version;
- the agent side: the instrumentation (lab GenAI spans, OpenInference, none), the trace format
  (OTLP lines, Jaeger JSON), per-worker span clock skew, whether the queue's receive log exists;
- the busy day: 60-90 other threads interleaved with the incident, neighbours (another customer,
  the same amount and currency, 1-5 s after an incident charge), other threads of the incident's
  own customer, refunds, guest checkouts without a customer (5-40), subscription renewals
  (automatic flows) and dashboard edits.

Some of these need lab APIs being added in parallel; each sits behind one small function below
marked `# seam:` that does today the closest thing available, while the variant records what was
drawn and `variant["applied"]` what the files really hold.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import patch

import stripe

from twice.lab.agent import API_KEY, ToolOptions, Worker
from twice.lab.busy_day import BusyDay, amount_of, enrol_customers
from twice.lab.clock import VirtualClock
from twice.lab.incident import Truth, compact, finish_incident
from twice.lab.jaeger_export import write_jaeger
from twice.lab.lab_run import AMOUNTS, Bench, bench
from twice.lab.scenario_kit import ScenarioResult, agent_time
from twice.lab.stripe_billing import FINALIZE_AFTER_SECONDS
from twice.lab.stripe_server import StripeServer
from twice.lab.stripe_wire import API_VERSION
from twice.lab.truth_detail import (
    Exports,
    IncidentFacts,
    ToolSpan,
    collect_facts,
    events_record_keys,
    expected_findings,
    exported_request_ids,
    tool_spans,
)

# scenario -> weight in a range of field seeds: every layer well represented, controls ~1/4
FIELD_MIX: dict[str, int] = {
    "sdk_retry": 9,
    "sdk_retry_replayed": 6,
    "gateway_retry": 9,
    "step_retry": 11,
    "redelivery": 11,
    "model_reemission": 11,
    "human_pause": 7,
    "control_new_turn": 5,
    "control_renewal": 4,
    "control_same_amount": 5,
    "control_two_subscriptions": 4,
    "control_declined_retry": 5,
}
FIXED_SHARE = 0.15  # layer scenarios drawn in their fixed form
FIXED_FORMS: dict[str, dict[str, Any]] = {
    "sdk_retry": {"key": "derived"},
    "gateway_retry": {"key": "derived"},
    "step_retry": {"key": "derived"},
    "redelivery": {"key": "derived"},
    "model_reemission": {"on_timeout": "unknown"},
    "human_pause": {"effects": "ledger"},
}
# Real Stripe API versions; before 2017-05-25 an Event's `request` is a plain string (no key)
API_VERSIONS_OLD = ("2015-10-16", "2016-07-06", "2017-02-14")
API_VERSIONS = ("2018-02-28", "2019-12-03", "2020-08-27", "2022-11-15", "2023-10-16",
                "2024-06-20", "2025-03-31.basil", API_VERSION)
# lab: the lab's GenAI spans under a run span; openinference: the real OpenInference and
# requests instrumentations at their defaults; callback: a team's own callback handler with
# nothing around the graph run (tool spans are trace roots); none: no spans
INSTRUMENTATIONS = {"lab": 0.30, "openinference": 0.30, "callback": 0.20, "none": 0.20}
TRACE_FORMATS = {"otlp": 0.6, "jaeger": 0.4}
INLINE_CUSTOMERS = 2000
DAY_START = dt.datetime(2025, 1, 6, tzinfo=dt.UTC)
DAY_RANGE = 175  # days: incidents fall in the first half of 2025


def field_scenario(seed: int) -> str:
    """The scenario a field seed stands for (weighted by FIELD_MIX)."""
    rng = random.Random(f"field-scenario:{seed}")
    names = list(FIELD_MIX)
    return rng.choices(names, weights=[FIELD_MIX[n] for n in names])[0]


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _scenario_options(name: str, rng: random.Random) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if name in FIXED_FORMS and rng.random() < FIXED_SHARE:
        options.update(FIXED_FORMS[name])
    if name == "step_retry":
        options["timeout"] = round(_log_uniform(rng, 2.0, 125.0), 1)
        # LangGraph's RetryPolicy: 0.5 s initial, x2, jitter up to +1 s by default
        options["retry_initial"] = rng.choice((0.5, 0.5, 1.0, 2.0))
        options["retry_backoff"] = rng.choice((2.0, 2.0, 1.5))
        options["retry_attempts"] = rng.choice((3, 3, 3, 5))
    elif name == "model_reemission":
        options["timeout"] = round(_log_uniform(rng, 2.0, 125.0), 1)
    elif name == "redelivery":
        # SQS's default 30 s, or what teams set: up to 15 minutes
        options["visibility_timeout"] = (
            30 if rng.random() < 0.25 else int(round(_log_uniform(rng, 30.0, 900.0))))
    elif name == "human_pause" and "effects" not in options:
        within = rng.random() < 0.2  # an answer within the key retention: the key protects it
        options["pause_hours"] = round(rng.uniform(1.0, 20.0) if within
                                       else rng.uniform(24.5, 72.0), 2)
    return options


def draw_variant(name: str, seed: int) -> dict[str, Any]:
    """Every dimension of a field incident, drawn from (scenario, seed) only."""
    rng = random.Random(f"field-variant:{name}:{seed}")
    start = DAY_START + dt.timedelta(days=rng.randrange(DAY_RANGE),
                                     seconds=rng.uniform(0, 86400))
    think_low = round(rng.uniform(0.4, 2.0), 2)
    instrumentation = _pick(rng, INSTRUMENTATIONS)
    workers = rng.randint(3, 6)
    variant: dict[str, Any] = {
        "seed": seed,
        "scenario": name,
        "options": _scenario_options(name, rng),
        "start": start.isoformat(timespec="milliseconds"),
        "think_range": [think_low, round(think_low + rng.uniform(1.5, 12.0), 2)],
        "clock_offset": round(rng.choice((-1, 1)) * rng.uniform(1.0, 8.0), 3),
        "exports": {
            "events": True,
            "stripe_logs": rng.random() < 0.4,
            "request_log": rng.random() < 0.45,
            "queue_log": rng.random() < 0.75,
        },
        "request_log_precision": "s" if rng.random() < 0.7 else "ms",
        "api_version": rng.choice(API_VERSIONS_OLD) if rng.random() < 0.1
        else rng.choice(API_VERSIONS),
        "instrumentation": instrumentation,
        "trace_format": _pick(rng, TRACE_FORMATS),
        "span_clock_offsets": {f"worker-{c}": round(rng.uniform(-1.5, 1.5), 3)
                               for c in "abcdef"},
        "busy_day": {
            "threads": rng.randint(60, 90),
            "customers": rng.randint(120, 240),
            "workers": workers,
            "worker_keys": [rng.choice(("none", "none", "none", "derived"))
                            for _ in range(workers)],
            "neighbours": rng.randint(1, 3),
            "same_customer_threads": rng.randint(1, 3),
            "refunds": rng.randint(0, 3),
        },
        "renewals": _draw_renewals(rng),
        "dashboard_edits": _draw_edits(rng),
    }
    # the model's tool call ids (Anthropic `toolu_01...`, OpenAI `call_...`); a scenario that
    # names its model keeps it
    variant["model_ids"] = rng.choice(("anthropic", "openai"))
    # guest payments the web shop creates in the same window (no customer, common prices)
    variant["busy_day"]["checkouts"] = rng.randint(5, 40)
    # a callback handler's shape: whether it ends a failed tool's span too (the error-path
    # fix), and which workers' spans say the thread (a busy day where some attempts have a
    # thread on their spans and others do not)
    variant["callback"] = {
        "error_spans": rng.random() < 0.5,
        "thread_ids": {f"worker-{c}": rng.random() < 0.4 for c in "abcdef"},
    }
    return variant


def with_fixed(variant: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    """`variant` with the fields of `fixed` set (nested dicts merged key by key, e.g.
    `{"busy_day": {"threads": 12}}` keeps the other busy-day draws); an unknown field is a
    ValueError."""
    out = dict(variant)
    for key, value in fixed.items():
        if key not in variant:
            raise ValueError(f"a field variant has no {key!r}; it has {sorted(variant)}")
        if isinstance(value, dict) and isinstance(variant[key], dict) and key != "options":
            out[key] = with_fixed(variant[key], value)
        else:
            out[key] = value
    return out


def _draw_renewals(rng: random.Random) -> list[dict[str, Any]]:
    """Subscription renewals (automatic flows): some for the incident's own customer inside the
    incident's tool window (same amount or not), others for the day's customers."""
    out = []
    if rng.random() < 0.35:
        out.append({"customer": "incident", "window": "inside_tool_window",
                    "same_amount": rng.random() < 0.5, "position": round(rng.random(), 3),
                    "declined": rng.random() < 0.1})
    for _ in range(rng.randint(0, 4)):
        out.append({"customer": "day", "window": "day", "same_amount": False,
                    "offset_s": round(rng.uniform(-1200, 1200), 1),
                    "amount": rng.choice(AMOUNTS), "declined": rng.random() < 0.1})
    return out


def _draw_edits(rng: random.Random) -> list[dict[str, Any]]:
    kinds = ("customer.updated", "customer.updated", "invoice.sent", "invoice.voided")
    return [{"type": rng.choice(kinds), "customer": rng.choice(("incident", "day", "day")),
             "offset_s": round(rng.uniform(-1800, 1800), 1)}
            for _ in range(rng.randint(0, 4))]


# ---------------------------------------------------------------------------- running


@contextmanager
def virtual_retry_sleeps(clock: VirtualClock) -> Iterator[None]:
    """LangGraph's RetryPolicy sleeps with `time.sleep`; on the lab's virtual clock the backoff
    is a shift of the clock instead of a real wait (as the lab does for client timeouts), so any
    backoff costs no wall time."""
    import langgraph.pregel._retry as retry_module

    real = retry_module.time

    class _VirtualTime:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            clock.advance(seconds)

    with patch.object(retry_module, "time", _VirtualTime()):
        yield


def run_field(
    name: str,
    func: Callable[..., ScenarioResult],
    out: Path,
    seed: int,
    *,
    noise: int | None = None,
    dsn: str | None = None,
    start: dt.datetime | None = None,
    options: dict[str, Any] | None = None,
    repeatable: bool = False,
    fixed: dict[str, Any] | None = None,
) -> tuple[Path, StripeServer]:
    """`fixed`: variant fields set instead of drawn (`with_fixed`; drills fix what each level
    teaches); `repeatable`: as in `bench`."""
    from twice.lab.scenarios import check_options  # this module is imported by twice.lab.scenarios

    variant = with_fixed(draw_variant(name, seed), fixed or {})
    chosen = {**variant["options"], **(options or {})}
    check_options(name, func, chosen, dsn)
    variant["options"] = chosen
    when = start or dt.datetime.fromisoformat(variant["start"])
    day_rng = random.Random(f"field-day:{name}:{seed}")
    bench_seed = zlib.crc32(f"field:{name}:{seed}".encode())
    with bench(out, seed=bench_seed, start=when, noise=noise, dsn=dsn,
               clock_offset=variant["clock_offset"], repeatable=repeatable,
               **_server_options(variant)) as b:
        applied = _instrumentation(b, variant)
        b.think_range = (variant["think_range"][0], variant["think_range"][1])
        b.model.id_style = variant["model_ids"]
        # the scenario's own noise draws from an account's worth of customers, not a dozen
        b.noise_customers = enrol_customers(b, random.Random(f"field-inline:{name}:{seed}"),
                                            INLINE_CUSTOMERS)
        with virtual_retry_sleeps(b.clock):
            truth, story = func(b, **chosen)
        resolved = _busy_day(b, truth, variant, day_rng)
        _sort_provider_records(b.server)
        facts = collect_facts(b.server, b.checkpointer, truth.threads)
        server = b.server
    # after the checkpointer is closed and every worker's spans are flushed
    compact(out / "checkpoints.sqlite")
    exports = variant["exports"]
    server.write_events(out / "events.json")
    if exports["request_log"]:
        applied["request_log_precision"] = _request_log(server, out / "request_log.csv", variant)
    if exports["stripe_logs"]:
        server.write_logs_tail(out / "stripe_logs.jsonl")
    if not exports["queue_log"]:
        for log in ("sqs.jsonl", "queue.jsonl"):
            (out / log).unlink(missing_ok=True)
    # the tool spans as the workers exported them, before they are converted or dropped
    spans = tool_spans(out / "spans.jsonl") if (out / "spans.jsonl").exists() else []
    applied["trace_format"] = _span_export(out, variant, applied["instrumentation"])
    variant.update(resolved)
    variant["applied"] = applied
    variant["pending_seams"] = _pending(variant, applied)
    _field_truth(truth, facts, variant, out, spans)
    finish_incident(out, server, truth, story, facts.requests, detailed=True,
                    extra=_readme_section(name, seed, variant))
    return out, server


def _busy_day(b: Bench, truth: Truth, variant: dict[str, Any],
              rng: random.Random) -> dict[str, Any]:
    day = variant["busy_day"]
    busy = BusyDay(b, rng, truth.threads)
    busy.hire(day["workers"], day["worker_keys"])
    busy.enrol(day["customers"])
    runs = busy.noise_runs(day["threads"])
    runs += busy.same_customer_runs(truth.customer, day["same_customer_threads"])
    ran = busy.run_all(runs)
    neighbours = busy.neighbours(day["neighbours"], truth.customer)
    refunds = busy.refunds(day["refunds"], [r.thread for r in runs if r.kind == "noise"])
    checkouts = busy.checkouts(day["checkouts"])
    renewals = _renewals(b, busy, truth, variant)
    edits = _dashboard_edits(b, busy, truth, variant)
    busy.back_to_latest()
    return {"busy_day_run": {**ran, "workers": busy.record["workers"]},
            "neighbours_run": neighbours, "refunds_run": refunds, "checkouts_run": checkouts,
            "renewals_resolved": renewals, "dashboard_edits_resolved": edits}


def _sort_provider_records(server: StripeServer) -> None:
    """The provider's records in time order, whatever order the runs were executed in (a
    production export is time-ordered). Stable: events of one request keep their order."""
    with server.state.lock:
        server.state.events.sort(key=lambda e: e["created"])
    server.requests.sort(key=lambda r: r.created)


def _field_truth(truth: Truth, facts: IncidentFacts, variant: dict[str, Any], out: Path,
                 spans: list[ToolSpan]) -> None:
    succeeded = [pi for pi in facts.intents if pi.get("status") == "succeeded"]
    truth.effects_created = len(succeeded)
    truth.payment_intents = [pi["id"] for pi in succeeded]
    truth.realism = "field"
    truth.request_ids = facts.request_ids
    if truth.layer != "none" and len(facts.requests) < 2:
        variant["truth_note"] = "one request reached the provider: no duplicate"
        truth.layer = "none"
    if truth.layer != "none" and truth.effects_created < 2:
        truth.protected = True  # re-executed, and the provider deduplicated it
    applied = variant["applied"]
    exports = Exports(
        request_log=bool(variant["exports"]["request_log"]),
        spans=applied["instrumentation"] != "none",
        events_record_keys=events_record_keys(applied["api_version"]),
        span_keys=applied["instrumentation"] == "lab",
    )
    truth.expected_findings = expected_findings(facts, exports, spans,
                                                applied["span_clock_offsets"])
    truth.exported_request_ids = exported_request_ids(out, facts.request_ids)
    truth.variant = variant


def _pending(variant: dict[str, Any], applied: dict[str, Any]) -> list[str]:
    """The drawn dimensions the files do not hold yet (their seam is not wired)."""
    pending = []
    if variant["instrumentation"] != applied["instrumentation"]:
        pending.append("instrumentation")
    spans = applied["trace_format"] is not None  # no spans: no format, no span clocks
    if spans and variant["trace_format"] != applied["trace_format"]:
        pending.append("trace_format")
    if variant["api_version"] != applied["api_version"]:
        pending.append("api_version")
    if variant["exports"]["request_log"] and \
            variant["request_log_precision"] != applied.get("request_log_precision"):
        pending.append("request_log_precision")
    if spans and any(variant["span_clock_offsets"].values()) and \
            not applied["span_clock_offsets"]:
        pending.append("span_clock_offsets")
    if variant["renewals"] and not applied["renewals"]:
        pending.append("renewals")
    if variant["dashboard_edits"] and not applied["dashboard_edits"]:
        pending.append("dashboard_edits")
    return pending


# ---------------------------------------------------------------------------- seams
# Each function below is the one place a lab API being added in parallel plugs in.


def _server_options(variant: dict[str, Any]) -> dict[str, Any]:
    """Keyword options for `bench()`: the lab Stripe server runs the account's API version
    (events shaped by it: before 2017-05-25 `request` is a plain string)."""
    return {"server_options": {"api_version": variant["api_version"]}}


def _instrumentation(b: Bench, variant: dict[str, Any]) -> dict[str, Any]:
    """How the workers are instrumented (lab GenAI spans, the real OpenInference and requests
    instrumentations, or none) and how far each span host's clock runs off; returns what the
    files will hold (`applied`)."""
    make = b.worker
    offsets = variant["span_clock_offsets"]

    callback = variant.get("callback") or {}

    def worker(name: str, tool: ToolOptions, **kw: Any) -> Worker:
        if variant["instrumentation"] == "callback":
            kw.setdefault("error_spans", bool(callback.get("error_spans")))
            kw.setdefault("span_thread_ids",
                          bool((callback.get("thread_ids") or {}).get(name, False)))
        return make(name, tool, instrumentation=variant["instrumentation"],
                    span_clock_offset=offsets.get(name, 0.0), **kw)

    b.worker = worker  # type: ignore[method-assign]
    spans = variant["instrumentation"] != "none"
    return {
        "instrumentation": variant["instrumentation"],
        **({"callback": callback} if variant["instrumentation"] == "callback" else {}),
        "span_clock_offsets": dict(offsets) if spans else {},
        "api_version": variant["api_version"],
        "renewals": bool(variant["renewals"]),
        "dashboard_edits": bool(variant["dashboard_edits"]),
    }


def _renewals(b: Bench, busy: BusyDay, truth: Truth,
              variant: dict[str, Any]) -> list[dict[str, Any]]:
    """Subscription renewals, paid at their drawn times (the invoice made an hour before, as
    Stripe drafts it): automatic flows whose events have `request.id` null and no request-log
    row, some for the incident's own customer inside its tool window."""
    out: list[dict[str, Any]] = []
    incident = busy.incident
    for drawn in variant["renewals"]:
        if drawn["customer"] == "incident":
            if not incident:
                continue
            first, last = agent_time(b, incident[0]), agent_time(b, incident[-1])
            window = max((last - first).total_seconds(), 5.0)
            at = first + dt.timedelta(seconds=drawn["position"] * window)
            amount = amount_of(incident[0])[0] if drawn["same_amount"] else \
                next(a for a in AMOUNTS if a != amount_of(incident[0])[0])
            customer = truth.customer
        else:
            anchor = busy.anchors[0]
            at = anchor + dt.timedelta(seconds=drawn["offset_s"])
            amount = drawn["amount"]
            customer = busy.customers[len(out) % len(busy.customers)] if busy.customers else ""
        if not customer:
            continue
        sub = b.server.add_subscription(customer, amount, "usd")
        b.travel_to(at - dt.timedelta(seconds=FINALIZE_AFTER_SECONDS))
        made = b.server.renew(sub, declined=drawn["declined"])
        out.append({"customer": customer, "amount": amount, "currency": "usd",
                    "at": at.isoformat(timespec="milliseconds"),
                    "declined": drawn["declined"], "applied": True, **made})
    return out


def _dashboard_edits(b: Bench, busy: BusyDay, truth: Truth,
                     variant: dict[str, Any]) -> list[dict[str, Any]]:
    """Dashboard-style edits, each an API request with a request id: `customer.updated`,
    `invoice.sent` (an invoice of the day's renewals) and `invoice.voided` (an open one: a
    declined renewal's; without one, the invoice is sent instead)."""
    client = stripe.StripeClient(API_KEY, base_addresses={"api": b.server.url},
                                 max_network_retries=0)
    invoices = sorted(b.server.invoices.values(), key=lambda i: i["created"])
    out: list[dict[str, Any]] = []
    for drawn in variant["dashboard_edits"]:
        at = busy.anchors[0] + dt.timedelta(seconds=drawn["offset_s"])
        customer = truth.customer if drawn["customer"] == "incident" or not busy.customers \
            else busy.customers[len(out) % len(busy.customers)]
        b.travel_to(at)
        kind = drawn["type"]
        target = customer
        if kind == "customer.updated":
            client.v1.customers.update(customer, {"metadata": {"note": f"edit {len(out)}"}})
        else:
            open_ = [i for i in invoices if i["status"] == "open"]
            sendable = [i for i in invoices if i["status"] != "void"]
            pool = open_ if kind == "invoice.voided" and open_ else sendable
            if not pool:
                continue
            kind = kind if pool is open_ else "invoice.sent"
            target = str(pool[len(out) % len(pool)]["id"])
            if kind == "invoice.voided":
                client.v1.invoices.void_invoice(target)
            else:
                client.v1.invoices.send_invoice(target)
        out.append({"type": kind, "customer": customer, "object": target,
                    "at": at.isoformat(timespec="milliseconds"), "applied": True})
    return out


def _request_log(server: StripeServer, path: Path, variant: dict[str, Any]) -> str:
    """The request-log CSV (a Dashboard export has whole seconds); returns the precision."""
    precision = variant["request_log_precision"]
    server.write_request_log(path, precision=precision)
    return str(precision)


def _span_export(out: Path, variant: dict[str, Any], instrumentation: str) -> str | None:
    """Ship the spans as the variant says: OTLP JSON lines as the collector writes them, or what
    Jaeger's query API returns; returns the format written (None: no spans)."""
    spans = out / "spans.jsonl"
    if instrumentation == "none" or not spans.exists():
        spans.unlink(missing_ok=True)
        return None
    sort_span_lines(spans)
    if variant["trace_format"] == "jaeger":
        write_jaeger(spans, out / "spans.jaeger.json")
        spans.unlink()
        return "jaeger"
    return "otlp"


def sort_span_lines(path: Path) -> None:
    """OTLP JSON lines in the order a collector writes them: by the time each span ended."""
    if not path.exists():
        return
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def ended(line: str) -> int:
        doc = json.loads(line)
        ends = [int(s["endTimeUnixNano"]) for r in doc.get("resourceSpans", [])
                for sc in r.get("scopeSpans", []) for s in sc.get("spans", [])]
        return min(ends) if ends else 0

    path.write_text("".join(line + "\n" for line in sorted(lines, key=ended)), encoding="utf-8")


def _readme_section(name: str, seed: int, variant: dict[str, Any]) -> str:
    opts = ", ".join(f"`{k}={v}`" for k, v in variant["options"].items()) or "(defaults)"
    shipped = [k for k, v in variant["exports"].items() if v]
    day = variant["busy_day"]
    pending = ", ".join(variant["pending_seams"]) or "none"
    return f"""
## Field realism

Generated by `python -m twice.lab run {name} --realism field --seed {seed}`: the scenario's variant
and a busy day around it, drawn from the seed (all of it in truth.json's `variant`).

- scenario options: {opts}
- provider clock {variant['clock_offset']:+g} s from the agent's; exports drawn:
  {', '.join(shipped)}
- {day['threads']} other threads interleaved in the window, {day['neighbours']} neighbour(s)
  charged the same amount 1-5 s after an incident charge, {day['same_customer_threads']}
  other thread(s) of the same customer, {day['refunds']} refund(s), {day['checkouts']} guest
  checkout(s) without a customer
- instrumentation drawn: {variant['instrumentation']}, trace format: {variant['trace_format']},
  API version: {variant['api_version']}; drawn but not yet in the files: {pending}
"""
