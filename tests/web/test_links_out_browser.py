"""Links out in a real browser (Debian's chromium driven by Playwright): the verdict and the
raw-record panel link the attempts' Stripe ids to the Stripe dashboard and the call's trace to
the trace viewer the server names (TWICE_TRACE_URL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.web.conftest import chromium, running_app

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = "http://jaeger.invalid:16686/trace/{trace_id}"


def _hrefs(page: Any) -> list[str]:
    return list(page.locator("a").evaluate_all("els => els.map(e => e.getAttribute('href'))"))


def test_the_verdict_and_a_raw_record_link_out(tmp_path: Path) -> None:
    from twice.connectors import registry
    from twice.engine import analyze

    found, _ = registry.scan_folder(ROOT / "sample_data" / "step_retry")
    timeline = registry.load_all([(n, p, {}) for n, p in found]).rows
    group = analyze(timeline).groups[0]
    dup = group.duplicates[0]
    second = next(r for r in group.records if r["attempt_id"] == dup.second)
    from twice.web.figures import call_records

    records = call_records(analyze(timeline), group)
    trace = str(records["trace_id"].dropna().iloc[0])  # the call's trace
    env = {"TWICE_STORE": str(tmp_path / "investigations.sqlite3"), "TWICE_TRACE_URL": TEMPLATE}
    with running_app(env) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/?inv=sample-step-retry&tab=verdict")
        page.get_by_text("Raw records", exact=True).wait_for(timeout=120_000)
        page.locator("a[href*='dashboard.stripe.com']").first.wait_for(timeout=30_000)
        hrefs = _hrefs(page)
        # the sample's events say test mode (livemode false): the test dashboard only
        payment = f"https://dashboard.stripe.com/payments/{second['object_id']}"
        assert payment.replace(".com/", ".com/test/") in hrefs and payment not in hrefs, hrefs
        assert f"https://dashboard.stripe.com/test/logs/{dup.second}" in hrefs  # its request
        assert not any(h.startswith("https://dashboard.stripe.com/logs/") for h in hrefs)
        assert f"http://jaeger.invalid:16686/trace/{trace}" in hrefs
        # a provider event's record: its charge, the PaymentIntent it belongs to
        page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
        picker = page.locator("[data-testid='stSelectbox']").filter(has_text="Record")
        picker.locator("input").click()
        page.keyboard.type("events.json")  # the picker filters its options as typed
        page.keyboard.press("Enter")
        code = page.locator("[data-testid='stCode']").filter(has_text='"event_type"').first
        code.wait_for(timeout=30_000)
        shown = json.loads(code.inner_text())
        page.wait_for_function(
            "id => [...document.querySelectorAll('a')].some(a => a.href.endsWith('/' + id)"
            " && a.innerText.includes(id))", arg=shown["object_id"], timeout=30_000)
        assert shown["livemode"] is False  # the record's own mode, kept from the event
        assert f"https://dashboard.stripe.com/test/payments/{shown['object_id']}" \
            in _hrefs(page)
        page.close()
