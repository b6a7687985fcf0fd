"""LangSmith runs (an export of the runs API: a JSON array, `{"runs": [...]}` as `POST
/runs/query` answers, or one run a line) into `SpanRecord`s, spelled as OTel GenAI spans so the
one interpretation (`twice.connectors.spans.interpret`) reads them.

A run as LangSmith stores what langchain_core's tracer made of a tool call (langchain_core
`tracers/core.py` `_create_tool_run`: the callback's keyword arguments become `extra`, so
`extra.tool_call_id`; the run's metadata is `extra.metadata`, where LangGraph puts `thread_id`,
`langgraph_step`, `langgraph_node`, `checkpoint_ns`): `id` and `trace_id` (UUIDs), `name` (the
tool), `run_type` (`tool`, `chain`, `llm`, ...), `inputs` (`{"input": "<args>"}` or the args;
`<args>` is JSON, or a Python dict's text from langchain-core 1.2 and older),
`outputs` (`{"output": <ToolMessage>}`), `error` (the traceback's text), `start_time` and
`end_time` (ISO-8601, UTC when no zone is given), `parent_run_id`. A tool run becomes an
`execute_tool` span; every other run only an ancestor, passing its thread id down.
"""

from __future__ import annotations

import ast
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from twice.connectors.base import SourceWarning
from twice.connectors.jsonfile import loads
from twice.connectors.spans.model import LATEST_NS, MIN_NS, SpanKind, SpanRecord, SpanStatus

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def is_run(doc: Any) -> bool:
    return isinstance(doc, dict) and "run_type" in doc and "id" in doc and "start_time" in doc


def runs_of(doc: Any) -> list[Any] | None:
    """The runs a document holds; None when it holds none (is no LangSmith export)."""
    if is_run(doc):
        return [doc]
    if isinstance(doc, dict) and isinstance(doc.get("runs"), list):
        doc = doc["runs"]
    if isinstance(doc, list) and doc and is_run(doc[0]):
        return doc
    return None


def uuid_hex(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return uuid.UUID(value).hex
    except ValueError:
        return None


def iso_ns(value: Any) -> int | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)  # LangSmith writes UTC times without a zone
    return ((at - _EPOCH) // _US) * 1000


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _message_call_id(output: Any) -> str | None:
    """The tool call id of a returned ToolMessage: langchain's dump (`{"lc": 1, "kwargs": {...}}`)
    or a plain message dict."""
    if isinstance(output, str) and output.startswith("{"):
        try:
            output = loads(output)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(output, dict):
        return None
    kwargs = _object(output.get("kwargs")) or output
    return _text(kwargs.get("tool_call_id"))


_MAX_REPR = 65536  # longer `inputs.input` text is not read as a Python literal


def _literal(text: str) -> Any:
    """A Python literal's value (langchain-core 1.2 and older trace a tool's input as `str(dict)`:
    `{'customer': 'cus_1', 'amount': 500}`); None for anything else. `ast.literal_eval` runs no
    code; the length cap and the caught errors keep hostile text from costing more than that."""
    if len(text) > _MAX_REPR:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _arguments(inputs: Any) -> str | None:
    """The tool's arguments as JSON text: `inputs` itself, or the JSON text (or Python dict's
    text) in `inputs.input`."""
    if not isinstance(inputs, dict):
        return None
    args: Any = {k: v for k, v in inputs.items() if k not in ("tool_call_id", "callbacks")}
    if set(args) == {"input"}:
        args = args["input"]
        if isinstance(args, str):
            try:
                args = loads(args)
            except orjson.JSONDecodeError:
                args = _literal(args)
    if not isinstance(args, dict):
        return None
    try:
        return orjson.dumps(args).decode()
    except (orjson.JSONEncodeError, TypeError):  # a literal's set, bytes or non-text keys
        return None


def _exception(error: str) -> tuple[str | None, str | None]:
    """(type, message) from the last line of a traceback (`TimeoutError: read timed out`)."""
    last = next((line.strip() for line in reversed(error.splitlines()) if line.strip()), "")
    kind, sep, message = last.partition(": ")
    if sep and kind.replace(".", "").replace("_", "").isalnum() and " " not in kind:
        return kind, message or None
    return None, last or None


def _record(run: Any, origin: str, where: str, warnings: list[SourceWarning]
            ) -> SpanRecord | None:
    def warn(detail: str) -> None:
        warnings.append(SourceWarning(origin, f"{where}: {detail}"))

    if not isinstance(run, dict):
        warn("not a run object; skipped")
        return None
    run_id = uuid_hex(run.get("id"))
    trace_id = uuid_hex(run.get("trace_id")) or run_id
    if run_id is None or trace_id is None:
        warn("no valid run id (a UUID); skipped")
        return None
    start = iso_ns(run.get("start_time"))
    if start is None or not MIN_NS <= start < LATEST_NS:
        warn(f"run {run_id}: no readable start_time (ISO-8601, 1973-2100); skipped")
        return None
    end = iso_ns(run.get("end_time"))
    if end is not None and not start <= end < LATEST_NS:
        warn(f"run {run_id}: end_time is before start_time or after 2100; end left empty")
        end = None
    raw_parent = run.get("parent_run_id")
    parent = uuid_hex(raw_parent)
    if raw_parent and parent is None:
        warn(f"run {run_id}: unreadable parent_run_id; treated as a root run")
    extra = _object(run.get("extra"))
    metadata = _object(extra.get("metadata"))
    inputs, outputs = run.get("inputs"), _object(run.get("outputs"))
    attrs: dict[str, Any] = {}
    if thread := _text(metadata.get("thread_id")):
        attrs["gen_ai.conversation.id"] = thread
    name = _text(run.get("name"))
    if run.get("run_type") == "tool":
        attrs["gen_ai.operation.name"] = "execute_tool"
        if name:
            attrs["gen_ai.tool.name"] = name
        call_id = (_text(extra.get("tool_call_id"))
                   or (_text(inputs.get("tool_call_id")) if isinstance(inputs, dict) else None)
                   or _text(metadata.get("tool_call_id"))
                   or _message_call_id(outputs.get("output")))
        if call_id:
            attrs["gen_ai.tool.call.id"] = call_id
        if (args := _arguments(inputs)) is not None:
            attrs["gen_ai.tool.call.arguments"] = args
    error = run.get("error")
    exceptions: list[tuple[str | None, str | None]] = []
    status = SpanStatus.UNSET
    if isinstance(error, str) and error.strip():
        status = SpanStatus.ERROR
        exceptions.append(_exception(error))
    elif run.get("status") == "error":
        status = SpanStatus.ERROR
    elif run.get("status") == "success" or end is not None:
        status = SpanStatus.OK
    return SpanRecord(origin, trace_id, run_id, parent, name, SpanKind.INTERNAL, start, end,
                      attrs, {}, status, None, exceptions)


def langsmith_spans(runs: list[Any], origin: str, warnings: list[SourceWarning]
                    ) -> list[SpanRecord]:
    """Every readable run of an export; unreadable runs become warnings."""
    out = []
    for i, run in enumerate(runs):
        rec = _record(run, origin, f"runs[{i}]", warnings)
        if rec is not None:
            out.append(rec)
    return out
