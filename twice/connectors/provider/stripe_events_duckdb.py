"""The fast path of `stripe_events.load` for big exports, JSON lines or one Stripe list
(`{"object": "list", "data": [...]}`): DuckDB's read_json.

DuckDB parses the lines and pulls out the columns in C++ on every core; at a million events it
takes about 60% of the CPU time, half the memory and two thirds of the wall time of the orjson +
Python path (benchmarks/results/suite.json, docs/scale.md). The
rows must be exactly what the Python path makes, so this path only answers for files it can
read exactly, and checks that in the same query: every line one Event object with a string id
and type, integer `created` in range, `request` and `data.object` objects, ids and other text
already trimmed, integer amounts, no duplicate event id, no blank line (line numbers are the
rows' locators; in a list, each event's place is). A list's `data` array is found by its two
ends and streamed to DuckDB through a named pipe as an array of its own (`_data_span`,
`_piped`); a list whose ends are not found so is parsed as one document, on one thread, and
held whole while it is. For anything else it returns None and the caller takes the
Python path, which says what is wrong record by record. Metadata (canonical JSON,
thread/tool-call ids) and the `detail` text are finished in Python, on the rows that have them.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from twice.connectors._parsing import EARLIEST, LATEST, ids_from_metadata, short
from twice.connectors.base import LoadResult, SourceWarning
from twice.connectors.jsonfile import loads
from twice.timeline import Kind, canonical_json, from_columns

MIN_BYTES = 16 * 1024 * 1024  # below this the orjson path is as fast, without DuckDB's start-up

# Characters Python's str.strip()/split() treat as whitespace: a text value starting or ending
# with one would be cleaned up by the Python path, so such a file is left to it.
# [c for c in range(0x110000) if chr(c).isspace()]
_WS_CODES = (
    0x9, 0xa, 0xb, 0xc, 0xd, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2000, 0x2001,
    0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029,
    0x202f, 0x205f, 0x3000,
)

_SQL = r"""
-- a text value read as VARCHAR: DuckDB writes a number, a boolean, an object or an array read
-- into a VARCHAR column as text too, so a value that could have been one of those is unusual
-- (the Python path would not read it as this text): the words true/false, anything starting
-- with { or [, anything spelled like a number (the regular expression only where it could be)
CREATE TEMP MACRO maybe_not_text(v) AS CASE WHEN v IS NULL THEN FALSE
    WHEN left(v, 1) IN ('-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9')
    THEN regexp_full_match(v, '-?[0-9][0-9.eE+-]*')
    ELSE v IN ('true', 'false') OR left(v, 1) IN ('{', '[') END;
CREATE TEMP MACRO untrimmed(v) AS contains('{ws}', left(v, 1)) OR contains('{ws}', right(v, 1));
-- an id that is not a non-empty text without whitespace at either end (v not null)
CREATE TEMP MACRO bad_id(v) AS v = '' OR untrimmed(v);
-- unusual unless null, or a non-empty text without whitespace at either end
CREATE TEMP MACRO bad_txt(v) AS CASE WHEN v IS NULL THEN FALSE WHEN v = '' THEN TRUE
    ELSE maybe_not_text(v) OR untrimmed(v) END;
-- an expandable reference (a JSON leaf: an id string or an expanded object with an id), by
-- its id leaf: json_extract, not `->` (inside a macro an arrow reads as a lambda)
CREATE TEMP MACRO id_leaf(j) AS CASE json_type(j) WHEN 'OBJECT' THEN json_extract(j, '$.id')
    ELSE j END;
-- a JSON leaf that is a string written without an escape (a reference's usual form, an id):
-- its text, read without parsing the JSON; NULL for any other leaf, left to the JSON functions
-- (the leaf's text as VARCHAR: DuckDB 1.1 keeps a slice of JSON typed as JSON)
CREATE TEMP MACRO quoted_text(t) AS CASE WHEN starts_with(t, '"') AND ends_with(t, '"')
    AND length(t) >= 2 AND NOT contains(t, '\') THEN t[2:-2] END;
CREATE TEMP MACRO plain_string(j) AS quoted_text(CAST(j AS VARCHAR));
{events}, cols AS (
  SELECT object, id, type, created, json_type(created) AS created_type, livemode, no_request,
         more,
         request_id, request_key, obj IS NULL AS no_obj,
         obj.id AS obj_id, obj.object AS obj_object,
         obj.amount AS amount, obj.currency AS obj_currency, obj.status AS status,
         obj.last_payment_error AS lpe, json_type(obj.last_payment_error) AS lpe_type,
         obj.metadata AS metadata, obj.cancellation_reason AS cancel,
         obj.failure_message AS failure_message, obj.failure_reason AS failure_reason,
         obj.description AS description,
         {leaves}
  FROM ev
), texts AS (
  -- (a JSON value's text is DuckDB's own writing of it, minified: an integer is its digits, a
  -- boolean true or false, an object starts with its brace; a `created` of another type than
  -- an integer is unusual, whatever this cast makes of it)
  SELECT *, TRY_CAST(CAST(created AS VARCHAR) AS BIGINT) AS created_int,
         {leaf_texts}
  FROM cols
), refs AS (
  -- `stripe_events.belongs_to`: the references each object type is part of, in its order
  SELECT *, CASE obj_object
      WHEN 'charge' THEN [pi_ref, invoice_ref]
      WHEN 'payment_intent' THEN [invoice_ref]
      WHEN 'invoice' THEN [sub_ref, parent_sub_ref]
      WHEN 'invoice_payment' THEN [invoice_ref, pay_pi_ref, pay_ch_ref]
      ELSE [] END AS parents,
    CASE WHEN lpe_type = 'OBJECT' AND json_type(json_extract(lpe, '$.message')) = 'VARCHAR'
         THEN json_extract_string(lpe, '$.message') END AS lpe_message
  FROM texts
)
SELECT
  created_int * 1000000000 AS at,
  id AS event_id, type AS event_type, request_id, request_key AS idempotency_key,
  obj_id AS object_id, obj_object AS object_type,
  CASE WHEN obj_object = 'customer' THEN obj_id ELSE customer_ref END AS subject,
  TRY_CAST(amount AS BIGINT) AS amount,
  obj_currency AS currency,
  CASE
    WHEN coalesce(obj_object, '') NOT IN ('charge', 'payment_intent', 'refund')
      THEN CASE WHEN ends_with(type, 'failed') THEN 'error' END
    WHEN obj_object = 'payment_intent' AND status = 'requires_payment_method'
      THEN CASE WHEN lpe_type = 'OBJECT' AND CAST(lpe AS VARCHAR) <> '{}'
                THEN 'error' ELSE 'unknown' END
    WHEN status IN ('succeeded', 'requires_capture') THEN 'ok'
    WHEN status IN ('failed', 'canceled') THEN 'error'
    WHEN status IS NOT NULL THEN 'unknown'
  END AS outcome,
  CASE WHEN coalesce(failure_message, lpe_message, failure_reason, cancel,
                     description) IS NOT NULL
       THEN [failure_message, lpe_message, failure_reason,
             CASE WHEN cancel <> '' THEN 'canceled: ' || cancel END,
             description] END AS detail_candidates,
  CASE WHEN starts_with(CAST(metadata AS VARCHAR), '{') AND CAST(metadata AS VARCHAR) <> '{}'
       THEN CAST(metadata AS VARCHAR) END AS metadata,
  CASE CAST(livemode AS VARCHAR) WHEN 'true' THEN TRUE WHEN 'false' THEN FALSE END AS livemode,
  nullif(array_to_string(parents, ','), '') AS belongs_to,
  CASE WHEN request_id IS NOT NULL THEN 'api' ELSE 'automatic' END AS initiator,
  more,
  -- unknown (NULL) counts as unusual: only rows every check clears are read here
  coalesce(object IS DISTINCT FROM 'event'
   OR id IS NULL OR bad_txt(id) OR type IS NULL OR maybe_not_text(type)
   OR created_type NOT IN ('BIGINT', 'UBIGINT')
   OR created_int NOT BETWEEN $earliest AND $latest
   OR no_request
   OR bad_txt(request_id) OR bad_txt(request_key)
   OR no_obj
   OR bad_txt(obj_id) OR bad_txt(obj_object) OR bad_txt(obj_currency)
   -- an amount the Python path reads as this integer: ASCII digits within 64 bits
   OR NOT (amount IS NULL OR (regexp_full_match(amount, '-?[0-9]+')
                              AND TRY_CAST(amount AS BIGINT) IS NOT NULL))
   OR NOT (lpe IS NULL OR lpe_type IN ('NULL', 'OBJECT'))
   OR maybe_not_text(status) OR maybe_not_text(cancel) OR maybe_not_text(failure_message)
   OR maybe_not_text(failure_reason) OR maybe_not_text(description)
   OR {bad_refs}
   -- the same id twice among one object's references: the Python path names it once
   OR len(list_distinct(parents)) <> list_aggregate(parents, 'count'), TRUE
  ) AS unusual
FROM refs
"""
# the expandable references: the customer, and what an object is part of
_REFS = {"customer": "obj.customer", "pi": "obj.payment_intent", "invoice": "obj.invoice",
         "sub": "obj.subscription", "parent_sub": "obj.parent.subscription_details.subscription",
         "pay_pi": "obj.payment.payment_intent", "pay_ch": "obj.payment.charge"}
_SQL = _SQL.replace("{leaves}", ",\n         ".join(
    f"plain_string({expr}) AS {name}_str, "
    f"CASE WHEN plain_string({expr}) IS NULL THEN id_leaf({expr}) END AS {name}_leaf"
    for name, expr in _REFS.items()))
# each reference's id as text (`_ref`), and whether it is unusual (`_bad`): not a non-empty
# trimmed text, or (among the parents) holding a comma; its JSON type read once
_SQL = _SQL.replace("{leaf_texts}", ",\n         ".join(
    f"CASE WHEN {n}_str IS NOT NULL THEN {n}_str "
    f"WHEN json_type({n}_leaf) = 'VARCHAR' THEN {n}_leaf ->> '$' END AS {n}_ref, "
    f"CASE WHEN {n}_str IS NOT NULL THEN bad_id({n}_str) "
    f"ELSE coalesce({n}_leaf IS NOT NULL AND json_type({n}_leaf) <> 'NULL' "
    f"AND (json_type({n}_leaf) <> 'VARCHAR' OR bad_id({n}_leaf ->> '$')), FALSE) "
    f"END AS {n}_bad" for n in _REFS))
_SQL = _SQL.replace("{bad_refs}", " OR ".join(
    f"{n}_bad" if n == "customer" else f"{n}_bad OR coalesce(contains({n}_ref, ','), FALSE)"
    for n in _REFS))
_MACROS, _QUERY = _SQL.replace("{ws}", "".join(map(chr, _WS_CODES)).replace("'", "''")).split(
    "{events}", 1)
_QUERY = "{events}" + _QUERY
# the fields of an event the query reads: text typed as VARCHAR (read without building JSON
# values); fields whose JSON type decides what they mean (a time, a flag, an object or an id)
# kept as JSON leaves
_EVENT_FIELDS = (
    ("object", "VARCHAR"), ("id", "VARCHAR"), ("type", "VARCHAR"), ("created", "JSON"),
    ("livemode", "JSON"), ("request", "STRUCT(id VARCHAR, idempotency_key VARCHAR)"),
    ("data", "STRUCT(object STRUCT(id VARCHAR, object VARCHAR, customer JSON, amount VARCHAR, "
             "currency VARCHAR, status VARCHAR, last_payment_error JSON, metadata JSON, "
             "cancellation_reason VARCHAR, failure_message VARCHAR, failure_reason VARCHAR, "
             "description VARCHAR, payment_intent JSON, invoice JSON, subscription JSON, "
             "parent STRUCT(subscription_details STRUCT(subscription JSON)), "
             "payment STRUCT(payment_intent JSON, charge JSON)))"),
)
# an event a record: JSON lines (an event a line), or a list's `data` array read as an array
# of its own (`_piped`); `more`: the list says it has more pages, as the Python path warns
_RECORDS = """WITH ev AS (
  SELECT object, id, type, created, livemode,
         request.id AS request_id, request.idempotency_key AS request_key,
         request IS NULL AS no_request, data.object AS obj, {more} AS more
  FROM read_json($path, format = '{format}', maximum_object_size = 268435456,
                 columns = {FIELDS})
)""".replace("FIELDS", ", ".join(f"{name}: '{kind}'" for name, kind in _EVENT_FIELDS))
_LINES = _RECORDS.replace("{format}", "newline_delimited").replace("{more}", "FALSE")
# Stripe's list shape, one document: {"object": "list", "data": [events], "has_more": ...},
# when `_data_span` cannot find its `data` array's ends: read as one record (DuckDB holds the
# document while it parses it) and its events unnested in their order; anything but one list
# makes every event unusual (`object` null)
_LIST = """WITH doc AS (
  SELECT object AS doc_object, data AS events, row_number() OVER () AS doc_n,
         coalesce(json_type(has_more) = 'BOOLEAN' AND CAST(has_more AS BOOLEAN), FALSE) AS more
  FROM read_json($path, format = 'unstructured', records = true,
                 maximum_object_size = {size},
                 columns = {object: 'VARCHAR', has_more: 'JSON', data: 'STRUCT(FIELDS)[]'})
), items AS (
  SELECT unnest(events) AS e, doc_object, doc_n, more FROM doc
), ev AS (
  SELECT CASE WHEN doc_object = 'list' AND doc_n = 1 THEN e.object END AS object,
         e.id AS id, e.type AS type, e.created AS created, e.livemode AS livemode,
         e.request.id AS request_id, e.request.idempotency_key AS request_key,
         e.request IS NULL AS no_request, e.data.object AS obj, more
  FROM items
)""".replace("FIELDS", ", ".join(f"{name} {kind}" for name, kind in _EVENT_FIELDS))

_TEXT = ("event_id", "event_type", "request_id", "idempotency_key", "object_id", "object_type",
         "subject", "currency", "outcome", "belongs_to", "initiator")


def load(path: Path, origin: str, min_bytes: int = MIN_BYTES) -> LoadResult | None:
    """`stripe_events.load` of a file this path can read exactly, else None."""
    from twice.connectors.provider import stripe_events as se

    read = _read(path, EARLIEST.timestamp(), LATEST.timestamp(), min_bytes)
    if read is None:
        return None
    table, listed = read
    n = table.num_rows
    try:
        columns = _columns(table, str(path), listed)
        if columns is None:
            return None
        columns.update(source=_repeat(se.name, n), kind=_repeat(Kind.PROVIDER_EVENT.value, n))
        rows = from_columns(columns, n)
    except (ValueError, TypeError, OverflowError, UnicodeError):
        return None  # a value DuckDB took that Python would not: the Python path decides
    modes = table.column("livemode").to_pandas().value_counts()
    warnings = []
    if len(modes) == 2:
        warnings.append(SourceWarning(
            origin, f"file mixes live-mode ({modes[True]}) and test-mode ({modes[False]}) "
            "events; kept all"))
    if listed and table.column("more")[0].as_py():
        warnings.append(SourceWarning(origin, se.MORE_PAGES))
    return LoadResult(source=se.name, rows=rows, warnings=warnings)


def _repeat(text: str, n: int) -> Any:
    import pyarrow as pa

    return pa.repeat(pa.scalar(text, pa.large_string()), n)


def _is_list(path: Path) -> bool:
    """Whether the file starts as Stripe's list shape: `{"object": "list"` (whitespace aside)."""
    with path.open("rb") as fh:
        head = fh.read(4096)
    return b"".join(head.split()).startswith(b'{"object":"list"')


def _read(path: Path, earliest_s: float, latest_s: float, min_bytes: int
          ) -> tuple[Any, bool] | None:
    """(the query's Arrow table, whether the file is one list) for a file of JSON lines or a
    Stripe list this path can read exactly, else None."""
    try:
        size = path.stat().st_size
        if size < min_bytes:
            return None
        lines = _lines(path)
        # a list whose `data` array's ends are found, whatever its keys' order (as the Python
        # path reads it), or one that starts as Stripe writes it
        span = _data_span(path, size) if lines >= 0 and hasattr(os, "mkfifo") else None
        listed = span is not None or _is_list(path)
        import duckdb
    except (OSError, ImportError):
        return None
    if lines < 0 or (lines < 2 and not listed):  # a refused token, or one line of lines
        return None
    params = {"path": str(path), "earliest": int(earliest_s), "latest": int(latest_s)}
    try:
        if span is None:
            table = _run(duckdb, _QUERY.replace(
                "{events}", _LIST.replace("{size}", str(size + 1)) if listed else _LINES),
                params)
        else:
            start, end, more = span
            array = _RECORDS.replace("{format}", "array").replace("{more}", str(more).upper())
            with _piped(path, start, end) as pipe:
                table = _run(duckdb, _QUERY.replace("{events}", array), {**params, "path": pipe})
    except (duckdb.Error, UnicodeError):
        # a line DuckDB cannot read (or hands back as invalid UTF-8): the Python path says
        # which, line by line
        return None
    if table.num_rows < 2 or (not listed and table.num_rows != lines):
        return None  # one document, or blank lines (DuckDB skips them: rows are not lines)
    import pyarrow.compute as pc

    if pc.any(table.column("unusual")).as_py():
        return None
    if pc.count_distinct(table.column("event_id")).as_py() != table.num_rows:
        return None
    return table, listed


def _run(duckdb: Any, query: str, params: dict[str, Any]) -> Any:
    """The query's Arrow table, on a connection of its own (closed, whatever happens: a pipe's
    reader must be gone before `_piped` lets its writer go)."""
    con = duckdb.connect()
    try:
        # text as Arrow's large_string, the timeline's own type: no cast copying every offset
        con.execute("SET arrow_large_buffer_size = true")
        con.execute(_MACROS)
        rel = con.sql(query, params=params)
        # `to_arrow_table` in DuckDB 2, `arrow` before it
        return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
    finally:
        con.close()


_EDGE = 1 << 16  # how much of a list's head and tail is read to find its `data` array's ends
# a token of a list's head: a string, a scalar, or one punctuation byte
_TOKEN = re.compile(rb'[ \t\n\r]*(?:("(?:[^"\\]|\\.)*")|([-+.0-9eE]+|true|false|null)|(.))',
                    re.S)


class _KeyTwice(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, refusing a key given twice (orjson keeps the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _KeyTwice
    return out


def _data_span(path: Path, size: int) -> tuple[int, int, bool] | None:
    """(the offset of the list's `data` array's `[`, that of its `]`, whether the list says it
    has more pages) for one Stripe list whose keys before `data` have scalar values; else None.

    The `[` is found by reading the head's tokens; the `]` is the last one in the tail such that
    the document with `data` emptied (head, `[]`, tail) is one list with `data` empty and no
    key twice. What lies between is then read by DuckDB as an array, which refuses anything
    after its `]`: so a wrong `]` (in a string of the tail, or a second document after the
    list) fails the read instead of cutting the events short."""
    with path.open("rb") as fh:
        head = fh.read(min(size, _EDGE))
        start = _data_start(head)
        if start is None:
            return None
        tail_from = max(start + 1, size - _EDGE)
        fh.seek(tail_from)
        tail = fh.read()
    for end in [m.start() for m in re.finditer(rb"\]", tail)][:-65:-1]:  # the last 64
        try:
            loads(head[:start] + b"[]" + tail[end + 1:])  # as the Python path parses it
            doc = json.loads(head[:start] + b"[]" + tail[end + 1:], object_pairs_hook=_unique)
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict) and doc.get("object") == "list" and doc.get("data") == []:
            return start, tail_from + end, doc.get("has_more") is True
        return None
    return None


def _data_start(head: bytes) -> int | None:
    """Where the `data` array's `[` is in a list's head, after keys whose values are strings
    or scalars only; else None."""
    pos = 0

    def token() -> re.Match[bytes] | None:
        nonlocal pos
        m = _TOKEN.match(head, pos)
        if m is not None:
            pos = m.end()
        return m

    first = token()
    if first is None or first[3] != b"{":
        return None
    while True:
        key, colon = token(), token()
        if key is None or key[1] is None or colon is None or colon[3] != b":":
            return None
        value = token()
        if value is None:
            return None
        if key[1] == b'"data"':
            return value.start(3) if value[3] == b"[" else None
        after = token()
        if value[3] is not None or after is None or after[3] != b",":
            return None


@contextmanager
def _piped(path: Path, start: int, end: int) -> Iterator[str]:
    """A named pipe giving the bytes `start`..`end` of `path` (a list's `data` array), written
    by a thread while DuckDB reads it: the events streamed as an array of their own, never
    copied to disk and never held whole. The reader must be gone when the block ends (`_run`
    closes its connection); a writer left waiting (no reader came, or it stopped early) is let
    go by opening and closing the read end, so its open returns and its next write fails."""
    with tempfile.TemporaryDirectory(prefix="twice-") as tmp:
        pipe = os.path.join(tmp, "data.json")
        os.mkfifo(pipe, 0o600)
        writer = threading.Thread(target=_write_span, args=(path, start, end, pipe),
                                  name="twice-events-pipe", daemon=True)
        writer.start()
        try:
            yield pipe
        finally:
            for _ in range(200):
                if not writer.is_alive():
                    break
                with suppress(OSError):
                    os.close(os.open(pipe, os.O_RDONLY | os.O_NONBLOCK))
                writer.join(0.05)


def _write_span(path: Path, start: int, end: int, pipe: str) -> None:
    # BrokenPipeError (an OSError): the reader stopped, and the query says why
    with suppress(OSError), open(pipe, "wb") as out, path.open("rb") as src:
        src.seek(start)
        left = end + 1 - start
        while left > 0 and (chunk := src.read(min(left, 1 << 22))):
            out.write(chunk)
            left -= len(chunk)


# Byte strings the Python path refuses where DuckDB may not: escaped surrogates (orjson rejects
# lone ones; DuckDB would hand back invalid UTF-8) and the non-JSON NaN / Infinity. A file with
# any of them, even inside a string, is left to the Python path. So is one with a NUL byte,
# which JSON text never holds raw (a sparse or zero-filled file: found in the first chunk, not
# after DuckDB has worked through gigabytes of it).
_REFUSED = (b"\\ud", b"\\uD", b"NaN", b"Infinity", b"\x00")


_CHUNK = 1 << 24  # bytes `_lines` reads at a time


def _lines(path: Path) -> int:
    """How many lines the file has (a last line without a newline counts), or -1 when it starts
    with a byte-order mark or holds one of `_REFUSED`."""
    count = 0
    tail = b""
    with path.open("rb") as fh:
        if fh.read(3) == b"\xef\xbb\xbf":
            return -1
        fh.seek(0)
        while chunk := fh.read(_CHUNK):
            count += chunk.count(b"\n")
            seam = tail + chunk  # a token cut between two chunks
            # (an escaped surrogate is looked for only where an escape is: a backslash, found
            # by memchr, is rare in exports, and a search for two bytes costs ten times more)
            if any(token in seam for token in _REFUSED[2:]) or (
                    b"\\" in seam and b"\\u" in seam
                    and any(token in seam for token in _REFUSED[:2])):
                return -1
            tail = chunk[-8:]
    return count + (tail[-1:] not in (b"\n", b""))


def _columns(table: Any, name: str, listed: bool = False) -> dict[str, Any] | None:
    """Timeline columns (`from_columns` input) from the query's table, as Arrow arrays where
    they can stay Arrow; None when a metadata value is not text (the Python path would see the
    original number, not DuckDB's). Python touches only the rows with metadata or a detail."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    cols: dict[str, Any] = {c: table.column(c) for c in _TEXT if c != "currency"}
    cols["at"] = table.column("at").to_numpy()
    cols["amount"] = table.column("amount")
    # lower case as Python lowers it, once per distinct currency
    currency = pc.dictionary_encode(table.column("currency")).combine_chunks()
    lower = pa.array([c.lower() for c in currency.dictionary.to_pylist()], pa.large_string())
    cols["currency"] = lower.take(currency.indices)
    # where each event is: its line, or its place in the list (as the Python path names them)
    cols["origin"] = pc.binary_join_element_wise(  # (the last argument is the separator)
        pa.scalar(f"{name}:data[" if listed else f"{name}:", pa.large_string()),
        pc.cast(pa.array(np.arange(0, n) if listed else np.arange(1, n + 1)),
                pa.large_string()),
        pa.scalar("]" if listed else "", pa.large_string()), pa.scalar("", pa.large_string()))
    cols["key_recorded"] = np.ones(n, dtype=np.int64)  # every line's `request` is an object
    cols["livemode"] = pc.cast(table.column("livemode"), pa.int64())  # 1 live, 0 test
    detail: list[str | None] = [None] * n
    candidates = table.column("detail_candidates")
    for i in np.flatnonzero(candidates.is_valid().to_numpy(zero_copy_only=False)):
        detail[i] = _first_detail(candidates[int(i)].as_py(), short)
    cols["detail"] = detail
    args: list[str | None] = [None] * n
    threads: list[str | None] = [None] * n
    calls: list[str | None] = [None] * n
    metadata = table.column("metadata")
    for i in np.flatnonzero(metadata.is_valid().to_numpy(zero_copy_only=False)):
        meta = loads(metadata[int(i)].as_py())
        if not all(isinstance(v, str) for v in meta.values()):
            return None
        args[i] = canonical_json(meta)
        ids = ids_from_metadata(meta)
        threads[i], calls[i] = ids.get("thread_id"), ids.get("tool_call_id")
    cols.update(args=args, thread_id=threads, tool_call_id=calls)
    return cols


def _first_detail(candidates: list[str | None], short: Any) -> str | None:
    for candidate in candidates:
        text = short(candidate) if isinstance(candidate, str) else None
        if text:
            return str(text)
    return None
