"""The detailed ground truth of an incident: which provider requests it made, which findings an
analysis must report for it, all derived from what the lab DID (the provider's own request
records, the checkpointed messages, the exported spans), never from the engine.

`collect_facts` runs inside the bench (the checkpointer is open); `request_ids` and
`expected_findings` read those facts plus the incident folder's exported files. Finding codes and
their meaning: `twice/findings.py` (the README's "Output contract").
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from twice.lab.agent import derived_key
from twice.lab.model import FAILURE_PREFIX
from twice.lab.stripe_server import RequestRecord, StripeServer

EFFECT_PATH = "/v1/payment_intents"
KEY_RETENTION_S = 24 * 3600  # the lab Stripe server prunes keys 24 h after their first use
SPAN_TOLERANCE_S = 0.5  # a request inside its tool span, give or take scheduling
# Stripe Events carry `request` as {id, idempotency_key} from this API version on; before it,
# `request` was a plain request id string, so the events do not record keys
KEYED_EVENTS_FROM = "2017-05-25"


def thread_of(record: RequestRecord) -> str | None:
    """The agent thread a create request came from (the lab tool puts it in the metadata)."""
    return dict(parse_qsl(record.body)).get("metadata[thread_id]")


def created_effect(record: RequestRecord) -> bool:
    """The request created a PaymentIntent that went through (not a replay, not a decline)."""
    return 200 <= record.status < 300 and not record.replayed


@dataclass
class IncidentFacts:
    """What the lab did for the incident's threads, read while the run's state is still open."""

    threads: list[str]
    requests: list[RequestRecord]  # create requests that reached the provider, oldest first
    calls: dict[str, list[str]]  # thread -> tool call ids, in the order the model emitted them
    results: dict[str, str]  # tool call id -> the content of its (last) ToolMessage
    result_status: dict[str, str]  # tool call id -> ToolMessage status ("success" | "error")
    event_request_ids: set[str]  # request ids the provider's events name
    clock_offset: float  # provider clock minus agent clock, seconds
    intents: list[dict[str, Any]] = field(default_factory=list)  # the threads' PaymentIntents

    @property
    def request_ids(self) -> list[str]:
        return [r.request_id for r in self.requests]

    def call_of(self) -> dict[str, str | None]:
        """request id -> the tool call that sent it. One call: all of them. A derived key names
        its call. Otherwise as many calls as requests: in order (each call sent one)."""
        out: dict[str, str | None] = {}
        for thread in self.threads:
            calls = self.calls.get(thread, [])
            mine = [r for r in self.requests if thread_of(r) == thread]
            derived = {derived_key(thread, c): c for c in calls}
            for i, r in enumerate(mine):
                if r.idempotency_key in derived:
                    out[r.request_id] = derived[r.idempotency_key]
                elif len(calls) == 1:
                    out[r.request_id] = calls[0]
                elif len(calls) == len(mine):
                    out[r.request_id] = calls[i]
                else:
                    out[r.request_id] = None
        return out


def collect_facts(
    server: StripeServer, checkpointer: BaseCheckpointSaver[Any], threads: Iterable[str]
) -> IncidentFacts:
    threads = list(dict.fromkeys(threads))
    requests = sorted(
        (
            r
            for r in server.requests
            if r.method == "POST" and r.path == EFFECT_PATH and r.logged
            and thread_of(r) in threads
        ),
        key=lambda r: r.created,
    )
    calls: dict[str, list[str]] = {}
    results: dict[str, str] = {}
    status: dict[str, str] = {}
    for thread in threads:
        latest = checkpointer.get_tuple({"configurable": {"thread_id": thread}})
        messages = latest.checkpoint["channel_values"].get("messages", []) if latest else []
        calls[thread] = [
            str(c["id"]) for m in messages if isinstance(m, AIMessage) for c in m.tool_calls
        ]
        for m in messages:
            if isinstance(m, ToolMessage):
                results[m.tool_call_id] = str(m.content)
                status[m.tool_call_id] = str(getattr(m, "status", "success"))
    named = {
        str(e["request"]["id"]) if isinstance(e.get("request"), dict) else str(e.get("request"))
        for e in server.events
        if e.get("request")
    }
    intents = sorted(
        (pi for pi in server.payment_intents.values()
         if (pi.get("metadata") or {}).get("thread_id") in threads),
        key=lambda pi: (pi["created"], pi["id"]),
    )
    return IncidentFacts(threads, requests, calls, results, status, named,
                         server.clock_offset, intents)


@dataclass(frozen=True)
class Exports:
    """Which files the incident folder holds, as far as findings depend on them."""

    request_log: bool = True
    spans: bool = True
    events_record_keys: bool = True  # False for pre-2017-05-25 API versions (`request` a string)
    span_keys: bool = True  # the spans capture the Idempotency-Key header (the lab's GenAI spans)


def events_record_keys(api_version: str | None) -> bool:
    return api_version is None or api_version[:10] >= KEYED_EVENTS_FROM


def expected_findings(
    facts: IncidentFacts,
    exports: Exports,
    spans: Path | list[ToolSpan] | None = None,
    span_clock_offsets: dict[str, float] | None = None,
) -> list[str]:
    """The finding codes an analysis must report for the incident's logical call.

    Empty when fewer than two requests reached the provider: an analysis lists only calls that
    executed more than once, so a single request has no group to carry findings. `spans`: the
    OTLP JSON lines file, or its tool spans read before the file was converted or dropped;
    `span_clock_offsets`: how far each worker's span clock runs from the agent's."""
    requests = facts.requests
    if len(requests) < 2:
        return []
    codes: list[str] = []
    call_of = facts.call_of()
    def recorded(r: RequestRecord) -> bool:
        """Some export says which key this request carried (a null there means none)."""
        return exports.request_log or (
            exports.events_record_keys and r.request_id in facts.event_request_ids)

    def key_seen(r: RequestRecord) -> bool:
        """Some export shows this request's key: the provider's, or a client span's header."""
        return bool(r.idempotency_key) and (recorded(r) or (exports.spans and exports.span_keys))

    # key_missing: a request without a key, in an export that records keys for it
    for r in requests:
        if not r.idempotency_key and recorded(r):
            codes.append("key_missing")
            break
    # key_regenerated: one tool call reached the provider with two or more keys, seen
    keys_by_call: dict[str, set[str]] = {}
    for r in requests:
        call = call_of.get(r.request_id)
        if call and key_seen(r):
            keys_by_call.setdefault(call, set()).add(str(r.idempotency_key))
    if any(len(keys) >= 2 for keys in keys_by_call.values()):
        codes.append("key_regenerated")
    # key_derived: a request carried sha256(thread_id:tool_call_id)[:32], seen
    derived = {derived_key(t, c) for t, calls in facts.calls.items() for c in calls}
    if any(r.idempotency_key in derived and key_seen(r) for r in requests):
        codes.append("key_derived")
    # key_expired: a key reused past retention made a new effect
    first_use: dict[str, float] = {}
    expired = False
    for r in requests:
        key = r.idempotency_key
        if not key:
            continue
        if key in first_use and created_effect(r) and r.created - first_use[key] > KEY_RETENTION_S:
            expired = True
        first_use.setdefault(key, r.created)
    if expired:
        codes.append("key_expired")
    # replayed: the provider answered one from its idempotency cache
    if any(r.replayed for r in requests):
        codes.append("replayed")
    # span_missing: spans are exported and a request has no tool span around it
    if isinstance(spans, Path):
        spans = tool_spans(spans) if spans.exists() else None
    if spans is not None and span_clock_offsets:
        spans = [s.unskewed(span_clock_offsets) for s in spans]
    if exports.spans and spans is not None:
        for r in requests:
            at = r.created - facts.clock_offset  # the agent's clock, the spans' clock
            thread = thread_of(r)
            call = call_of.get(r.request_id)
            if not any(_covers(s, at, call, thread) for s in spans):
                codes.append("span_missing")
                break
    # failure_reported_for_unknown_outcome: the tool told the model "failed" for a call whose
    # PaymentIntent went through
    for call in {c for c in call_of.values() if c}:
        told = facts.results.get(call, "")
        failed = told.startswith(FAILURE_PREFIX) or facts.result_status.get(call) == "error"
        if failed and any(created_effect(r) for r in requests
                          if call_of.get(r.request_id) == call):
            codes.append("failure_reported_for_unknown_outcome")
            break
    return codes


@dataclass(frozen=True)
class ToolSpan:
    call_id: str | None
    thread_id: str | None
    start: float  # unix seconds, on the worker's span clock
    end: float
    worker: str | None = None  # host.name

    def unskewed(self, offsets: dict[str, float]) -> ToolSpan:
        """The span on the agent's clock, given each worker's span clock offset."""
        shift = offsets.get(self.worker or "", 0.0)
        return replace(self, start=self.start - shift, end=self.end - shift)


def _covers(span: ToolSpan, at: float, call: str | None, thread: str | None) -> bool:
    if span.call_id is not None:
        same = span.call_id == call
    else:  # instrumentation without a tool call id (OpenInference): the thread's tool span
        same = span.thread_id is not None and span.thread_id == thread
    return same and span.start - SPAN_TOLERANCE_S <= at <= span.end + SPAN_TOLERANCE_S


def _attr(attributes: list[dict[str, Any]], names: Collection[str]) -> str | None:
    for a in attributes:
        if a.get("key") in names:
            value = a.get("value") or {}
            for kind in ("stringValue", "intValue"):
                if kind in value:
                    return str(value[kind])
    return None


def tool_spans(path: Path) -> list[ToolSpan]:
    """The tool spans of an OTLP JSON lines file (GenAI or OpenInference attributes)."""
    out: list[ToolSpan] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        doc = json.loads(line)
        for resource, span in iter_otlp_spans(doc):
            attrs = span.get("attributes", [])
            call = _attr(attrs, ("gen_ai.tool.call.id", "tool_call.id"))
            is_tool = _attr(attrs, ("gen_ai.operation.name",)) == "execute_tool" or \
                _attr(attrs, ("openinference.span.kind",)) == "TOOL" or call is not None
            if not is_tool:
                continue
            out.append(ToolSpan(
                call, _attr(attrs, ("gen_ai.conversation.id", "session.id")),
                int(span["startTimeUnixNano"]) / 1e9, int(span["endTimeUnixNano"]) / 1e9,
                _attr(resource.get("attributes", []), ("host.name", "service.instance.id"))))
    return out


def iter_otlp_spans(doc: dict[str, Any]) -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
    """(resource, span) pairs of one OTLP JSON export object."""
    for resource_spans in doc.get("resourceSpans", []):
        resource = resource_spans.get("resource", {})
        for scope in resource_spans.get("scopeSpans", []):
            for span in scope.get("spans", []):
                yield resource, span


def exported_request_ids(folder: Path, request_ids: Collection[str]) -> list[str]:
    """The incident's request ids that some exported file names: the provider's events, request
    log or `stripe logs tail` lines, or a span's captured Request-Id response header. A replay
    emits no event: with events alone, a protected retry leaves one visible request."""
    wanted = set(request_ids)
    seen: set[str] = set()
    for path in sorted(folder.iterdir()):
        if path.name in ("truth.json", "README.md", "checkpoints.sqlite") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        seen.update(i for i in wanted if i in text)
    return [i for i in request_ids if i in seen]
