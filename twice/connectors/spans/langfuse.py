"""Langfuse observations (its public API's `GET /api/public/v2/observations` pages, `{"data":
[observations], "meta": {...}}`, a JSON array of observations, or one a line) into
`SpanRecord`s spelled as the Langfuse SDK's own OTLP spans, so the one interpretation
(`twice.connectors.spans.interpret.langfuse_as_genai`) reads both the same way.

An observation as the API gives it (the SDK's generated client, `ObservationV2`): `id`,
`traceId`, `parentObservationId`, `type` (`TOOL`, `SPAN`, `CHAIN`, `GENERATION`, ...), `name`,
`startTime` / `endTime` (ISO-8601), `level` (`ERROR` for a failure) and `statusMessage`,
`sessionId`, `input` (the raw text the SDK sent), and `metadata`, where the LangChain handler's
`tool_call_id` and LangGraph's `thread_id` are (Langfuse parses the JSON the SDK sent, so they
are plain text; a still-quoted value is unquoted as in a span). Spans Langfuse ingested over
OTLP keep the span's hex ids; observations of its older ingestion API may have other ids: a
32-hex trace id and 16-hex span id are then derived from them (a stable hash).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from twice.connectors.base import SourceWarning
from twice.connectors.spans.langsmith import iso_ns
from twice.connectors.spans.model import LATEST_NS, MIN_NS, SpanKind, SpanRecord

_META = "langfuse.observation.metadata."
_HEX16 = re.compile(r"[0-9a-f]{16}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
# the metadata keys a tool observation is read by (others stay out of the record)
_METADATA_KEYS = ("tool_call_id", "thread_id", "langgraph_step", "langgraph_node",
                  "checkpoint_ns", "langfuse_session_id")
_HOST_KEYS = ("host.name", "hostname", "service.instance.id")  # interpret.HOST_KEYS


def is_observation(doc: Any) -> bool:
    return (isinstance(doc, dict) and "traceId" in doc and "startTime" in doc and "id" in doc
            and "type" in doc and ("projectId" in doc or "parentObservationId" in doc))


def observations_of(doc: Any) -> list[Any] | None:
    """The observations a document holds; None when it holds none (is no Langfuse answer)."""
    if is_observation(doc):
        return [doc]
    if isinstance(doc, dict) and isinstance(doc.get("data"), list) and \
            isinstance(doc.get("meta"), dict):
        doc = doc["data"]
        if not doc:
            return []  # an empty page of the API
    if isinstance(doc, list) and doc and is_observation(doc[0]):
        return doc
    return None


def hex_id(value: Any, width: int) -> str | None:
    """A `width`-hex id: the id itself when it is hex of that width (OTLP-ingested), else a
    stable hash of its text (ids of Langfuse's older ingestion API are UUIDs or any text)."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().lower()
    if (_HEX32 if width == 32 else _HEX16).fullmatch(text):
        return text
    return hashlib.sha256(value.strip().encode()).hexdigest()[:width]


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool) or value is None or isinstance(value, dict | list):
        return None
    text = str(value).strip()
    return text or None


def _text(value: Any) -> str | None:
    """`input` as text: the API gives the raw text the SDK sent (older servers the JSON)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return None


def _record(obs: Any, origin: str, where: str, warnings: list[SourceWarning]
            ) -> SpanRecord | None:
    def warn(detail: str) -> None:
        warnings.append(SourceWarning(origin, f"{where}: {detail}"))

    if not isinstance(obs, dict):
        warn("not an observation object; skipped")
        return None
    span_id, trace_id = hex_id(obs.get("id"), 16), hex_id(obs.get("traceId"), 32)
    if span_id is None or trace_id is None:
        warn("no observation id or trace id; skipped")
        return None
    start = iso_ns(obs.get("startTime"))
    if start is None or not MIN_NS <= start < LATEST_NS:
        warn(f"observation {span_id}: no readable startTime (ISO-8601, 1973-2100); skipped")
        return None
    end = iso_ns(obs.get("endTime"))
    if end is not None and not start <= end < LATEST_NS:
        warn(f"observation {span_id}: endTime is before startTime or after 2100; end left "
             "empty")
        end = None
    raw_parent = obs.get("parentObservationId")
    parent = hex_id(raw_parent, 16) if raw_parent else None
    attrs: dict[str, Any] = {}
    kind = obs.get("type")
    if isinstance(kind, str) and kind.strip():
        attrs["langfuse.observation.type"] = kind.strip().lower()
    name = _scalar(obs.get("name"))
    if name:
        attrs["langfuse.observation.name"] = name
    for field, key in (("level", "langfuse.observation.level"),
                       ("statusMessage", "langfuse.observation.status_message"),
                       ("sessionId", "langfuse.session.id")):
        if (value := _scalar(obs.get(field))) is not None:
            attrs[key] = value
    if (given := _text(obs.get("input"))) is not None:
        attrs["langfuse.observation.input"] = given
    metadata = obs.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    for key in _METADATA_KEYS:
        if (value := _scalar(metadata.get(key))) is not None:
            attrs[_META + key] = value
    resource_attrs = metadata.get("resourceAttributes")
    resource = {k: v for k, v in resource_attrs.items() if k in _HOST_KEYS
                and _scalar(v) is not None} if isinstance(resource_attrs, dict) else {}
    return SpanRecord(origin, trace_id, span_id, parent, name, SpanKind.INTERNAL, start, end,
                      attrs, resource)


_READ_FIELDS = ("id", "traceId", "parentObservationId", "type", "name", "startTime", "endTime",
                "level", "statusMessage", "sessionId", "input", "projectId")


def read_fields(obs: Any) -> Any:
    """An observation with only what `langfuse_spans` reads of it (saved so, an investigation
    keeps none of the rest: the SDK puts its public key in every span's scope attributes)."""
    if not isinstance(obs, dict):
        return obs
    out = {k: obs[k] for k in _READ_FIELDS if k in obs}
    metadata = obs.get("metadata")
    if isinstance(metadata, dict):
        kept = {k: metadata[k] for k in _METADATA_KEYS if k in metadata}
        resource = metadata.get("resourceAttributes")
        if isinstance(resource, dict):
            kept["resourceAttributes"] = {k: v for k, v in resource.items() if k in _HOST_KEYS}
        out["metadata"] = kept
    return out


def langfuse_spans(observations: list[Any], origin: str, warnings: list[SourceWarning]
                   ) -> list[SpanRecord]:
    """Every readable observation; unreadable ones become warnings."""
    out = []
    for i, obs in enumerate(observations):
        rec = _record(obs, origin, f"observations[{i}]", warnings)
        if rec is not None:
            out.append(rec)
    return out
