"""What a checkpointed message says: the tool calls it asks for, or the tool result it carries.

Pure Python over decoded values, with no LangChain import: the LangGraph-serializer path
(`decode`) hands it the fields of rebuilt message objects, the raw msgpack path (`rawpack`) the
fields as stored. A message is whatever the blob said (LangGraph does not validate it), so every
field is checked for its shape: what does not fit is left out and said in `problems`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from twice.connectors.jsonfile import MAX_NESTING, loads

# tuples, not sets: a `type` field may hold any value, a list too
AI_KINDS = ("ai", "assistant", "AIMessage", "AIMessageChunk")
TOOL_KINDS = ("tool", "ToolMessage")


class ToolCallFact(NamedTuple):  # (a named tuple: made for every call read, so made cheaply)
    tool_call_id: str
    tool_name: str | None
    args: Any


class ToolResultFact(NamedTuple):
    tool_call_id: str
    tool_name: str | None
    status: str | None
    content: str


Facts = tuple[list[ToolCallFact], ToolResultFact | None]
NO_FACTS: Facts = ([], None)


def is_message_dict(item: Any) -> bool:
    """A message in its dict form (LangChain's or OpenAI's), as a channel may hold it."""
    return isinstance(item, dict) and ("tool_calls" in item or "tool_call_id" in item)


def dict_facts(msg: dict[Any, Any], problems: list[str]) -> Facts:
    """Facts of a message's dict form: LangChain's `{"type": "ai", "tool_calls": ...}` and
    OpenAI's `{"role": "assistant", "tool_calls": [{"function": ...}]}`."""
    kind = msg.get("type") or msg.get("role")
    if kind in AI_KINDS:
        return calls_of(msg.get("tool_calls"), problems), None
    if kind in TOOL_KINDS and msg.get("tool_call_id"):
        return [], result_of(msg, problems)
    return NO_FACTS


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


def calls_of(value: Any, problems: list[str]) -> list[ToolCallFact]:
    """The tool calls of an AI message's `tool_calls` field."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        problems.append(f"tool_calls is {_kind(value)}, not a list; its calls were not read")
        return []
    calls = []
    for tc in value:
        if type(tc) is not dict and not isinstance(tc, Mapping):
            problems.append(f"a tool call is {_kind(tc)}, not an object; skipped")
            continue
        fn = tc.get("function")
        if fn is not None and isinstance(fn, Mapping):  # OpenAI shape
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


def result_of(fields: Mapping[str, Any], problems: list[str]) -> ToolResultFact | None:
    """The tool result a tool message's fields carry."""
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
    if type(value) is dict and limit > 0 and not any(map(_nests, value.values())):
        return True  # (the usual arguments: one object of plain values)
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


_PLAIN = frozenset({str, int, float, bool, type(None), bytes})


def _nests(value: Any) -> bool:
    return type(value) not in _PLAIN


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
