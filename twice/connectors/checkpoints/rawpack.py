"""Reading checkpoint blobs as stored: LangGraph's msgpack, with no LangChain object built.

LangGraph's serializer (`decode`) rebuilds every message of every checkpoint as a LangChain
object (pydantic validation, 20 µs each), which was most of the time of reading a checkpoint
file. Here the msgpack ext records LangGraph writes (`langgraph.checkpoint.serde.jsonplus`:
code 5 is a pydantic v2 model as (module, class, fields, method), codes 0-3 constructor and
method calls, 7 a delta snapshot) are read as data:
- an `AIMessage` / `ToolMessage` becomes a `Message` holding the facts the parser reads (tool
  calls, tool result), taken from its stored fields;
- LangChain's other message classes become an `Opaque` value (they hold no tool call);
- the other types on LangGraph's allow-list (datetimes, UUIDs, LangGraph's Send, ...) are built
  as LangGraph builds them; a class not on the allow-list is not built: its raw fields are kept
  and its name is reported, exactly as LangGraph's strict mode does.

The result must be what LangGraph's serializer and the LangChain classes give, so anything this
module cannot read exactly raises `Decline` (its reason said): a message whose fields the
LangChain classes would change on validation (bytes where text goes, tool calls LangChain would
parse out of `additional_kwargs`, content blocks, chunks), ext records inside a message or
inside another record, numpy arrays, a record that is not (module, name, data). The caller then
reads the source with LangGraph's serializer. Identity follows LangGraph's memoised hook
(`decode.strict_serializer`): the same ext bytes at the top of a blob give the same object
(within a thread, when the blobs come thread by thread).
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import ormsgpack
from langgraph.checkpoint.serde._msgpack import (  # the allow-list only (a small module)
    SAFE_MSGPACK_METHODS,
    SAFE_MSGPACK_TYPES,
)

from twice.connectors.base import SourceWarning
from twice.connectors.checkpoints.blobs import (
    MAX_BLOB_BYTES,
    blocked_warnings,
    too_many_containers,
)
from twice.connectors.checkpoints.facts import (
    NO_FACTS,
    Facts,
    ToolCallFact,
    ToolResultFact,
    calls_of,
    dict_facts,
    is_message_dict,
    result_of,
)

# LangGraph's ext codes (langgraph.checkpoint.serde.jsonplus)
EXT_CONSTRUCTOR_SINGLE_ARG = 0
EXT_CONSTRUCTOR_POS_ARGS = 1
EXT_CONSTRUCTOR_KW_ARGS = 2
EXT_METHOD_SINGLE_ARG = 3
EXT_PYDANTIC_V1 = 4
EXT_PYDANTIC_V2 = 5
EXT_NUMPY_ARRAY = 6
EXT_DELTA_SNAPSHOT = 7

_AI = ("langchain_core.messages.ai", "AIMessage")
_TOOL = ("langchain_core.messages.tool", "ToolMessage")
_OPTION = ormsgpack.OPT_NON_STR_KEYS


class Decline(Exception):  # noqa: N818 (not an error: the other path reads it)
    """This source holds something the raw path does not read exactly."""


class Message:
    """An AIMessage or ToolMessage as stored: the facts the parser reads from it."""

    __slots__ = ("calls", "problems", "result")
    __hash__ = None  # type: ignore[assignment]  # as a LangChain message: no use as a map key

    def __init__(self, calls: list[ToolCallFact], result: ToolResultFact | None,
                 problems: list[str]) -> None:
        self.calls = calls
        self.result = result
        self.problems = problems


class Opaque:
    """A LangChain object that is no AIMessage or ToolMessage (a human or system message)."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]


class Delta(NamedTuple):
    """LangGraph's delta snapshot of a channel (a named tuple there too: it compares, hashes
    and slices as LangGraph's `_DeltaSnapshot` does)."""

    value: Any


_MISSING = object()


class RawDecoder:
    """Decodes msgpack blobs of one source; `blocked` collects the (module, name) of classes
    not on LangGraph's allow-list, as LangGraph's serde events report them."""

    def __init__(self, per_thread: bool = True) -> None:
        self.blocked: set[tuple[str, str]] = set()
        self._per_thread = per_thread
        self.reason: str | None = None  # why it declined (ormsgpack hides a hook's exception)
        self._thread: Any = _MISSING
        self._exts = 0
        # the top-level records of this thread's blobs, by their bytes (and code, but for the
        # pydantic models that nearly all are)
        memo: dict[Any, Any] = {}
        self._memo = memo
        seen, ext = memo.get, self._ext

        def top(code: int, data: bytes) -> Any:
            key = data if code == EXT_PYDANTIC_V2 else (code, data)
            value = seen(key, _MISSING)
            if value is _MISSING:
                value = memo[key] = ext(code, data)
            return value

        self._top = top

    def decode(self, blob: bytes, thread_id: str | None = None) -> Any:
        """The value of a msgpack blob of `thread_id`'s. The same ext bytes give the same
        object, as with LangGraph's memoised hook: `per_thread`, until the thread changes
        (message identity only matters within a thread: memory stays one thread's)."""
        if self._per_thread and thread_id != self._thread:
            self._thread = thread_id
            self._memo.clear()
        try:
            return ormsgpack.unpackb(blob, ext_hook=self._top, option=_OPTION)
        except Exception as exc:
            raise Decline(self.reason or f"a blob LangGraph's serializer would not decode "
                                         f"({type(exc).__name__}: {exc})") from None
        finally:
            self.reason = None

    def _unpack(self, data: bytes) -> Any:
        return ormsgpack.unpackb(data, ext_hook=self._ext, option=_OPTION)

    def _decline(self, reason: str) -> Decline:
        self.reason = self.reason or reason
        return Decline(reason)

    def _ext(self, code: int, data: bytes) -> Any:
        self._exts += 1
        if code == EXT_DELTA_SNAPSHOT:
            return Delta(self._unpack(data))
        if EXT_CONSTRUCTOR_SINGLE_ARG <= code <= EXT_PYDANTIC_V2:
            return self._record(code, data)
        if code == EXT_NUMPY_ARRAY:
            raise self._decline("a numpy array")
        return None  # what LangGraph's hook answers for a code it does not know

    def _record(self, code: int, data: bytes) -> Any:
        exts = self._exts
        tup = self._unpack(data)
        nested = self._exts != exts
        if type(tup) is not list or len(tup) < (4 if code == EXT_METHOD_SINGLE_ARG else 3) \
                or type(tup[0]) is not str or type(tup[1]) is not str:
            raise self._decline(f"an ext record (code {code}) that is not (module, name, data)")
        module, cls, payload = tup[0], tup[1], tup[2]
        if code == EXT_METHOD_SINGLE_ARG:
            if type(tup[3]) is not str:
                raise self._decline("a method record whose method is not text")
            allowed = (module, cls, tup[3]) in SAFE_MSGPACK_METHODS
        else:
            allowed = (module, cls) in SAFE_MSGPACK_TYPES
        if not allowed:  # LangGraph keeps the raw fields (built from nested records as usual)
            self.blocked.add((module, cls))
            if nested:
                raise self._decline(f"{module}.{cls}, not on the allow-list, holds ext records")
            return payload
        if module.startswith("langchain_core.messages."):
            return self._message(code, (module, cls), payload, nested, data)
        if nested:  # its text (a repr) would name our stand-ins, not LangChain's objects
            raise self._decline(f"a {module}.{cls} holding ext records")
        return _build(code, tup)

    def _message(self, code: int, cls: tuple[str, str], payload: Any, nested: bool,
                 data: bytes) -> Any:
        if code != EXT_PYDANTIC_V2 or type(payload) is not dict or not _text_keys(payload):
            raise self._decline(f"a {'.'.join(cls)} not stored as a pydantic model's fields")
        if cls == _AI:
            if nested:
                raise self._decline("an AIMessage holding ext records")
            return _ai_message(payload, data, self)
        if cls == _TOOL:
            if nested:
                raise self._decline("a ToolMessage holding ext records")
            return _tool_message(payload, self)
        if cls[1].startswith(("AIMessage", "ToolMessage")):  # the chunks: LangChain rebuilds
            raise self._decline(f"a {'.'.join(cls)}")          # their tool calls from chunks
        if "tool_calls" in payload or "tool_call_id" in payload:
            raise self._decline(f"a {'.'.join(cls)} with tool call fields")
        return Opaque()  # a human, system, ... message: built by LangChain, holds no tool call


def _build(code: int, tup: list[Any]) -> Any:
    """A value of a type on the allow-list (a datetime, a UUID, LangGraph's Send or
    Interrupt, ...), built as LangGraph's ext hook builds it (a failure gives back the stored
    data, as there). Only the standard library's are common; LangGraph's module is imported
    only for a blob that holds one of its types."""
    try:
        if code == EXT_CONSTRUCTOR_POS_ARGS and tup[0] == "langgraph.types" \
                and tup[1] == "Send":
            from langgraph.types import Send

            args = tup[2]
            return Send(*args) if len(args) == 2 else Send(args[0], args[1], timeout=args[2])
        obj = getattr(importlib.import_module(tup[0]), tup[1])
        if code == EXT_CONSTRUCTOR_SINGLE_ARG:
            return obj(tup[2])
        if code == EXT_CONSTRUCTOR_POS_ARGS:
            return obj(*tup[2])
        if code == EXT_CONSTRUCTOR_KW_ARGS:
            return obj(**tup[2])
        if code == EXT_METHOD_SINGLE_ARG:
            return getattr(obj, tup[3])(tup[2])
        try:
            return obj(**tup[2])
        except Exception:
            return obj.model_construct(**tup[2]) if code == EXT_PYDANTIC_V2 \
                else obj.construct(**tup[2])
    except Exception:
        return tup[2]


def _text_keys(fields: dict[Any, Any]) -> bool:
    try:
        "".join(fields)  # (in C: fails on the first key that is not text)
    except TypeError:
        return False
    return True


def _has_bytes(value: Any) -> bool:
    """Whether bytes are anywhere in `value` (pydantic would read them as text)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bytes | bytearray):
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _ai_message(fields: dict[str, Any], data: bytes, decoder: RawDecoder) -> Message:
    """An AIMessage's tool calls as LangChain would have them.

    LangChain rebuilds each call from its name, args and id; when validation fails the stored
    fields are kept as they are (`model_construct`): either way the calls read are the stored
    ones. It differs only where pydantic changes them (bytes read as text), where LangChain
    takes the calls from elsewhere (OpenAI's `additional_kwargs.tool_calls` when no call is
    given, content blocks), and for chunks: those are declined."""
    if "content_blocks" in fields or "tool_call_chunks" in fields:
        raise decoder._decline("an AIMessage with content blocks or tool call chunks")
    calls = fields.get("tool_calls")
    extra = fields.get("additional_kwargs")
    if isinstance(extra, dict) and extra.get("tool_calls") \
            and not (calls or fields.get("invalid_tool_calls")):
        raise decoder._decline("an AIMessage whose calls LangChain reads from additional_kwargs")
    # (msgpack's bin 8/16/32 markers: without one, the record holds no bytes at all)
    if (b"\xc4" in data or b"\xc5" in data or b"\xc6" in data) and _has_bytes(calls):
        raise decoder._decline("an AIMessage whose tool calls hold bytes")
    problems: list[str] = []
    return Message(calls_of(calls, problems), None, problems)


def _tool_message(fields: dict[str, Any], decoder: RawDecoder) -> Message:
    """A ToolMessage's result as LangChain would have it: LangChain turns content that is not
    text or a list of text and objects into text, and an id that is a number into text."""
    content = fields.get("content")  # (none is None, which LangChain makes "None")
    if "content_blocks" in fields or not (
            type(content) is str
            or type(content) is list and all(type(c) in (str, dict) for c in content)):
        raise decoder._decline("a ToolMessage whose content LangChain would convert")
    # pydantic reads bytes as text, and LangChain a number as an id's text: not the stored value
    # (any other value fails validation, and LangChain keeps the stored fields as they are)
    for key, changed in (("tool_call_id", (int, float, bytes, bytearray)),
                         ("name", (bytes, bytearray)), ("status", (bytes, bytearray))):
        if isinstance(fields.get(key), changed):
            raise decoder._decline(f"a ToolMessage whose {key} LangChain would convert")
    if "status" not in fields:
        fields = {**fields, "status": "success"}  # the field's default
    problems: list[str] = []
    return Message([], result_of(fields, problems), problems)


def _holds_decoded_objects(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Message | Opaque | Delta):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


_NO_VALUE = frozenset({None, "empty", "null"})


class RawBlobs:
    """`decode.BlobDecoder`'s part on the raw path: the (type, blob) pairs it reads without a
    warning are decoded by `RawDecoder`; any other declines (LangGraph's path then says what
    is wrong with it). Classes off the allow-list are reported on exit, as there."""

    def __init__(self, source: str, warnings: list[SourceWarning], *,
                 per_thread: bool = False) -> None:
        self.source = source
        self.warnings = warnings
        self.raw = RawDecoder(per_thread)

    def __enter__(self) -> RawBlobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.warnings.extend(blocked_warnings(self.source, self.raw.blocked))

    def decode(self, type_: str | None, blob: bytes | memoryview | None, where: str,
               thread_id: str | None = None) -> Any:
        if type_ in _NO_VALUE or blob is None:  # (LangGraph's "null" is None whatever the blob)
            return None
        if type_ != "msgpack" or type(blob) is not bytes \
                and not isinstance(blob, bytes | bytearray | memoryview):
            raise Decline(f"a blob of type {type_!r} ({type(blob).__name__})")
        data = blob if type(blob) is bytes else bytes(blob)
        if len(data) > MAX_BLOB_BYTES or too_many_containers(data):
            raise Decline("a blob past the size caps")
        return self.raw.decode(data, thread_id)


class RawMessages:
    """The parser's `MessageReader` for values `RawDecoder` decoded."""

    @staticmethod
    def unwrap(value: Any) -> Any:
        return value.value if type(value) is Delta else value

    @staticmethod
    def messages(value: Any) -> list[Any]:
        if type(value) is Delta:
            value = value.value
        if isinstance(value, list | tuple):
            return [item for item in value if type(item) is Message or is_message_dict(item)]
        return [value] if type(value) is Message or is_message_dict(value) else []

    @staticmethod
    def facts(msg: Any, problems: list[str]) -> Facts:
        if type(msg) is Message:
            problems.extend(msg.problems)
            return msg.calls, msg.result
        if not isinstance(msg, dict):
            return NO_FACTS
        if _holds_decoded_objects(msg):  # LangChain objects inside a dict form
            raise Decline("a message in its dict form holding ext records")
        return dict_facts(msg, problems)
