"""Write one incident folder: the provider's exports, the ground truth and a README.

The checkpoints (`checkpoints.sqlite`), spans (`spans.jsonl`) and queue receives (`sqs.jsonl`)
are written by the run itself; this adds `events.json`, `request_log.csv`, `stripe_logs.jsonl`,
`truth.json` and `README.md`. The numbers in the README are measured from what the provider
recorded, not restated from the scenario's intent.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from twice.formats import iso
from twice.lab.stripe_server import RequestRecord, StripeServer
from twice.lab.truth_detail import Exports, IncidentFacts, expected_findings, exported_request_ids

EFFECT_PATH = "/v1/payment_intents"


@dataclass
class Truth:
    scenario: str
    layer: str  # sdk_retry | gateway_retry | step_retry | redelivery | model_reemission | none
    thread_id: str
    customer: str
    duplicate_tool_call_ids: list[str]
    effects_created: int
    description: str
    protected: bool = False  # the provider deduplicated the re-execution (one effect)
    payment_intents: list[str] = field(default_factory=list)
    # The detailed truth (`DETAIL_FIELDS`), written only when asked (field realism, the accuracy
    # harness): clean incidents' truth.json, sample_data's included, stay as they were.
    realism: str = "clean"  # clean | field
    related_threads: list[str] = field(default_factory=list)  # other threads of the incident
    request_ids: list[str] = field(default_factory=list)  # its create requests at the provider
    exported_request_ids: list[str] = field(default_factory=list)  # those the files name
    expected_findings: list[str] = field(default_factory=list)  # twice.lab.truth_detail
    variant: dict[str, Any] = field(default_factory=dict)  # what field realism drew

    @property
    def threads(self) -> list[str]:
        return [self.thread_id, *self.related_threads]

    def to_json(self, detailed: bool = False) -> str:
        doc = asdict(self)
        if not detailed:
            for name in DETAIL_FIELDS:
                doc.pop(name)
        return json.dumps(doc, indent=2) + "\n"


DETAIL_FIELDS = ("realism", "related_threads", "request_ids", "exported_request_ids",
                 "expected_findings", "variant")


@dataclass(frozen=True)
class Story:
    """The human half of the README."""

    title: str
    what_happened: str
    twice_should_say: str


def incident_requests(server: StripeServer, customer: str) -> list[RequestRecord]:
    """The provider requests that tried to create an effect for the incident's customer."""
    return [
        r
        for r in server.requests
        if r.method == "POST"
        and r.path == EFFECT_PATH
        and dict(parse_qsl(r.body)).get("customer") == customer
    ]


def incident_intents(server: StripeServer, customer: str) -> list[dict[str, Any]]:
    intents = [pi for pi in server.payment_intents.values() if pi.get("customer") == customer]
    return sorted(intents, key=lambda pi: (pi["created"], pi["id"]))


def write_incident(
    out_dir: Path,
    server: StripeServer,
    truth: Truth,
    story: Story,
    facts: IncidentFacts | None = None,
) -> Path:
    """The clean realism's folder: every provider export. With `facts` (the detailed truth)
    truth.json also names the incident's request ids and the findings it must show."""
    compact(out_dir / "checkpoints.sqlite")
    server.write_events(out_dir / "events.json")
    server.write_request_log(out_dir / "request_log.csv")
    server.write_logs_tail(out_dir / "stripe_logs.jsonl")
    intents = incident_intents(server, truth.customer)
    truth.effects_created = len(intents)
    truth.payment_intents = [pi["id"] for pi in intents]
    if facts is not None:
        truth.request_ids = facts.request_ids
        truth.expected_findings = expected_findings(facts, Exports(), out_dir / "spans.jsonl")
        truth.exported_request_ids = exported_request_ids(out_dir, facts.request_ids)
    finish_incident(out_dir, server, truth, story, incident_requests(server, truth.customer),
                    detailed=facts is not None)
    return out_dir


def finish_incident(
    out_dir: Path,
    server: StripeServer,
    truth: Truth,
    story: Story,
    requests: list[RequestRecord],
    *,
    detailed: bool,
    extra: str = "",
) -> None:
    """truth.json and README.md, after the exports are in place."""
    (out_dir / "truth.json").write_text(truth.to_json(detailed))
    (out_dir / "README.md").write_text(_readme(out_dir, truth, story, requests, server, extra))


def compact(path: Path) -> None:
    if path.exists():
        conn = sqlite3.connect(str(path))
        try:
            conn.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal
            conn.execute("VACUUM")
        finally:
            conn.close()


def duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3f} s"
    if seconds < 2 * 3600:
        return f"{seconds:.1f} s ({seconds / 60:.1f} min)"
    if seconds < 2 * 86400:
        return f"{seconds:.1f} s ({seconds / 3600:.1f} h)"
    return f"{seconds:.0f} s ({seconds / 86400:.2f} days)"


def gaps(requests: list[RequestRecord]) -> list[float]:
    """Seconds between consecutive requests that created something (not replays)."""
    created = [r.created for r in requests if not r.replayed and 200 <= r.status < 300]
    return [round(b - a, 3) for a, b in zip(created, created[1:], strict=False)]


def _readme(
    out_dir: Path,
    truth: Truth,
    story: Story,
    requests: list[RequestRecord],
    server: StripeServer,
    extra: str = "",
) -> str:
    files = sorted(p.name for p in out_dir.iterdir() if p.name != "README.md")
    rows = "\n".join(
        f"| `{r.request_id}` | {iso(r.created, 'milliseconds')} | "
        f"`{r.idempotency_key or '(none)'}` | "
        f"{r.status} | {'yes' if r.replayed else 'no'} | {r.envoy_attempt_count or ''} |"
        for r in requests
    )
    gap_text = ", ".join(duration_text(g) for g in gaps(requests)) or "(one effect)"
    samples = " (also `python -m twice.lab build-samples`)" if truth.realism == "clean" else \
        f" with `--realism {truth.realism}`"
    ids = ", ".join(f"`{i}`" for i in truth.duplicate_tool_call_ids) or "(none)"
    return f"""# {truth.scenario}: {story.title}

Generated by `python -m twice.lab run {truth.scenario}`{samples}:
a real LangGraph agent, the real stripe-python SDK and OpenTelemetry SDK, against the lab's
Stripe-compatible server, on a virtual clock (time-machine). The provider's clock runs
{server.clock_offset:+g} s from the agent's.

## What happened

{story.what_happened}

## What twice should say

{story.twice_should_say}

## Ground truth (`truth.json`)

- layer: `{truth.layer}`
- thread: `{truth.thread_id}`, customer: `{truth.customer}`
- tool call ids involved: {ids}
- PaymentIntents created for the customer: {truth.effects_created}
  ({", ".join(f"`{p}`" for p in truth.payment_intents)})
- gap between the creating requests (provider clock): {gap_text}

Provider requests for this customer (`POST {EFFECT_PATH}`):

| request id | created (provider clock) | idempotency key | status | replayed | envoy attempt |
|---|---|---|---|---|---|
{rows}

Other threads and customers were charged normally in the same window (noise).
{extra}
## Files

{chr(10).join(f"- `{name}`" for name in files + ["README.md"])}
"""
