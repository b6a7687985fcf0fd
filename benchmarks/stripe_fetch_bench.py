"""Benchmark the live Stripe connector's fetch against a plain HTTP loop over the same pages.

    python benchmarks/stripe_fetch_bench.py [--events 2000] [--repeats 3]
                                            [--out benchmarks/results/stripe_fetch.json]

Starts localstripe (a real Stripe-compatible server, PyPI) in a process of its own, fills it
through the real stripe SDK with `--events` events in the window (one customer's payment
intents, confirmed, and other customers being created: what a busy account lists), then,
alternating so all see the same machine load, `--repeats` times each:
  plain   urllib, page by page (`limit=100`, `starting_after`), json.loads of each page: the floor
  fetch   twice.connectors.live.stripe_api.fetch_events (what `twice investigate` runs: the
          bounded HTTP client, the refused `types[]` filter asked once, then every page raw)
  load    twice.connectors.live.stripe_api.load: fetch_events + the provider_event rows
  objects the SDK's `events.list` page by page (an SDK object per event: how twice fetched
          before issue 21), for comparison
and records every time, the medians and fetch's ratio to plain (issue 21's target: <= 3).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import stripe

from twice.connectors.live import stripe_api

TARGET_RATIO = 3.0
KEY = "sk_test_benchmarkKey0001"
_SERVER = """
import sys, warnings
warnings.simplefilter("ignore")
from twice.lab.localstripe import LocalStripe
with LocalStripe() as server:
    print(server.url, flush=True)
    sys.stdin.read()
"""


def fill(url: str, events: int) -> str:
    """`events` events: a tenth the customer's payment intents, the rest other customers."""
    sdk = stripe.StripeClient(KEY, base_addresses={"api": url})
    customer = sdk.v1.customers.create(params={"email": "ada@example.com"})
    card = sdk.v1.payment_methods.create(params={
        "type": "card",
        "card": {"number": "4242424242424242", "exp_month": 12, "exp_year": 2030, "cvc": "123"}})
    for i in range(events - 1):
        if i % 10 == 0:
            intent = sdk.v1.payment_intents.create(params={
                "amount": 1000 + i, "currency": "usd", "customer": customer.id,
                "payment_method": card.id, "metadata": {"tool_call_id": f"call_{i}"}})
            sdk.v1.payment_intents.confirm(intent.id)
        else:
            sdk.v1.customers.create(params={"email": f"c{i}@example.com"})
    return customer.id


def plain(url: str, gte: int, lte: int) -> int:
    after, n = None, 0
    while True:
        query = f"created[gte]={gte}&created[lte]={lte}&limit=100"
        if after:
            query += f"&starting_after={after}"
        request = urllib.request.Request(f"{url}/v1/events?{query}",
                                         headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            doc = json.loads(response.read())
        n += len(doc["data"])
        if not doc["has_more"] or not doc["data"]:
            return n
        after = doc["data"][-1]["id"]


def objects(url: str, gte: int, lte: int) -> int:
    client = stripe.StripeClient(KEY, base_addresses={"api": url}, max_network_retries=0,
                                 http_client=stripe_api.BoundedHttp())
    after, n = None, 0
    while True:
        params: dict[str, Any] = {"created": {"gte": gte, "lte": lte}, "limit": 100}
        if after:
            params["starting_after"] = after
        page = client.v1.events.list(params)  # type: ignore[arg-type]
        n += len(page.data)
        if not page.has_more or not page.data:
            return n
        after = page.data[-1].id


def timed(run: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = run()
    return round(time.perf_counter() - wall, 3), round(time.process_time() - cpu, 3), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/stripe_fetch.json"))
    args = ap.parse_args()
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        started = time.perf_counter()
        customer = fill(url, args.events)
        fill_s = round(time.perf_counter() - started, 1)
        now = datetime.now(UTC)
        since, until = now - timedelta(hours=1), now + timedelta(minutes=1)
        gte, lte = int(since.timestamp()), int(until.timestamp())
        client = stripe.StripeClient(KEY, base_addresses={"api": url}, max_network_retries=0,
                                     http_client=stripe_api.BoundedHttp())
        subject = stripe_api.Subject(customer)
        runs: dict[str, Callable[[], Any]] = {
            "plain": lambda: plain(url, gte, lte),
            "fetch": lambda: stripe_api.fetch_events(client, subject, since, until),
            "load": lambda: stripe_api.load(KEY, subject, since, until, base_url=url),
            "objects": lambda: objects(url, gte, lte),
        }
        wall: dict[str, list[float]] = {name: [] for name in runs}
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        listed: dict[str, Any] = {}
        for _ in range(args.repeats):
            for name, run in runs.items():
                w, c, out = timed(run)
                wall[name].append(w)
                cpu[name].append(c)
                listed[name] = out
        fetched = listed["fetch"]
        medians = {name: statistics.median(times) for name, times in wall.items()}
        report = {
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "stripe": stripe.VERSION,
                        "load_avg": [round(x, 2) for x in os.getloadavg()]},
            "what": "stripe_api.fetch_events vs a plain urllib loop over the same pages of "
                    "localstripe (own process), alternating",
            "target_ratio": TARGET_RATIO,
            "input": {"events": listed["plain"], "pages": fetched.pages,
                      "kept_about_subject": len(fetched.events), "fill_s": fill_s},
            "wall_s": wall,
            "cpu_s_this_process": cpu,
            "median_wall_s": medians,
            "ratio_fetch_to_plain": round(medians["fetch"] / medians["plain"], 2),
            "ratio_load_to_plain": round(medians["load"] / medians["plain"], 2),
            "ratio_objects_to_plain": round(medians["objects"] / medians["plain"], 2),
        }
    finally:
        server.communicate("", timeout=30)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    ratio = report["ratio_fetch_to_plain"]
    print(f"fetch / plain = {ratio}x (target <= {TARGET_RATIO}x)")


if __name__ == "__main__":
    main()
