"""Spans connector: OTLP JSON, Jaeger JSON and LangSmith runs into tool, HTTP and
queue-receive rows.

Accepted files: one OTLP export object (`{"resourceSpans": [...]}`, also wrapped in Jaeger v3's
`{"result": ...}`, or snake_case `{"resource_spans": ...}` as Phoenix downloads it), a page of
Phoenix's spans API (`{"data": [snake_case OTLP spans], "next_cursor": ...}`), LangSmith runs
(`twice.connectors.spans.langsmith`: a JSON array, `{"runs": [...]}`, or a run a line),
Langfuse observations (`twice.connectors.spans.langfuse`: its API's `{"data": [...], "meta"}`
pages, an array, or one a line), the
one-object-per-line form the Collector's file exporter and
`opentelemetry-exporter-otlp-json-file` write, a Jaeger download (`{"data": [traces]}`), a bare
list of Jaeger traces, or JSON lines of any of these. All go through the same interpretation
(`twice.connectors.spans.interpret`, which also reads Langfuse's attributes). A span that
appears twice (same trace id and span id, e.g. a file appended to twice) is kept once, with one
warning: counting it twice would invent a duplicate attempt.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from twice.connectors.base import LoadResult, SourceError, SourceWarning, Warnings
from twice.connectors.jsonfile import MAX_VALUES, parse_lines, require_regular_file
from twice.connectors.spans import columnar, langfuse, langsmith, protobuf
from twice.connectors.spans import fast as spans_fast
from twice.connectors.spans import read as read_spans
from twice.connectors.spans.interpret import Options, SpanRows
from twice.connectors.spans.jaeger import jaeger_spans
from twice.connectors.spans.model import SpanRecord
from twice.connectors.spans.otlp import otlp_spans
from twice.connectors.spans.read import span_documents

name = "spans"
# the span lists a ResourceSpans holds (protobuf JSON names, snake_case, OTLP before 1.0)
_RESOURCE_SPANS_KEYS = ("scopeSpans", "scope_spans", "instrumentationLibrarySpans")


def _records(doc: Any, origin: str, warnings: list[SourceWarning]) -> list[SpanRecord] | None:
    """Spans of one JSON document; None when the document is neither OTLP nor Jaeger."""
    if isinstance(doc, spans_fast.FastDocument):  # an exporter's line, decoded the fast way
        found = spans_fast.records(doc, origin)
        if found is not None:
            return found
        try:
            doc = doc.general()  # some part needs a warning: read it the general way
        except orjson.JSONDecodeError:
            return None
    runs = langsmith.runs_of(doc)
    if runs is not None:
        return langsmith.langsmith_spans(runs, origin, warnings)
    observations = langfuse.observations_of(doc)
    if observations is not None:
        return langfuse.langfuse_spans(observations, origin, warnings)
    if isinstance(doc, dict):
        if isinstance(doc.get("result"), dict) and "resourceSpans" in doc["result"]:
            doc = doc["result"]  # Jaeger's api_v3 wraps OTLP in {"result": ...}
        if isinstance(doc.get("trace"), dict):
            doc = doc["trace"]  # Tempo's /api/v2/traces/<id>: {"trace": {"resourceSpans"}}
        if isinstance(doc.get("batches"), list):
            doc = {"resourceSpans": doc["batches"]}  # Tempo's /api/traces/<id> (v1)
        if "resourceSpans" not in doc and "resource_spans" not in doc and \
                any(k in doc for k in _RESOURCE_SPANS_KEYS):
            # one bare ResourceSpans (opentelemetry-java's logging-otlp exporter, a line each)
            doc = {"resourceSpans": [doc]}
        if "resourceSpans" in doc or "resource_spans" in doc:
            return otlp_spans(doc, origin, warnings)
        data = doc.get("data")
        if isinstance(data, list) and data and all(
                isinstance(s, dict) and ("span_id" in s or "spanId" in s) for s in data):
            # Phoenix's `GET /v1/projects/{p}/spans/otlpv1`: a page of bare OTLP spans
            # (snake_case), `{"data": [...], "next_cursor": ...}`
            return otlp_spans({"resourceSpans": [{"scopeSpans": [{"spans": data}]}]}, origin,
                              warnings)
        if isinstance(data, list) and (
            not data or any(isinstance(t, dict) and "spans" in t for t in data)
        ):
            return jaeger_spans(data, origin, warnings)
        if "spans" in doc and "traceID" in doc:
            return jaeger_spans([doc], origin, warnings)
        return None
    if isinstance(doc, list) and doc and all(isinstance(d, dict) for d in doc):
        out: list[SpanRecord] = []
        for item in doc:
            found = _records(item, origin, warnings)
            if found is None:
                return None
            out.extend(found)
        return out
    return None


def parse_spans(
    documents: Iterable[tuple[str, Any]],
    origin: str,
    *,
    tool_attribute: str | None = None,
    request_id_attribute: str | None = None,
    warnings: list[SourceWarning] | None = None,
) -> LoadResult:
    """Timeline rows from already-parsed JSON documents, each with its locator ("file:line").

    `origin` names the whole source in the error raised when no document holds spans.
    Each document's spans are interpreted as it comes, so from a generator (as `load` gives)
    no more than one parsed document is held in memory at a time.
    """
    warnings = Warnings() if warnings is None else warnings
    options = Options(tool_attribute=tool_attribute, request_id_attribute=request_id_attribute)
    rows = SpanRows(options)
    repeated = 0
    any_document = False
    recognised = 0
    for locator, doc in documents:
        any_document = True
        found = _add_document(doc, locator, rows, warnings)
        if found is not None:
            recognised += 1
            repeated += found
    if any_document and not recognised:
        raise SourceError(origin, "no OTLP JSON, Jaeger JSON, LangSmith runs or Langfuse "
                                  "observations found")
    if repeated:
        warnings.append(SourceWarning(
            origin, f"{repeated} span(s) appear more than once (same trace and span id); "
                    "kept the first of each"))
    return LoadResult(source=name, rows=rows.frame(), warnings=warnings)


def _add_document(doc: Any, locator: str, rows: SpanRows, warnings: list[SourceWarning]
                  ) -> int | None:
    """Interpret one document's spans into `rows`: how many were there already, or None (and a
    warning) when the document holds no spans `_records` knows."""
    found = _records(doc, locator, warnings)
    if found is None:
        warnings.append(SourceWarning(
            locator, "neither an OTLP JSON export nor a Jaeger trace; skipped"))
        return None
    add = rows.add
    repeated = 0
    for rec in found:
        if not add(rec):
            repeated += 1
    return repeated


def _columnar(path: Path, options: Options) -> LoadResult:
    """A file of the exporters' OTLP lines read and interpreted as columns
    (`twice.connectors.spans.columnar`): the same rows and warnings as `parse_spans` over
    `span_documents`, in a fraction of the time. The lines the columnar reader leaves (a span
    the general way warns about, a line of another form) are read the general way, alone, and
    their rows joined to the others in the file's order. Decline (raised) when the file as a
    whole is not for it: the caller then reads it the general way."""
    file = str(path)
    starts, general = columnar.line_starts(path, MAX_VALUES)

    def origin(line: int) -> str:  # a file of one line is one document: named without a number
        return file if len(starts) == 1 else f"{file}:{line + 1}"

    blocks = []
    declined: set[int] = set(general)
    others = np.array(general, dtype=np.int64)
    for first, table in columnar.span_tables(path, starts):
        low, high = np.searchsorted(others, (first, first + table.num_rows))
        leave = others[low:high] - first
        cols = columnar.span_columns(table, leave)
        del table
        declined.update((cols.declined + first).tolist())
        blocks.append(columnar.block_rows(cols, options, origin, first))
    if declined and len(starts) == 1:
        raise columnar.Decline("a document the general way reads")
    warnings: list[SourceWarning] = Warnings()
    rows = SpanRows(options)
    row_lines: list[int] = []
    with read_spans.open_file(path) as fh:

        def numbered() -> Iterator[tuple[int, bytes]]:
            for k in sorted(declined):
                fh.seek(starts[k])
                yield k + 1, fh.readline()

        documents = parse_lines(file, numbered(), warnings,
                                decode=spans_fast.decode) if declined else ()
        try:
            for locator, doc in documents:
                had = len(rows)
                if _add_document(doc, locator, rows, warnings):
                    raise columnar.Decline("a span given twice")
                row_lines += [int(locator.rsplit(":", 1)[1]) - 1] * (len(rows) - had)
        except SourceError as exc:  # none of those lines parses, but the others do
            raise columnar.Decline(str(exc)) from exc
    frame = columnar.frame(blocks, rows, row_lines)
    del blocks
    pa.default_memory_pool().release_unused()  # the runs' buffers: not kept from the engine
    return LoadResult(source=name, rows=frame, warnings=warnings)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector while a file is read.

    Parsed JSON and the records made from it hold no reference cycles: reference counting frees
    them. But every few hundred new containers the collector would walk all of them, which
    costs more than parsing does (a 70 MB span file: ~3 s of 7). It runs as usual afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load(
    target: str | Path,
    *,
    tool_attribute: str | None = None,
    request_id_attribute: str | None = None,
) -> LoadResult:
    """Read an OTLP JSON / Jaeger JSON file, JSON lines a line at a time
    (`twice.connectors.spans.read`), or an OTLP protobuf request, gzipped or not
    (`twice.connectors.spans.protobuf`).
    `tool_attribute`: an extra attribute that marks a
    tool span and holds its tool call id; `request_id_attribute`: an extra attribute holding the
    provider request id on HTTP spans."""
    read_warnings: list[SourceWarning] = Warnings()  # lines not JSON: listed first, as before
    if _is_protobuf(Path(target)):
        return parse_spans([(str(target), protobuf.decode(target))], str(target),
                           tool_attribute=tool_attribute,
                           request_id_attribute=request_id_attribute)
    with _gc_paused():
        try:
            return _columnar(Path(target), Options(tool_attribute, request_id_attribute))
        except columnar.Decline:
            pass  # not a file of the exporters' lines alone: read line by line
        documents = span_documents(target, read_warnings, decode=spans_fast.decode)
        result = parse_spans(documents, str(target),
                             tool_attribute=tool_attribute,
                             request_id_attribute=request_id_attribute)
    result.warnings[:0] = read_warnings
    return result


def _is_protobuf(path: Path) -> bool:
    require_regular_file(path)  # opening a FIFO would block
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except (OSError, ValueError):
        return False  # the JSON reader names the problem
    return protobuf.sniff(path, head)


def sniff(path: Path, head: bytes) -> bool:
    if protobuf.sniff(path, head):
        return True  # OTLP protobuf, gzipped or not (read if the `protobuf` extra is there)
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text.startswith((b"{", b"[")):
        return False
    if b'"resourceSpans"' in head or b'"batches"' in head and b'"spans"' in head:
        return True
    if any(b'"%s"' % k.encode() in head for k in _RESOURCE_SPANS_KEYS) and b'"spans"' in head:
        return True
    if b'"run_type"' in head and b'"start_time"' in head and b'"id"' in head:
        return True  # LangSmith runs
    if b'"traceId"' in head and b'"startTime"' in head and (
            b'"projectId"' in head or b'"parentObservationId"' in head):
        return True  # Langfuse observations (its API's pages)
    if b'"span_id"' in head and b'"trace_id"' in head and b'"start_time_unix_nano"' in head:
        return True  # Phoenix's spans API (`{"data": [spans]}`), snake_case OTLP
    return b'"traceID"' in head and b'"spanID"' in head and b'"spans"' in head
