"""What a span means for the timeline, decided once for every span format.

A span becomes at most one row:
- `tool_span`: it carries a tool call (OTel GenAI `gen_ai.tool.call.id` / `gen_ai.tool.name` /
  `gen_ai.operation.name = execute_tool`, OpenInference `tool_call.id` / `tool.name` /
  `openinference.span.kind = TOOL`, or the attribute the user names). OpenInference's LangChain
  instrumentor writes no tool call id attribute on its TOOL spans: the id is read from
  `output.value` when that is the serialised ToolMessage of a successful call. Langfuse's spans
  (`langfuse.observation.type = tool`, the id JSON-quoted in
  `langfuse.observation.metadata.tool_call_id`, the tool's name the span's) are read in GenAI's
  words first (`langfuse_as_genai`);
- `queue_receive`: it has an attribute ending in `receive_count`, `delivery_count` or
  `delivery_attempt` (Pub/Sub, Service Bus, an SQS count copied onto the span, ...);
- `http_span`: an HTTP client span (or one of unknown kind) with a request method.
Every other span is dropped, but still serves as an ancestor: tool and HTTP spans that do not carry
a thread id or tool call id take them from their nearest ancestor that does (an HTTP span under a
tool span is one wire attempt of that tool call).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import orjson
import pandas as pd

from twice.connectors._parsing import as_int
from twice.connectors.base import redact
from twice.connectors.jsonfile import loads
from twice.connectors.spans.model import INT64, SpanKind, SpanRecord, SpanStatus
from twice.timeline import Kind, canonical_json, fingerprint, from_columns

SOURCE = "spans"

TOOL_CALL_ID_KEYS = ("gen_ai.tool.call.id", "tool_call.id", "tool.id")
TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name")
ARGUMENT_KEYS = ("gen_ai.tool.call.arguments", "tool_call.function.arguments", "input.value",
                 "tool.parameters")
THREAD_KEYS = ("gen_ai.conversation.id", "session.id", "langgraph.thread_id", "thread_id")
# Captured headers are named with dashes by the spec's examples and Java, with underscores by
# OpenTelemetry Python's HTTP instrumentations (`opentelemetry-util-http` normalises them)
REQUEST_ID_KEYS = ("http.response.header.request-id", "http.response.header.request_id",
                   "stripe.request_id")
REPLAYED_KEYS = ("http.response.header.idempotent-replayed",
                 "http.response.header.idempotent_replayed")
IDEMPOTENCY_KEY_KEYS = ("http.request.header.idempotency-key",
                        "http.request.header.idempotency_key")
PROXY_ATTEMPT_KEYS = ("http.request.header.x-envoy-attempt-count",
                      "http.response.header.x-envoy-attempt-count",
                      "http.request.header.x_envoy_attempt_count",
                      "http.response.header.x_envoy_attempt_count")
HTTP_METHOD_KEYS = ("http.request.method", "http.method")
HTTP_STATUS_KEYS = ("http.response.status_code", "http.status_code")
URL_KEYS = ("url.full", "url.path", "http.url", "http.target")
DELIVERY_SUFFIXES = ("receive_count", "delivery_count", "delivery_attempt")
HOST_KEYS = ("host.name", "hostname", "service.instance.id")  # `hostname`: Jaeger client tag

_TOOL_SPAN, _QUEUE_RECEIVE, _HTTP_SPAN = (Kind.TOOL_SPAN.value, Kind.QUEUE_RECEIVE.value,
                                          Kind.HTTP_SPAN.value)
_TOOL_MARKER_KEYS = frozenset(TOOL_CALL_ID_KEYS[:2] + TOOL_NAME_KEYS)  # their presence is enough
_HTTP_METHOD_KEY_SET = frozenset(HTTP_METHOD_KEYS)
_TIMEOUT = re.compile(r"time[ds]?[\s_-]?out(?!put)|deadline[\s_-]?exceeded", re.I)
_DETAIL_MAX = 200


LANGFUSE_TYPE = "langfuse.observation.type"
_LANGFUSE_META = "langfuse.observation.metadata."


def _unquoted(value: Any) -> str | None:
    """Langfuse's metadata values are JSON (`"\"call_abc\""`): the text inside the quotes."""
    text = text_value(value)
    if text is not None and text.startswith('"'):
        try:
            inner = loads(text)
        except orjson.JSONDecodeError:
            return text
        return inner.strip() or None if isinstance(inner, str) else text
    return text


def langfuse_as_genai(rec: SpanRecord) -> SpanRecord:
    """A span the Langfuse SDK wrote, with the GenAI attributes its Langfuse ones stand for
    (those a span carries itself win): a tool observation is an `execute_tool` span, its tool
    call id and LangGraph's thread id unquoted from the observation's metadata, the tool's name
    the observation's; an observation of level ERROR failed (its status message says why)."""
    attrs = rec.attributes
    out = dict(attrs)
    if thread := _unquoted(attrs.get(_LANGFUSE_META + "thread_id")) or text_value(
            attrs.get("langfuse.session.id")):
        out.setdefault("gen_ai.conversation.id", thread)
    if text_value(attrs.get(LANGFUSE_TYPE)) == "tool":
        out.setdefault("gen_ai.operation.name", "execute_tool")
        if call_id := _unquoted(attrs.get(_LANGFUSE_META + "tool_call_id")):
            out.setdefault("gen_ai.tool.call.id", call_id)
        if tool := text_value(attrs.get("langfuse.observation.name")) or rec.name:
            out.setdefault("gen_ai.tool.name", tool)
        if (given := attrs.get("langfuse.observation.input")) is not None:
            out.setdefault("gen_ai.tool.call.arguments", given)
    status, message = rec.status, rec.status_message
    if text_value(attrs.get("langfuse.observation.level")) == "ERROR" and \
            status is not SpanStatus.OK:
        status = SpanStatus.ERROR
        message = message or text_value(attrs.get("langfuse.observation.status_message"))
    return rec._replace(attributes=out, status=status, status_message=message)


@dataclass(frozen=True)
class Options:
    tool_attribute: str | None = None  # extra attribute that marks a tool span (its value = id)
    request_id_attribute: str | None = None  # extra attribute holding the provider request id


def text_value(value: Any) -> str | None:
    """A scalar attribute as text. Captured headers are arrays (take the first); Jaeger turns
    arrays into JSON text, so a string that is a JSON array is read the same way."""
    if value is None:  # most look-ups find nothing
        return None
    if isinstance(value, str):
        if not (value.startswith("[") and value.endswith("]")):
            return value.strip() or None  # the common case: a plain string
        try:
            value = loads(value)
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
    """An int64 attribute value (given as int, integral float or text); None otherwise."""
    number = as_int(value)
    if number is None:
        number = as_int(text_value(value))
    return number if number is not None and number in INT64 else None


def _keys(keys: tuple[str, ...], extra: str | None) -> tuple[str, ...]:
    """`keys`, and after them the attribute name the user gave (if any)."""
    return (*keys, extra) if extra else keys


def _first(attrs: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    if attrs.keys().isdisjoint(keys):  # the usual answer, found without a Python loop
        return None
    for key in keys:
        value = attrs.get(key)
        if value is None:
            continue
        if type(value) is str and not value.startswith("["):  # `text_value`'s usual case
            if text := value.strip():
                return text
            continue
        if type(value) is list and value and type(value[0]) is str:  # a captured header
            if text := value[0].strip():
                return text
            continue
        if (text := text_value(value)) is not None:  # type: ignore[assignment]
            return text
    return None


def _first_int(attrs: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    if attrs.keys().isdisjoint(keys):
        return None
    for key in keys:
        if key in attrs:
            value = attrs[key]
            if type(value) is int:  # OTLP's intValue, already read: `int_value`'s usual case
                number: int | None = value if value in INT64 else None
            else:
                number = int_value(value)
            if number is not None:
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
                parsed = loads(value)
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


def _effect_fields(args: Any) -> tuple[str | None, int | None, str | None]:
    """(subject, amount, currency) of a tool call's arguments, as far as they say."""
    if not isinstance(args, dict):
        return None, None, None
    subject = None  # `text_value(None)` is None: a key that is absent needs no call
    for key in ("customer", "customer_id"):
        if (value := args.get(key)) is not None and (subject := text_value(value)):
            break
    amount = args.get("amount")
    if type(amount) is not int or amount not in INT64:  # else already the answer
        amount = int_value(amount)
    currency = args.get("currency")
    if currency is not None:
        currency = text_value(currency)
    return subject or None, amount, currency.lower() if currency else None


@functools.lru_cache(maxsize=4096)
def _url_path(url: str) -> str:
    """The path only: query strings and userinfo may hold secrets. Cached: spans repeat URLs."""
    if "://" not in url:
        return url.split("?", 1)[0]
    try:
        return urlsplit(url).path or "/"
    except ValueError:  # e.g. an unclosed IPv6 host "http://[::1/x": cut by hand
        rest = url.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
        return "/" + rest.split("/", 1)[1] if "/" in rest else "/"


def _path(attrs: dict[str, Any]) -> str | None:
    for key in URL_KEYS:
        url = text_value(attrs.get(key))
        if url:
            return _url_path(url)
    return None


def _delivery_offset_of(key: str) -> int | None:
    """What to add to an attribute's value to get a delivery count, or None when the attribute
    is no delivery count."""
    name = key.lower().replace("-", "_")
    if not name.endswith(DELIVERY_SUFFIXES):
        return None
    # RabbitMQ's x-delivery-count counts earlier failed deliveries (absent on the first)
    return 1 if name.endswith("x_delivery_count") else 0


_DELIVERY_OFFSETS: dict[str, int | None] = {}  # every span is checked against the same names
_NOT_COUNTS: set[str] = set()  # the names among them that are no count (most)
_MISSING = object()


def _delivery_offset(key: str) -> int | None:
    offset = _DELIVERY_OFFSETS.get(key, _MISSING)
    if offset is _MISSING:
        offset = _delivery_offset_of(key)
        if len(_DELIVERY_OFFSETS) < 65536:  # bounded: attribute names are few, unless hostile
            _DELIVERY_OFFSETS[key] = offset
            if offset is None:
                _NOT_COUNTS.add(key)
    return offset  # type: ignore[return-value]


def _delivery_count(attrs: dict[str, Any]) -> int | None:
    if _NOT_COUNTS.issuperset(attrs):  # the usual answer: every name known to be no count
        return None
    counts = []
    offsets = _DELIVERY_OFFSETS
    for key, value in attrs.items():
        offset = offsets.get(key, _MISSING)
        if offset is None:
            continue  # the usual case: a name already known not to be a count
        if offset is _MISSING:
            offset = _delivery_offset(key)
            if offset is None:
                continue
        # a count past int64 (RabbitMQ's int64 max, plus 1) is none: the column is int64
        number = int_value(value)
        if number is not None and (count := number + offset) in INT64:  # type: ignore[operator]
            counts.append(count)
    return max(counts) if counts else None


def tool_message_call_id(value: Any) -> str | None:
    """The tool call id in OpenInference's `output.value` of a TOOL span, when that value is a
    serialised LangChain ToolMessage (`langchain_core.messages.message_to_dict`), as
    `openinference-instrumentation-langchain` writes it for a tool that returned:
    `{"type": "tool", "data": {"content": ..., "type": "tool", "name": ..., "tool_call_id":
    "toolu_...", "status": "success", ...}}`. Anything else (a failed call has no output, a
    tool may return a plain string or a Command) gives None: nothing is guessed."""
    if type(value) is not str or not value.startswith("{"):
        return None
    try:
        message = loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(message, dict) or message.get("type") != "tool":
        return None
    data = message.get("data")
    if not isinstance(data, dict) or data.get("type") != "tool":
        return None
    call_id = data.get("tool_call_id")
    return (call_id.strip() or None) if isinstance(call_id, str) else None


def _is_tool(attrs: dict[str, Any], tool_attribute: str | None) -> bool:
    if not _TOOL_MARKER_KEYS.isdisjoint(attrs) or (tool_attribute and tool_attribute in attrs):
        return True
    # `text_value(None)` is None: the look-ups that find nothing (most) need no call
    operation = attrs.get("gen_ai.operation.name")
    if operation is not None and text_value(operation) == "execute_tool":
        return True
    span_kind = attrs.get("openinference.span.kind")
    return span_kind is not None and str(text_value(span_kind) or "").upper() == "TOOL"


_HTTP_KINDS = (SpanKind.CLIENT, SpanKind.UNKNOWN)  # an HTTP span: one with a method, of these


def _outcome(rec: SpanRecord, http_status: int | None) -> tuple[str, str | None]:
    """(outcome, detail). An explicit OK wins; then timeouts; then errors; an HTTP span with
    unset status is judged by its response code (semconv leaves 2xx client spans unset)."""
    error_type = rec.attributes.get("error.type")
    if error_type is not None:  # else already `text_value`'s answer
        error_type = text_value(error_type)
    exc_type, exc_message = rec.exceptions[-1] if rec.exceptions else (None, None)
    if exc_type or exc_message:
        detail: str | None = ": ".join(t for t in (exc_type, exc_message) if t)
    else:
        detail = rec.status_message or error_type
    if detail:
        detail = redact(detail)[:_DETAIL_MAX]
    if rec.status is SpanStatus.OK:
        return "ok", detail
    timed_out = False
    if error_type or rec.status_message or rec.exceptions:  # else no words to look for
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


def _inherited(
    links: dict[tuple[str, str], tuple[str | None, str | None, str | None]],
) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """(thread_id, tool_call_id) of every span, its own or its nearest ancestor's, from each
    span's (parent span id, own thread id, own tool call id).

    One pass over the parent links: each span is resolved once (memoised), so the cost is linear.
    """
    memo: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for start, (parent, thread, call) in links.items():
        # the usual cases first: a root span, or a span whose parent is already resolved
        if start in memo:
            continue
        if not parent:
            memo[start] = (thread or None, call or None)
            continue
        resolved = memo.get((start[0], parent))
        if resolved is not None:
            memo[start] = (thread or resolved[0], call or resolved[1])
            continue
        chain: list[tuple[str, str]] = []
        node: tuple[str, str] | None = start
        while node is not None and node not in memo and node in links:
            # placeholder until the chain is resolved: a parent cycle in bad data ends here
            memo[node] = (None, None)
            chain.append(node)
            parent = links[node][0]
            node = (node[0], parent) if parent else None
        above = memo.get(node, (None, None)) if node is not None else (None, None)
        for key in reversed(chain):
            _, thread, call = links[key]
            above = (thread or above[0], call or above[1])
            memo[key] = above
    return memo


class _Row(NamedTuple):
    """One span's timeline row: the columns every kind has, then those of some kinds.

    Only its field names are used: rows are built as plain tuples in this order (faster)."""

    origin: str
    kind: str
    at: int  # ns since the epoch
    end: int | None
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str | None
    worker: str | None
    outcome: str
    detail: str | None
    thread_id: str | None
    tool_call_id: str | None
    tool_name: str | None
    args: str | None
    args_fingerprint: str | None
    subject: str | None
    amount: int | None
    currency: str | None
    delivery_count: int | None
    message_id: str | None
    method: str | None
    path: str | None
    status: int | None
    resend_count: int | None
    request_id: str | None
    idempotency_key: str | None
    proxy_attempt: int | None


# the kind-specific tail of a row (thread_id onwards) with the fields other kinds have left null
_TAIL = len(_Row._fields) - _Row._fields.index("thread_id")
_TOOL_PAD = (None,) * (_TAIL - 8)
_QUEUE_PAD = (None,) * (_TAIL - 10)
_HTTP_PAD = (None,) * (_TAIL - 7)


def _tool_tail(rec: SpanRecord) -> tuple[Any, ...]:
    attrs = rec.attributes
    args_text, args = _arguments(attrs)
    name = _first(attrs, TOOL_NAME_KEYS)
    if name is None and rec.name and rec.name.startswith("execute_tool "):
        name = rec.name.removeprefix("execute_tool ").strip() or None
    # thread_id and tool_call_id are filled in by `SpanRows.frame` (maybe from an ancestor)
    return (None, None, name, args_text, fingerprint(args_text) if args_text else None,
            *_effect_fields(args), *_TOOL_PAD)


def _queue_tail(attrs: dict[str, Any], delivery_count: int, thread_id: str | None
                ) -> tuple[Any, ...]:
    return (thread_id, None, None, None, None, None, None, None, delivery_count,
            _first(attrs, ("messaging.message.id",)), *_QUEUE_PAD)


def _http_tail(
    rec: SpanRecord, status: int | None, request_id_keys: tuple[str, ...]
) -> tuple[Any, ...]:
    attrs = rec.attributes
    method = _first(attrs, HTTP_METHOD_KEYS)
    resend = _first_int(attrs, ("http.request.resend_count",))
    if resend is None and rec.kind == SpanKind.CLIENT and "http.request.method" in attrs:
        # The stable HTTP semconv (`http.request.method`, ...) sets the count only on resends:
        # a client span of it without one is try 0. The old semconv (`http.method`, what e.g.
        # opentelemetry-instrumentation-requests writes by default) has no resend count at all:
        # its absence says nothing, so it stays unknown (null), not 0.
        resend = 0
    return (*_HTTP_PAD, method.upper() if method else None, _path(attrs), status, resend,
            _first(attrs, request_id_keys), _first(attrs, IDEMPOTENCY_KEY_KEYS),
            _first_int(attrs, PROXY_ATTEMPT_KEYS))


class SpanRows:
    """The timeline rows of spans (see the module docstring), fed one span at a time.

    Each span is interpreted as soon as it is read, while its parsed JSON is still at hand, so
    no file-sized pile of records builds up. Only the thread id and tool call id of tool and
    HTTP rows wait for `frame()`: they may come from an ancestor that is read later.
    """

    def __init__(self, options: Options) -> None:
        self._tool_attribute = options.tool_attribute
        self._call_keys = _keys(TOOL_CALL_ID_KEYS, options.tool_attribute)
        self._request_id_keys = _keys(REQUEST_ID_KEYS, options.request_id_attribute)
        # every span added: (parent span id, own thread id, own tool call id)
        self._links: dict[tuple[str, str], tuple[str | None, str | None, str | None]] = {}
        self._rows: list[tuple[Any, ...]] = []  # in `_Row`'s field order
        self._inherits: list[tuple[str, str] | None] = []  # per row: whose ids it takes, if any
        self._resource: dict[str, Any] | None = None  # spans of one export share a resource:
        self._worker: str | None = None  # its worker is looked up once

    def add(self, rec: SpanRecord) -> bool:
        """Interpret one span; False (and nothing else) when that span was added before."""
        if LANGFUSE_TYPE in rec.attributes:
            rec = langfuse_as_genai(rec)
        # unpacked once: cheaper than a field look-up on the named tuple at every use
        (origin, trace_id, span_id, parent_span_id, name, span_kind, start_ns, end_ns, attrs,
         resource, *_) = rec
        key = (trace_id, span_id)
        links = self._links
        if key in links:
            return False
        thread_id = _first(attrs, THREAD_KEYS)
        call_id = _first(attrs, self._call_keys)
        links[key] = (parent_span_id, thread_id, call_id)
        http_status = None
        inherits: tuple[str, str] | None = key
        if _is_tool(attrs, self._tool_attribute):
            kind = _TOOL_SPAN
            tail = _tool_tail(rec)
            if call_id is None and (output := attrs.get("output.value")) is not None:
                # OpenInference: the id only in the returned ToolMessage (the spans under this
                # one inherit it, as they would an attribute)
                links[key] = (parent_span_id, thread_id, tool_message_call_id(output))
        elif (delivery_count := _delivery_count(attrs)) is not None:
            kind = _QUEUE_RECEIVE
            tail = _queue_tail(attrs, delivery_count, thread_id)
            inherits = None  # a queue receive is about its own message: nothing inherited
        elif not _HTTP_METHOD_KEY_SET.isdisjoint(attrs) and span_kind in _HTTP_KINDS:
            kind = _HTTP_SPAN
            http_status = _first_int(attrs, HTTP_STATUS_KEYS)
            tail = _http_tail(rec, http_status, self._request_id_keys)
        else:
            return True  # no row, but still an ancestor other spans may inherit from
        if resource is not self._resource:
            self._resource, self._worker = resource, _first(resource, HOST_KEYS)
        outcome, detail = _outcome(rec, http_status)
        if kind is _HTTP_SPAN and outcome == "ok" and \
                _first(attrs, REPLAYED_KEYS) in ("true", "True", "1"):
            outcome = "replayed"  # the provider answered from its idempotency cache
        self._rows.append((origin, kind, start_ns, end_ns, trace_id, span_id, parent_span_id,
                           name, self._worker, outcome, detail, *tail))
        self._inherits.append(inherits)
        return True

    def __len__(self) -> int:
        return len(self._rows)

    def unresolved(self) -> tuple[dict[str, Sequence[Any]], list[tuple[str, str] | None],
                                  dict[tuple[str, str], tuple[str | None, str | None, str | None]]]:
        """(the rows' columns, whose ids each row takes, every span's link), the thread and
        tool call ids not yet inherited: for the columnar reader, which inherits over its own
        spans and these together."""
        columns: dict[str, Sequence[Any]] = (
            dict(zip(_Row._fields, zip(*self._rows, strict=True), strict=True)) if self._rows
            else {name: () for name in _Row._fields})
        return columns, self._inherits, self._links

    def frame(self) -> pd.DataFrame:
        """The rows as a timeline, built column by column (times stay int ns until here)."""
        n = len(self._rows)
        if not n:
            return from_columns({}, 0)
        columns, _, _ = self.unresolved()
        resolved = _inherited(self._links)
        # one look-up per row: (thread_id, tool_call_id), its own or inherited
        ids = [(own, None) if key is None else resolved[key]
               for key, own in zip(self._inherits, columns["thread_id"], strict=True)]
        columns["thread_id"], columns["tool_call_id"] = zip(*ids, strict=True)
        return from_columns({"source": [SOURCE] * n, **columns}, n)
