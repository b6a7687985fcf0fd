"""A busy day around an incident: the other agent threads that ran in the same window.

Each noise thread runs WHOLE at its own start time: the virtual clock travels there (backwards
too) before the run and LangGraph's uuid6 guard is reset, so the thread's checkpoints, spans and
provider records carry its own times, interleaved with the incident's and with each other's. The
runs are executed in a shuffled order, not in time order: every export is sorted by time
afterwards (`twice.lab.field`), and nothing in a run depends on what ran before it.

Besides ordinary charges of many customers, a busy day holds what makes production hard:
- neighbours: another customer charged the identical amount and currency 1-5 s after one of the
  incident's charges, by another thread;
- the incident's own customer charged other amounts by other threads the same day;
- refunds of some of the day's charges (a support agent through the API, no agent thread);
- web checkouts: PaymentIntents another service creates without a customer (guest payments of
  the same common prices), through the API with the SDK's own keys, no agent thread.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import stripe

from twice.formats import iso
from twice.lab.agent import API_KEY, PAYMENT_METHOD, KeyMode, ToolOptions, Worker
from twice.lab.lab_run import AMOUNTS, Bench
from twice.lab.model import BASE62
from twice.lab.scenario_kit import agent_time, charges_of, land_run_at
from twice.lab.stripe_server import RequestRecord

WORKER_NAMES = ("worker-a", "worker-b", "worker-c", "worker-d", "worker-e", "worker-f")
NEAR_S = 150.0  # most threads start within this of one of the incident's charges ...
FAR_S = 1200.0  # ... the others anywhere within this
NEAR_SHARE = 0.6


@dataclass(frozen=True)
class Run:
    start: dt.datetime
    worker: Worker
    thread: str
    text: str
    kind: str  # noise | same_customer


def _thread(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _chars(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(BASE62) for _ in range(n))


def charge_text(customer: str, amount: int, currency: str, rng: random.Random) -> str:
    note = rng.choice(("monthly renewal", "annual renewal", "seat added", "plan change"))
    return (f"Please charge {customer} {amount} {currency} for subscription "
            f"sub_{_chars(rng, 24)} ({note}).")


def enrol_customers(b: Bench, rng: random.Random, count: int) -> list[str]:
    """`count` customers of the account (they existed before the window: no events)."""
    customers = []
    for _ in range(count):
        customer = "cus_" + _chars(rng, 14)
        b.server.add_customer(customer, email=f"{customer[4:12].lower()}@example.com")
        customers.append(customer)
    return customers


def amount_of(record: RequestRecord) -> tuple[int, str]:
    body = dict(parse_qsl(record.body))
    return int(body["amount"]), body["currency"]


class BusyDay:
    """Draws and runs the other threads of an incident's window (see the module docstring)."""

    def __init__(self, b: Bench, rng: random.Random, incident_threads: list[str]) -> None:
        self.b = b
        self.rng = rng
        self.incident = [r for t in incident_threads for r in charges_of(b, t)]
        self.incident.sort(key=lambda r: r.created)
        self.anchors = [agent_time(b, r) for r in self.incident] or [b.clock.now()]
        self.latest = b.clock.now()
        self.workers: list[Worker] = []
        self.customers: list[str] = []
        self.used: set[str] = set()  # customers an ordinary charge of the day went to
        self.record: dict[str, Any] = {}

    # -- the day's cast -----------------------------------------------------------------------
    def hire(self, count: int, keys: list[KeyMode]) -> None:
        """`count` worker processes serving the day's other threads (names the incident's workers
        share: one pool serves every thread), each with its own key habit."""
        names = WORKER_NAMES[:count]
        for name, key in zip(names, keys, strict=True):
            self.workers.append(self.b.worker(name, ToolOptions(client="stripe", key=key)))
        self.record["workers"] = {n: k for n, k in zip(names, keys, strict=True)}

    def enrol(self, count: int) -> None:
        """The day's customers (they existed before: no events)."""
        self.customers += enrol_customers(self.b, self.rng, count)
        self.record["customers"] = count

    # -- runs -----------------------------------------------------------------------------------
    def _start_near_incident(self) -> dt.datetime:
        anchor = self.rng.choice(self.anchors)
        spread = NEAR_S if self.rng.random() < NEAR_SHARE else FAR_S
        return anchor + dt.timedelta(seconds=self.rng.uniform(-spread, spread))

    def noise_runs(self, count: int) -> list[Run]:
        """Ordinary charges, one customer each: on a real day one customer is rarely charged the
        same amount twice (the cases that are hard on purpose are drawn separately)."""
        runs = []
        for customer in self.rng.sample(self.customers, min(count, len(self.customers))):
            self.used.add(customer)
            amount = self.rng.choice(AMOUNTS)
            currency = self.rng.choice(("usd", "usd", "usd", "eur"))
            runs.append(Run(self._start_near_incident(), self.rng.choice(self.workers),
                            _thread(self.rng), charge_text(customer, amount, currency, self.rng),
                            "noise"))
        return runs

    def same_customer_runs(self, customer: str, count: int) -> list[Run]:
        """Other threads of the incident's customer, other amounts, the same day."""
        taken = {amount_of(r)[0] for r in self.incident}
        amounts = [a for a in AMOUNTS if a not in taken] or list(AMOUNTS)
        runs = []
        for i in range(count):
            anchor = self.rng.choice(self.anchors)
            # the first within minutes of the incident, the others hours away
            seconds = self.rng.uniform(60, 600) if i == 0 else self.rng.uniform(1800, 8 * 3600)
            start = anchor + dt.timedelta(seconds=seconds * self.rng.choice((-1, 1)))
            amount = self.rng.choice(amounts)
            runs.append(Run(start, self.rng.choice(self.workers), _thread(self.rng),
                            charge_text(customer, amount, "usd", self.rng), "same_customer"))
        return runs

    def run_all(self, runs: list[Run]) -> dict[str, Any]:
        """Each run whole at its own start time, in a shuffled order."""
        order = list(runs)
        self.rng.shuffle(order)
        for run in order:
            self.b.travel_to(run.start)
            run.worker.run(run.thread, run.text)
            self.latest = max(self.latest, self.b.clock.now())
        ends = {r.thread: self._span(r.thread) for r in runs}
        return {
            "threads": len(runs),
            "first_start": iso(min(r.start for r in runs), "milliseconds") if runs else None,
            "last_start": iso(max(r.start for r in runs), "milliseconds") if runs else None,
            "run_order": "shuffled",
            "same_customer": [
                {"thread": r.thread, "start": iso(r.start, "milliseconds"),
                 "charges": ends[r.thread]}
                for r in runs if r.kind == "same_customer"
            ],
        }

    def _span(self, thread: str) -> list[dict[str, Any]]:
        return [{"request_id": r.request_id, "amount": amount_of(r)[0],
                 "at": iso(agent_time(self.b, r), "milliseconds")}
                for r in charges_of(self.b, thread)]

    def neighbours(self, count: int, incident_customer: str) -> list[dict[str, Any]]:
        """Other customers charged the same amount and currency 1-5 s after an incident charge."""
        if not self.incident:
            return []
        others = [c for c in self.customers if c != incident_customer and c not in self.used]
        out = []
        for _ in range(count):
            anchor = self.rng.choice(self.incident)
            amount, currency = amount_of(anchor)
            customer = self.rng.choice(others)
            wanted = self.rng.uniform(1.0, 5.0)
            at = agent_time(self.b, anchor) + dt.timedelta(seconds=wanted)
            thread = _thread(self.rng)
            worker = self.rng.choice(self.workers)
            land_run_at(self.b, worker, thread, charge_text(customer, amount, currency, self.rng),
                        at)
            self.latest = max(self.latest, self.b.clock.now())
            landed = charges_of(self.b, thread)
            gap = landed[0].created - anchor.created if landed else None
            out.append({"thread": thread, "customer": customer, "amount": amount,
                        "currency": currency, "after_request": anchor.request_id,
                        "drawn_gap_s": round(wanted, 3),
                        "gap_s": None if gap is None else round(gap, 3),
                        "worker": worker.name})
        return out

    def refunds(self, count: int, threads: list[str]) -> list[dict[str, Any]]:
        """A support agent refunds some of the day's charges through the API (real SDK calls,
        each with the SDK's own random key), minutes to hours after the charge."""
        charged = [r for t in threads for r in charges_of(self.b, t) if 200 <= r.status < 300]
        picked = self.rng.sample(charged, min(count, len(charged)))
        client = stripe.StripeClient(API_KEY, base_addresses={"api": self.b.server.url},
                                     max_network_retries=0)
        out = []
        for record in sorted(picked, key=lambda r: r.created):
            intent = self._intent_of(record)
            if intent is None:
                continue
            delay = self.rng.uniform(120, 4 * 3600)
            when = agent_time(self.b, record) + dt.timedelta(seconds=delay)
            self.b.travel_to(when)
            # seam: the lab server's refunds will emit Stripe's full refund event set; the call
            # stays this one (POST /v1/refunds)
            refund = client.v1.refunds.create(params={"payment_intent": intent})
            self.latest = max(self.latest, self.b.clock.now())
            out.append({"payment_intent": intent, "refund": refund.id,
                        "at": iso(when, "milliseconds")})
        return out

    def checkouts(self, count: int) -> list[dict[str, Any]]:
        """Guest payments from the web shop: no customer, common prices, around the incident."""
        client = stripe.StripeClient(API_KEY, base_addresses={"api": self.b.server.url},
                                     max_network_retries=0)
        out = []
        for _ in range(count):
            when = self._start_near_incident()
            amount = self.rng.choice(AMOUNTS)
            currency = self.rng.choice(("usd", "usd", "usd", "eur"))
            order = f"ord_{_chars(self.rng, 10)}"
            self.b.travel_to(when)
            intent = client.v1.payment_intents.create(params={
                "amount": amount, "currency": currency, "confirm": True,
                "payment_method": PAYMENT_METHOD, "metadata": {"order_id": order}})
            self.latest = max(self.latest, self.b.clock.now())
            out.append({"payment_intent": intent.id, "amount": amount, "currency": currency,
                        "at": iso(when, "milliseconds")})
        return out

    def _intent_of(self, record: RequestRecord) -> str | None:
        try:
            return str(json.loads(record.response_body)["id"])
        except (ValueError, KeyError, TypeError):
            return None

    def back_to_latest(self) -> None:
        """The clock returns to the latest moment any run reached."""
        if self.b.clock.now() < self.latest:
            self.b.travel_to(self.latest)
