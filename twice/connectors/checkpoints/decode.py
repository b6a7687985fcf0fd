"""Reading LangGraph checkpoint data safely: blobs, message facts, UUIDv6 times.

Checkpoint blobs are msgpack written by LangGraph's `JsonPlusSerializer`. Decoding them with the
serializer's default settings imports and calls whatever class a blob names, and a blob of type
"pickle" would be unpickled if `pickle_fallback` were on: both run code chosen by whoever wrote the
table. We read tables we did not write, so the serializer here is the strict one (only LangGraph's
`SAFE_MSGPACK_TYPES`, i.e. datetimes, UUIDs, LangChain messages, ...; anything else comes back as
its raw data) with pickle off, and "pickle" blobs are refused before they reach it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from twice.connectors.base import SourceWarning
from twice.connectors.checkpoints.blobs import (
    MAX_BLOB_BYTES,
    MAX_BLOB_CONTAINERS,
    REFUSED,
    Refused,
    blocked_warnings,
    decode_grown_list,
    msgpack_array_head,
    msgpack_array_header,
    too_many_containers,
)
from twice.connectors.checkpoints.facts import (
    NO_FACTS,
    Facts,
    ToolCallFact,
    ToolResultFact,
    calls_of,
    content_text,
    deep_enough,
    dict_facts,
    is_message_dict,
    outcome_of,
    result_of,
)
from twice.connectors.checkpoints.parse import CheckpointRecord, WriteRecord
from twice.connectors.checkpoints.times import (
    Window,
    datetime_ns,
    parse_ts,
    uuid6_bound,
    uuid6_time_ns,
)

__all__ = [  # the names this module had before its pure parts moved out, still importable
    "MAX_BLOB_BYTES", "MAX_BLOB_CONTAINERS", "REFUSED", "BlobDecoder", "CheckpointRecord",
    "LangChainMessages", "Refused", "ToolCallFact", "ToolResultFact", "WriteRecord", "Window",
    "content_text", "datetime_ns", "decode_grown_list", "deep_enough", "message_facts",
    "messages_in", "msgpack_array_head", "msgpack_array_header", "outcome_of", "parse_ts",
    "strict_serializer", "too_many_containers", "uuid6_bound", "uuid6_time_ns",
]

# Serialisation types JsonPlusSerializer.loads_typed understands without pickle.
_SAFE_TYPES = frozenset({"msgpack", "json", "null", "bytes", "bytearray"})
_EMPTY_TYPES = frozenset({"empty"})  # PostgresSaver's marker for a channel without a value


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
        self.warnings.extend(blocked_warnings(
            self.source, {(str(m), str(n)) for m, n in self._blocked}))

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


def message_facts(msg: Any, problems: list[str] | None = None) -> Facts:
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
        return calls_of(msg.__dict__.get("tool_calls"), said), None
    if isinstance(msg, ToolMessage):
        return [], result_of(msg.__dict__, said)
    if not isinstance(msg, dict):
        return NO_FACTS
    return dict_facts(msg, said)


def _looks_like_message(item: Any) -> bool:
    return isinstance(item, AIMessage | ToolMessage) or is_message_dict(item)


def messages_in(value: Any) -> list[Any]:
    """Message-like items in one channel value (a list, a single message, a delta snapshot)."""
    if isinstance(value, _DeltaSnapshot):
        value = value.value
    if isinstance(value, list | tuple):
        return [item for item in value if _looks_like_message(item)]
    return [value] if _looks_like_message(value) else []


class LangChainMessages:
    """How the parser reads values LangGraph's serializer decoded: LangChain message objects
    (and dict forms), channel values maybe wrapped in a delta snapshot."""

    @staticmethod
    def unwrap(value: Any) -> Any:
        return value.value if isinstance(value, _DeltaSnapshot) else value

    messages = staticmethod(messages_in)
    facts = staticmethod(message_facts)
