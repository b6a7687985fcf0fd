"""What a span means for the timeline, decided once for every span format.

A span becomes at most one row:
- `tool_span`: it carries a tool call (OTel GenAI `gen_ai.tool.call.id` / `gen_ai.tool.name` /
  `gen_ai.operation.name = execute_tool`, OpenInference `tool_call.id` / `tool.name` /
  `openinference.span.kind = TOOL`, or the attribute the user names);
- `queue_receive`: it has an attribute ending in `receive_count`, `delivery_count` or
  `delivery_attempt` (Pub/Sub, Service Bus, an SQS count copied onto the span, ...);
- `http_span`: an HTTP client span (or one of unknown kind) with a request method.
Every other span is dropped, but still serves as an ancestor: tool and HTTP spans that do not carry
a thread id or tool call id take them from their nearest ancestor that does (an HTTP span under a
tool span is one wire attempt of that tool call).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
import pandas as pd

from connectors.base import redact
from connectors.spans_model import SpanKind, SpanRecord, SpanStatus, as_int
from twice.timeline import Kind, canonical_json, fingerprint

SOURCE = "spans"

TOOL_CALL_ID_KEYS = ("gen_ai.tool.call.id", "tool_call.id", "tool.id")
TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name")
ARGUMENT_KEYS = ("gen_ai.tool.call.arguments", "tool_call.function.arguments", "input.value",
                 "tool.parameters")
THREAD_KEYS = ("gen_ai.conversation.id", "session.id", "langgraph.thread_id", "thread_id")
REQUEST_ID_KEYS = ("http.response.header.request-id", "stripe.request_id")
IDEMPOTENCY_KEY_KEYS = ("http.request.header.idempotency-key",)
PROXY_ATTEMPT_KEYS = ("http.request.header.x-envoy-attempt-count",
                      "http.response.header.x-envoy-attempt-count")
HTTP_METHOD_KEYS = ("http.request.method", "http.method")
HTTP_STATUS_KEYS = ("http.response.status_code", "http.status_code")
URL_KEYS = ("url.full", "url.path", "http.url", "http.target")
DELIVERY_SUFFIXES = ("receive_count", "delivery_count", "delivery_attempt")
HOST_KEYS = ("host.name", "hostname", "service.instance.id")  # `hostname`: Jaeger client tag

_TIMEOUT = re.compile(r"time[ds]?[\s_-]?out(?!put)|deadline[\s_-]?exceeded", re.I)
_DETAIL_MAX = 200


@dataclass(frozen=True)
class Options:
    tool_attribute: str | None = None  # extra attribute that marks a tool span (its value = id)
    request_id_attribute: str | None = None  # extra attribute holding the provider request id


def text_value(value: Any) -> str | None:
    """A scalar attribute as text. Captured headers are arrays (take the first); Jaeger turns
    arrays into JSON text, so a string that is a JSON array is read the same way."""
    if isinstance(value, str) and value.startswith("[") and value.endswith("]"):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip()
    return text or None


def int_value(value: Any) -> int | None:
    number = as_int(value)
    return number if number is not None else as_int(text_value(value))


def _first(attrs: dict[str, Any], keys: Iterable[str | None]) -> str | None:
    for key in keys:
        if key and (text := text_value(attrs.get(key))) is not None:
            return text
    return None


def _first_int(attrs: dict[str, Any], keys: Iterable[str]) -> int | None:
    for key in keys:
        if key in attrs and (number := int_value(attrs[key])) is not None:
            return number
    return None


def _is_json_schema(value: Any) -> bool:
    return isinstance(value, dict) and ("properties" in value or value.get("type") == "object")


def _arguments(attrs: dict[str, Any]) -> tuple[str | None, Any]:
    """(canonical JSON text or raw text, parsed value) of the tool call's arguments.

    OpenInference's `tool.parameters` is the tool's parameter *definition*, so it only counts
    when it does not look like a JSON schema; `input.value` only when it is a JSON object.
    """
    for key in ARGUMENT_KEYS:
        value = attrs.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                if key in ("input.value", "tool.parameters"):
                    continue
                return value, None
        else:
            parsed = value
        if key in ("input.value", "tool.parameters") and not isinstance(parsed, dict):
            continue
        if key == "tool.parameters" and _is_json_schema(parsed):
            continue
        return canonical_json(parsed), parsed
    return None, None


def _effect_fields(args: Any) -> dict[str, Any]:
    if not isinstance(args, dict):
        return {}
    out: dict[str, Any] = {}
    subject = text_value(args.get("customer")) or text_value(args.get("customer_id"))
    if subject:
        out["subject"] = subject
    amount = int_value(args.get("amount"))
    if amount is not None:
        out["amount"] = amount
    currency = text_value(args.get("currency"))
    if currency:
        out["currency"] = currency.lower()
    return out


def _path(attrs: dict[str, Any]) -> str | None:
    for key in URL_KEYS:
        url = text_value(attrs.get(key))
        if url:
            # path only: query strings and userinfo may hold secrets
            return (urlsplit(url).path or "/") if "://" in url else url.split("?", 1)[0]
    return None


def _delivery_count(attrs: dict[str, Any]) -> int | None:
    counts = []
    for key, value in attrs.items():
        name = key.lower().replace("-", "_")
        if name.endswith(DELIVERY_SUFFIXES) and (number := int_value(value)) is not None:
            # RabbitMQ's x-delivery-count counts earlier failed deliveries (absent on the first)
            counts.append(number + 1 if name.endswith("x_delivery_count") else number)
    return max(counts) if counts else None


def _tool_call_id(attrs: dict[str, Any], options: Options) -> str | None:
    return _first(attrs, (*TOOL_CALL_ID_KEYS, options.tool_attribute))


def _is_tool(rec: SpanRecord, options: Options) -> bool:
    attrs = rec.attributes
    return (
        any(k in attrs for k in TOOL_CALL_ID_KEYS[:2] + TOOL_NAME_KEYS)
        or text_value(attrs.get("gen_ai.operation.name")) == "execute_tool"
        or str(text_value(attrs.get("openinference.span.kind")) or "").upper() == "TOOL"
        or bool(options.tool_attribute and options.tool_attribute in attrs)
    )


def _is_http(rec: SpanRecord) -> bool:
    has_method = any(k in rec.attributes for k in HTTP_METHOD_KEYS)
    return has_method and rec.kind in (SpanKind.CLIENT, SpanKind.UNKNOWN)


def _outcome(rec: SpanRecord, http_status: int | None) -> tuple[str, str | None]:
    """(outcome, detail). An explicit OK wins; then timeouts; then errors; an HTTP span with
    unset status is judged by its response code (semconv leaves 2xx client spans unset)."""
    attrs = rec.attributes
    error_type = text_value(attrs.get("error.type"))
    exc_type, exc_message = rec.exceptions[-1] if rec.exceptions else (None, None)
    if exc_type or exc_message:
        detail: str | None = ": ".join(t for t in (exc_type, exc_message) if t)
    else:
        detail = rec.status_message or error_type
    if detail:
        detail = redact(detail)[:_DETAIL_MAX]
    if rec.status == SpanStatus.OK:
        return "ok", detail
    timeout_words = [error_type, rec.status_message]
    for pair in rec.exceptions:
        timeout_words.extend(pair)
    timed_out = any(w and _TIMEOUT.search(w) for w in timeout_words)
    failed = (
        rec.status == SpanStatus.ERROR
        or error_type is not None
        or (http_status is not None and http_status >= 400)
    )
    if timed_out and (failed or rec.exceptions):
        return "timeout", detail
    if failed:
        return "error", detail
    if http_status is not None:
        return "ok", detail
    return "unknown", detail


def _inherited(records: list[SpanRecord], options: Options) -> list[tuple[str | None, str | None]]:
    """(thread_id, tool_call_id) of every record, its own or its nearest ancestor's.

    One pass over a parent map: each span is resolved once (memoised), so the cost is linear.
    """
    own: dict[tuple[str, str], tuple[str | None, str | None, str | None]] = {}
    for rec in records:
        own[(rec.trace_id, rec.span_id)] = (
            rec.parent_span_id,
            _first(rec.attributes, THREAD_KEYS),
            _tool_call_id(rec.attributes, options),
        )
    memo: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for start in own:
        chain: list[tuple[str, str]] = []
        node: tuple[str, str] | None = start
        seen: set[tuple[str, str]] = set()
        while node is not None and node in own and node not in memo and node not in seen:
            seen.add(node)  # a parent cycle in bad data must not loop forever
            chain.append(node)
            parent = own[node][0]
            node = (node[0], parent) if parent else None
        above = memo.get(node, (None, None)) if node is not None else (None, None)
        for key in reversed(chain):
            _, thread, call = own[key]
            above = (thread or above[0], call or above[1])
            memo[key] = above
    return [memo[(rec.trace_id, rec.span_id)] for rec in records]


def _worker(rec: SpanRecord) -> str | None:
    return _first(rec.resource, HOST_KEYS)


def span_rows(records: list[SpanRecord], options: Options) -> list[dict[str, Any]]:
    """Timeline row dicts for the spans that mean something (see the module docstring)."""
    rows: list[dict[str, Any]] = []
    for rec, (thread_id, call_id) in zip(records, _inherited(records, options), strict=True):
        attrs = rec.attributes
        delivery_count = _delivery_count(attrs)
        if _is_tool(rec, options):
            kind = Kind.TOOL_SPAN
        elif delivery_count is not None:
            kind = Kind.QUEUE_RECEIVE
        elif _is_http(rec):
            kind = Kind.HTTP_SPAN
        else:
            continue
        http_status = _first_int(attrs, HTTP_STATUS_KEYS) if kind == Kind.HTTP_SPAN else None
        outcome, detail = _outcome(rec, http_status)
        row: dict[str, Any] = {
            "source": SOURCE,
            "origin": rec.origin,
            "kind": kind.value,
            "at": pd.Timestamp(rec.start_ns, unit="ns", tz="UTC"),
            "end": None if rec.end_ns is None else pd.Timestamp(rec.end_ns, unit="ns", tz="UTC"),
            "trace_id": rec.trace_id,
            "span_id": rec.span_id,
            "parent_span_id": rec.parent_span_id,
            "name": rec.name,
            "worker": _worker(rec),
            "outcome": outcome,
            "detail": detail,
        }
        if kind == Kind.TOOL_SPAN:
            args_text, args = _arguments(attrs)
            name = _first(attrs, TOOL_NAME_KEYS)
            if name is None and rec.name and rec.name.startswith("execute_tool "):
                name = rec.name.removeprefix("execute_tool ").strip() or None
            row.update(thread_id=thread_id, tool_call_id=call_id, tool_name=name, args=args_text,
                       args_fingerprint=fingerprint(args_text) if args_text else None,
                       **_effect_fields(args))
        elif kind == Kind.QUEUE_RECEIVE:
            row.update(delivery_count=delivery_count,
                       message_id=_first(attrs, ("messaging.message.id",)),
                       thread_id=_first(attrs, THREAD_KEYS))
        else:
            method = _first(attrs, HTTP_METHOD_KEYS)
            resend = _first_int(attrs, ("http.request.resend_count",))
            if resend is None and rec.kind == SpanKind.CLIENT:
                resend = 0  # semconv sets it only on resends: a client span without it is try 0
            row.update(
                thread_id=thread_id, tool_call_id=call_id,
                method=method.upper() if method else None, path=_path(attrs), status=http_status,
                resend_count=resend,
                request_id=_first(attrs, (*REQUEST_ID_KEYS, options.request_id_attribute)),
                idempotency_key=_first(attrs, IDEMPOTENCY_KEY_KEYS),
                proxy_attempt=_first_int(attrs, PROXY_ATTEMPT_KEYS),
            )
        rows.append(row)
    return rows
