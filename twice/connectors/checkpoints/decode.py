"""Reading LangGraph checkpoint data safely: blobs, message facts, UUIDv6 times.

Checkpoint blobs are msgpack written by LangGraph's `JsonPlusSerializer`. Decoding them with the
serializer's default settings imports and calls whatever class a blob names, and a blob of type
"pickle" would be unpickled if `pickle_fallback` were on: both run code chosen by whoever wrote the
table. We read tables we did not write, so the serializer here is the strict one (only LangGraph's
`SAFE_MSGPACK_TYPES`, i.e. datetimes, UUIDs, LangChain messages, ...; anything else comes back as
its raw data) with pickle off, and "pickle" blobs are refused before they reach it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from twice.connectors.base import EARLIEST, LATEST, SourceWarning
from twice.connectors.jsonfile import MAX_NESTING, loads

# What one blob may cost: decoding makes an object of every msgpack value, 60x the bytes for
# empty lists and maps, so a blob is refused past this size or this many lists and maps
# (counted exactly, in the ext records too, only when its bytes could hold that many).
MAX_BLOB_BYTES = 32 * 2**20
MAX_BLOB_CONTAINERS = 1_000_000
_NOT_CONTAINER = bytes(b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF
                                                      or 0xC7 <= b <= 0xC9 or 0xD4 <= b <= 0xD8))
# Serialisation types JsonPlusSerializer.loads_typed understands without pickle.
_SAFE_TYPES = frozenset({"msgpack", "json", "null", "bytes", "bytearray"})
_EMPTY_TYPES = frozenset({"empty"})  # PostgresSaver's marker for a channel without a value

# Times outside 2000-2100 (_parsing.EARLIEST/LATEST) are garbage, not checkpoints; near the
# edges of what pandas holds (1677-2262) the engine's arithmetic on them would overflow.
_MIN_NS, _MAX_NS = int(EARLIEST.timestamp()) * 10**9, int(LATEST.timestamp()) * 10**9
# 100 ns intervals between the Gregorian epoch (UUID time zero) and the Unix epoch.
_UUID_EPOCH_OFFSET = 0x01B21DD213814000


class Refused:
    """Marker for a blob that was not decoded (pickle, unknown type, corrupt)."""


REFUSED = Refused()


def strict_serializer() -> JsonPlusSerializer:
    """LangGraph's serializer in strict mode, whose msgpack ext hook is memoised.

    A checkpoint stores the whole message list again at every step, so the same message bytes are
    decoded thousands of times in a long thread. The memo keeps LangGraph's own strict hook (and
    its allow-list) but rebuilds each distinct message once.
    """
    strict = JsonPlusSerializer(
        pickle_fallback=False, allowed_msgpack_modules=None, allowed_json_modules=None
    )
    hook: Callable[[int, bytes], Any] | None = getattr(strict, "_unpack_ext_hook", None)
    if hook is None:  # a future langgraph without the attribute: strict, just slower
        return strict
    caches: dict[int, dict[bytes, Any]] = {}

    def memo_hook(code: int, data: bytes) -> Any:
        cache = caches.get(code)
        if cache is None:
            cache = caches[code] = {}
        try:
            return cache[data]
        except KeyError:
            value = cache[data] = hook(code, data)
            return value

    return JsonPlusSerializer(
        pickle_fallback=False,
        allowed_msgpack_modules=None,
        allowed_json_modules=None,
        __unpack_ext_hook__=memo_hook,
    )


class BlobDecoder:
    """Decodes (type, blob) pairs from one source; problems become warnings, never exceptions."""

    def __init__(self, source: str, warnings: list[SourceWarning]) -> None:
        self.source = source
        self.warnings = warnings
        self._serde = strict_serializer()
        self._blocked: set[tuple[str, str]] = set()
        self._unregister: Callable[[], None] | None = None
        self.refused_pickle = 0

    def __enter__(self) -> BlobDecoder:
        def on_event(event: Any) -> None:
            if event.get("kind") in ("msgpack_blocked", "msgpack_method_blocked"):
                self._blocked.add((str(event.get("module")), str(event.get("name"))))

        self._unregister = register_serde_event_listener(on_event)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._unregister is not None:
            self._unregister()
        for module, name in sorted(self._blocked):
            self.warnings.append(SourceWarning(
                self.source,
                f"blobs name the type {module}.{name}, which is not on LangGraph's safe "
                "allow-list; it was not constructed (its raw fields were kept)",
            ))

    def decode(self, type_: str | None, blob: bytes | memoryview | None, where: str) -> Any:
        if type_ is None or type_ in _EMPTY_TYPES or blob is None and type_ != "null":
            return None
        if type_ == "pickle":
            self.refused_pickle += 1
            self.warnings.append(SourceWarning(
                where, "blob is stored as pickle; refused to unpickle it (unpickling runs code "
                "chosen by whoever wrote the table); its contents were not read",
            ))
            return REFUSED
        if type_ not in _SAFE_TYPES:
            self.warnings.append(SourceWarning(
                where, f"blob has unknown serialisation type {type_!r}; skipped"))
            return REFUSED
        if not isinstance(blob, bytes | bytearray | memoryview | None):
            self.warnings.append(SourceWarning(
                where, f"blob is {type(blob).__name__}, not bytes; skipped"))
            return REFUSED
        data = bytes(blob or b"")
        if len(data) > MAX_BLOB_BYTES:
            self.warnings.append(SourceWarning(
                where, f"blob is {len(data) / 2**20:.0f} MiB, more than the "
                       f"{MAX_BLOB_BYTES // 2**20} MiB twice decodes; skipped"))
            return REFUSED
        if type_ == "msgpack" and too_many_containers(data):
            self.warnings.append(SourceWarning(
                where, f"blob holds more than {MAX_BLOB_CONTAINERS:,} lists and maps; skipped "
                       "(no checkpoint holds so many)"))
            return REFUSED
        try:
            return self._serde.loads_typed((type_, data))
        except Exception as exc:  # corrupt data is data: say so and go on
            self.warnings.append(SourceWarning(
                where, f"cannot decode {type_} blob ({type(exc).__name__}: {exc}); skipped"))
            return REFUSED


# msgpack's fixed-size values: marker -> bytes after the marker
_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,
          0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_SIZED = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin / str: size of the length
_EXT = {0xC7: 1, 0xC8: 2, 0xC9: 4}
_BIG = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}  # array/map: size, items each


def too_many_containers(blob: bytes, limit: int = MAX_BLOB_CONTAINERS) -> bool:
    """Whether the msgpack `blob` holds more than `limit` arrays and maps, ext payloads
    included. Its bytes are counted first (in C): most blobs cannot hold that many."""
    if len(blob.translate(None, _NOT_CONTAINER)) <= limit:
        return False
    containers = 0
    spans = [(0, len(blob))]  # (start, end) of msgpack data to walk: the blob, ext payloads
    while spans:
        i, end = spans.pop()
        while i < end:
            b = blob[i]
            i += 1
            if b <= 0x7F or b >= 0xE0:
                continue
            if b <= 0x9F:  # fixmap, fixarray
                containers += 1
            elif b <= 0xBF:  # fixstr
                i += b & 0x1F
            elif b in _FIXED:
                i += _FIXED[b]
            elif b in _SIZED:
                width = _SIZED[b]
                i += width + int.from_bytes(blob[i:i + width], "big")
            elif b in _FIXEXT:
                spans.append((i + 1, min(end, i + 1 + _FIXEXT[b])))
                i += 1 + _FIXEXT[b]
            elif b in _EXT:
                width = _EXT[b]
                size = int.from_bytes(blob[i:i + width], "big")
                spans.append((i + width + 1, min(end, i + width + 1 + size)))
                i += width + 1 + size
            elif b in _BIG:
                containers += 1
                i += _BIG[b][0]
            if containers > limit:
                return True
    return False


def msgpack_array_head(blob: bytes) -> tuple[int, int] | None:
    """(item count, header size) when `blob` is a msgpack array, else None."""
    if not blob:
        return None
    first = blob[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F, 1
    if first == 0xDC and len(blob) >= 3:
        return int.from_bytes(blob[1:3], "big"), 3
    if first == 0xDD and len(blob) >= 5:
        return int.from_bytes(blob[1:5], "big"), 5
    return None


def msgpack_array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def decode_grown_list(
    decoder: BlobDecoder, previous: tuple[bytes, list[Any]] | None, blob: bytes, where: str
) -> tuple[bytes, list[Any]] | None:
    """Decode a msgpack list blob that may extend the previous version's list.

    PostgresSaver stores a message channel's whole list again at every version. msgpack arrays
    are their items' encodings back to back, so when the new blob's items start with the old
    blob's items byte for byte, only the new tail needs decoding. Returns (items bytes, list),
    or None when the blob is not a list extending `previous` (then decode it whole).
    """
    head = msgpack_array_head(blob)
    if head is None or previous is None:
        return None
    count, size = head
    old_body, old_items = previous
    if count < len(old_items) or not blob.startswith(old_body, size):
        return None
    tail = decoder.decode("msgpack", msgpack_array_header(count - len(old_items))
                          + blob[size + len(old_body):], where)
    if not isinstance(tail, list):
        return None
    return blob[size:], old_items + tail


# --- messages -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCallFact:
    tool_call_id: str
    tool_name: str | None
    args: Any


@dataclass(frozen=True, slots=True)
class ToolResultFact:
    tool_call_id: str
    tool_name: str | None
    status: str | None
    content: str


def content_text(content: Any) -> str:
    """Message content as text (LangChain content may be a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                parts.append(_json_text(block))
        return "".join(parts)
    if content is None:
        return ""
    return _json_text(content)


def _json_text(value: Any) -> str:
    """A decoded value as JSON text; msgpack maps may have keys JSON has not (numbers, bytes)."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except (orjson.JSONEncodeError, TypeError):
        return f"<{type(value).__name__} that is not JSON>"


def _openai_args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return loads(raw)
        except orjson.JSONDecodeError:  # not JSON, or nested too deep: kept as the text
            return raw
    return raw


def message_facts(msg: Any, problems: list[str] | None = None
                  ) -> tuple[list[ToolCallFact], ToolResultFact | None]:
    """Tool calls an AI message asks for, or the tool result a tool message carries.

    Accepts LangChain message objects and, for blobs whose message classes were not rebuilt,
    their dict forms (LangChain's `{"type": "ai", "tool_calls": ...}` and OpenAI's
    `{"role": "assistant", "tool_calls": [{"function": ...}]}`). A rebuilt message is whatever
    the blob said (LangGraph does not validate it), so every field is checked for its shape:
    what does not fit (tool_calls that are not a list, a call that is not an object, an id that
    is not text, arguments nested deeper than any call's) is left out and said in `problems`.
    """
    said = problems if problems is not None else []
    if isinstance(msg, AIMessage):
        return _calls(msg.__dict__.get("tool_calls"), said), None
    if isinstance(msg, ToolMessage):
        return [], _result(msg.__dict__, said)
    if not isinstance(msg, dict):
        return [], None
    kind = msg.get("type") or msg.get("role")
    if kind in ("ai", "assistant", "AIMessage", "AIMessageChunk"):
        return _calls(msg.get("tool_calls"), said), None
    if kind in ("tool", "ToolMessage") and msg.get("tool_call_id"):
        return [], _result(msg, said)
    return [], None


def _calls(value: Any, problems: list[str]) -> list[ToolCallFact]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        problems.append(f"tool_calls is {_kind(value)}, not a list; its calls were not read")
        return []
    calls = []
    for tc in value:
        if not isinstance(tc, Mapping):
            problems.append(f"a tool call is {_kind(tc)}, not an object; skipped")
            continue
        fn = tc.get("function")
        if isinstance(fn, Mapping):  # OpenAI shape
            name, args = fn.get("name"), _openai_args(fn.get("arguments"))
        else:
            name, args = tc.get("name"), tc.get("args")
        call_id = _id(tc.get("id"), "a tool call's id", problems)
        if call_id is None:
            continue
        if not deep_enough(args):
            problems.append(f"tool call {call_id}: arguments nested deeper than {MAX_NESTING} "
                            "levels; read without them")
            args = None
        calls.append(ToolCallFact(call_id, _name(name, problems), args))
    return calls


def _result(fields: Mapping[str, Any], problems: list[str]) -> ToolResultFact | None:
    call_id = _id(fields.get("tool_call_id"), "a tool result's tool_call_id", problems)
    if call_id is None:
        return None
    status = fields.get("status")
    content = fields.get("content")
    if not deep_enough(content):
        problems.append(f"tool result {call_id}: content nested deeper than {MAX_NESTING} "
                        "levels; read without it")
        content = None
    return ToolResultFact(call_id, _name(fields.get("name"), problems),
                          status if isinstance(status, str) else None, content_text(content))


def _id(value: Any, what: str, problems: list[str]) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value not in (None, ""):
        problems.append(f"{what} is {_kind(value)}, not text; skipped")
    return None


def _name(value: Any, problems: list[str]) -> str | None:
    if value is None or isinstance(value, str):
        return value
    problems.append(f"a tool name is {_kind(value)}, not text; read without it")
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    kind = type(value).__name__
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def deep_enough(value: Any, limit: int = MAX_NESTING) -> bool:
    """True when `value` (decoded JSON or msgpack) nests no deeper than `limit`: what is read
    out of it level by level (canonical JSON, fingerprints) then cannot run out of stack."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return False
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, Mapping | list | tuple))
    return True


def _looks_like_message(item: Any) -> bool:
    return isinstance(item, AIMessage | ToolMessage) or (
        isinstance(item, dict) and ("tool_calls" in item or "tool_call_id" in item))


def messages_in(value: Any) -> Iterator[Any]:
    """Message-like items in one channel value (a list, a single message, a delta snapshot)."""
    if isinstance(value, _DeltaSnapshot):
        value = value.value
    if isinstance(value, list | tuple):
        for item in value:
            if _looks_like_message(item):
                yield item
    elif _looks_like_message(value):
        yield value


_TIMEOUT = re.compile(r"time[d]?[\s_-]?out|timeout", re.I)


def outcome_of(result: ToolResultFact) -> str:
    """ok | error | unknown | timeout, in the tool result's own words."""
    if result.status == "error":
        return "error"
    try:
        parsed = loads(result.content)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and str(parsed.get("status", "")).lower() == "unknown":
        return "unknown"
    if _TIMEOUT.search(result.content):
        return "timeout"
    return "ok"


# --- time -----------------------------------------------------------------------------------


def uuid6_time_ns(checkpoint_id: str) -> int | None:
    """Unix nanoseconds embedded in a UUIDv6 checkpoint id (None if it is not a UUIDv6)."""
    try:
        u = uuid.UUID(checkpoint_id)
    except (ValueError, TypeError, AttributeError):
        return None
    if u.version != 6:
        return None
    ticks = (u.time_low << 28) | (u.time_mid << 12) | (u.time_hi_version & 0x0FFF)
    ns = (ticks - _UUID_EPOCH_OFFSET) * 100
    return ns if _MIN_NS <= ns <= _MAX_NS else None  # past 2100: not a real checkpoint


def uuid6_bound(at_ns: int, upper: bool) -> str:
    """The smallest (or largest) UUIDv6 text whose timestamp is `at_ns` (Unix ns).

    UUIDv6 puts the timestamp first, most significant bits first, so the text of the ids sorts
    in time order and a time window is an id range.
    """
    ticks = at_ns // 100 + _UUID_EPOCH_OFFSET
    value = ((ticks >> 12) & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x6 << 76 | (ticks & 0x0FFF) << 64
    value |= (0xBFFF if upper else 0x8000) << 48  # variant bits 10, then the clock sequence
    value |= 0xFFFF_FFFF_FFFF if upper else 0
    return str(uuid.UUID(int=value))


@dataclass(frozen=True)
class Window:
    """Which checkpoints to read: some threads (None: all), a time range (None: open)."""

    thread_ids: tuple[str, ...] | None = None
    since_ns: int | None = None
    until_ns: int | None = None

    # `ts` is taken a moment after the id is minted (and a run that only saves on exit keeps
    # an older id), so the id range is widened and rows are cut on `at` afterwards.
    MARGIN_NS = 60 * 1_000_000_000

    def id_low(self) -> str | None:
        return None if self.since_ns is None else uuid6_bound(self.since_ns - self.MARGIN_NS,
                                                              upper=False)

    def id_high(self) -> str | None:
        return None if self.until_ns is None else uuid6_bound(self.until_ns + self.MARGIN_NS,
                                                              upper=True)

    def contains(self, at_ns: int) -> bool:
        return (self.since_ns is None or at_ns >= self.since_ns) and (
            self.until_ns is None or at_ns <= self.until_ns)


def datetime_ns(dt: datetime) -> int:
    """Unix nanoseconds of an aware datetime (naive means UTC), without float rounding."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One checkpoint row as read from a saver's tables, blobs already decoded."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    ts: Any  # the checkpoint's own `ts` (ISO 8601 text), None if unreadable
    metadata: Mapping[str, Any]
    values: Mapping[str, Any]  # channel -> decoded value
    context_only: bool = False  # read only to know what came before the window


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """One pending write (a task's output saved against the checkpoint it started from)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    channel: str
    value: Any


def parse_ts(ts: Any) -> int | None:
    """Unix nanoseconds of a checkpoint's ISO 8601 `ts` (None when missing or unreadable)."""
    if not isinstance(ts, str) or not ts:
        return None
    try:
        ns = datetime_ns(datetime.fromisoformat(ts))
    except (ValueError, OverflowError):
        return None
    return ns if _MIN_NS <= ns <= _MAX_NS else None
