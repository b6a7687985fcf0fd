"""The fast path of `stripe_events.load` for big JSON-lines exports: DuckDB's read_json.

DuckDB parses the lines and pulls out the columns in C++ on every core; at a million events it
takes about 60% of the CPU time, half the memory and two thirds of the wall time of the orjson +
Python path (benchmarks/results/suite.json, docs/scale.md). The
rows must be exactly what the Python path makes, so this path only answers for files it can
read exactly, and checks that in the same query: every line one Event object with a string id
and type, integer `created` in range, `request` and `data.object` objects, ids and other text
already trimmed, integer amounts, no duplicate event id, no blank line (line numbers are the
rows' locators). For anything else it returns None and the caller takes the Python path, which
says what is wrong record by record. Metadata (canonical JSON, thread/tool-call ids) and the
`detail` text are finished in Python, on the rows that have them.
"""

from __future__ import annotations

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
_WS = "".join(f"\\x{{{c:x}}}" for c in _WS_CODES)
_UNTRIMMED = f"^[{_WS}]|[{_WS}]$"

_SQL = r"""
CREATE TEMP MACRO txt(j) AS CASE WHEN json_type(j) = 'VARCHAR' THEN j ->> '$' END;
CREATE TEMP MACRO bad_txt(j) AS NOT (j IS NULL OR json_type(j) = 'NULL'
    OR (json_type(j) = 'VARCHAR' AND (j ->> '$') <> '' AND NOT regexp_matches(j ->> '$', '{ws}')));
-- an expandable reference: an id string or an expanded object with an id
-- (json_extract, not `->`: inside a macro an arrow reads as a lambda)
CREATE TEMP MACRO ref(j) AS CASE json_type(j) WHEN 'VARCHAR' THEN j ->> '$'
    WHEN 'OBJECT' THEN txt(json_extract(j, '$.id')) END;
CREATE TEMP MACRO bad_ref(j) AS CASE json_type(j) WHEN 'OBJECT'
    THEN bad_txt(json_extract(j, '$.id')) ELSE bad_txt(j) END
    OR coalesce(contains(ref(j), ','), FALSE);
WITH ev AS (
  SELECT row_number() OVER () AS line, object, id, type, created, livemode,
         request.id AS request_id, request.idempotency_key AS request_key, request AS req,
         data.object AS obj
  FROM read_json($path, format = 'newline_delimited', maximum_object_size = 268435456,
                 columns = {object: 'JSON', id: 'JSON', type: 'JSON', created: 'JSON',
                            livemode: 'JSON', request: 'STRUCT(id JSON, idempotency_key JSON)',
                            data: 'STRUCT(object STRUCT(id JSON, object JSON, customer JSON,
                              amount JSON, currency JSON, status JSON, last_payment_error JSON,
                              metadata JSON, cancellation_reason JSON, failure_message JSON,
                              failure_reason JSON, description JSON, payment_intent JSON,
                              invoice JSON, subscription JSON, parent JSON, payment JSON))'})
), cols AS (
  SELECT line, object, id, type, created, livemode, req, request_id, request_key, obj,
         obj.id AS obj_id, obj.object AS obj_object, obj.customer AS customer,
         obj.amount AS amount, obj.currency AS obj_currency, obj.status AS status,
         obj.last_payment_error AS lpe, obj.metadata AS metadata,
         obj.cancellation_reason AS cancel, obj.failure_message AS failure_message,
         obj.failure_reason AS failure_reason, obj.description AS description,
         obj.payment_intent AS ref_pi, obj.invoice AS ref_invoice,
         obj.subscription AS ref_sub,
         json_extract(obj.parent, '$.subscription_details.subscription') AS ref_parent_sub,
         json_extract(obj.payment, '$.payment_intent') AS ref_pay_pi,
         json_extract(obj.payment, '$.charge') AS ref_pay_ch
  FROM ev
), refs AS (
  -- `stripe_events.belongs_to`: the references each object type is part of, in its order
  SELECT *, CASE txt(obj_object)
      WHEN 'charge' THEN [ref(ref_pi), ref(ref_invoice)]
      WHEN 'payment_intent' THEN [ref(ref_invoice)]
      WHEN 'invoice' THEN [ref(ref_sub), ref(ref_parent_sub)]
      WHEN 'invoice_payment' THEN [ref(ref_invoice), ref(ref_pay_pi), ref(ref_pay_ch)]
      ELSE [] END AS parents
  FROM cols
)
SELECT
  TRY_CAST(created ->> '$' AS BIGINT) * 1000000000 AS at,
  txt(id) AS event_id, txt(type) AS event_type,
  txt(request_id) AS request_id,
  txt(request_key) AS idempotency_key,
  txt(obj_id) AS object_id, txt(obj_object) AS object_type,
  CASE WHEN txt(obj_object) = 'customer' THEN txt(obj_id)
       WHEN json_type(customer) = 'OBJECT' THEN txt(customer -> '$.id')
       ELSE txt(customer) END AS subject,
  TRY_CAST(amount ->> '$' AS BIGINT) AS amount,
  txt(obj_currency) AS currency,
  CASE
    WHEN coalesce(txt(obj_object), '') NOT IN ('charge', 'payment_intent', 'refund')
      THEN CASE WHEN ends_with(txt(type), 'failed') THEN 'error' END
    WHEN txt(obj_object) = 'payment_intent' AND txt(status) = 'requires_payment_method'
      THEN CASE WHEN json_type(lpe) = 'OBJECT' AND CAST(lpe AS VARCHAR) <> '{}'
                THEN 'error' ELSE 'unknown' END
    WHEN txt(status) IN ('succeeded', 'requires_capture') THEN 'ok'
    WHEN txt(status) IN ('failed', 'canceled') THEN 'error'
    WHEN txt(status) IS NOT NULL THEN 'unknown'
  END AS outcome,
  CASE WHEN coalesce(txt(failure_message), txt(lpe -> '$.message'),
                     txt(failure_reason), txt(cancel),
                     txt(description)) IS NOT NULL
       THEN [txt(failure_message), txt(lpe -> '$.message'),
             txt(failure_reason),
             CASE WHEN txt(cancel) <> '' THEN 'canceled: ' || txt(cancel) END,
             txt(description)] END AS detail_candidates,
  CASE WHEN json_type(metadata) = 'OBJECT' AND CAST(metadata AS VARCHAR) <> '{}'
       THEN CAST(metadata AS VARCHAR) END AS metadata,
  CASE json_type(livemode) WHEN 'BOOLEAN' THEN CAST(livemode AS BOOLEAN) END AS livemode,
  nullif(array_to_string(parents, ','), '') AS belongs_to,
  CASE WHEN txt(request_id) IS NOT NULL THEN 'api' ELSE 'automatic' END AS initiator,
  -- unknown (NULL) counts as unusual: only rows every check clears are read here
  coalesce(txt(object) IS DISTINCT FROM 'event'
   OR txt(id) IS NULL OR bad_txt(id) OR json_type(type) IS DISTINCT FROM 'VARCHAR'
   OR json_type(created) NOT IN ('BIGINT', 'UBIGINT')
   OR TRY_CAST(created ->> '$' AS BIGINT) NOT BETWEEN $earliest AND $latest
   OR req IS NULL
   OR bad_txt(request_id) OR bad_txt(request_key)
   OR obj IS NULL
   OR bad_txt(obj_id) OR bad_txt(obj_object) OR bad_txt(obj_currency)
   OR (json_type(customer) = 'OBJECT' AND bad_txt(customer -> '$.id'))
   OR (json_type(customer) IS DISTINCT FROM 'OBJECT' AND bad_txt(customer))
   OR NOT (amount IS NULL OR json_type(amount) = 'NULL'
           OR (json_type(amount) IN ('BIGINT', 'UBIGINT')
               AND TRY_CAST(amount ->> '$' AS BIGINT) IS NOT NULL))
   OR NOT (lpe IS NULL OR json_type(lpe) IN ('NULL', 'OBJECT'))
   OR NOT (cancel IS NULL OR json_type(cancel) IN ('NULL', 'VARCHAR'))
   OR bad_ref(ref_pi) OR bad_ref(ref_invoice) OR bad_ref(ref_sub) OR bad_ref(ref_parent_sub)
   OR bad_ref(ref_pay_pi) OR bad_ref(ref_pay_ch)
   -- the same id twice among one object's references: the Python path names it once
   OR len(list_distinct(parents)) <> list_aggregate(parents, 'count'), TRUE
  ) AS unusual
FROM refs
ORDER BY line
"""
_MACROS, _QUERY = _SQL.replace("{ws}", _UNTRIMMED.replace("'", "''")).split("WITH ev AS", 1)
_QUERY = "WITH ev AS" + _QUERY

_TEXT = ("event_id", "event_type", "request_id", "idempotency_key", "object_id", "object_type",
         "subject", "currency", "outcome", "belongs_to", "initiator")


def load(path: Path, origin: str, min_bytes: int = MIN_BYTES) -> LoadResult | None:
    """`stripe_events.load` of a file this path can read exactly, else None."""
    from twice.connectors.provider import stripe_events as se

    table = _read(path, EARLIEST.timestamp(), LATEST.timestamp(), min_bytes)
    if table is None:
        return None
    n = table.num_rows
    try:
        columns = _columns(table, str(path))
        if columns is None:
            return None
        columns.update(source=[se.name] * n, kind=[Kind.PROVIDER_EVENT.value] * n)
        rows = from_columns(columns, n)
    except (ValueError, TypeError, OverflowError, UnicodeError):
        return None  # a value DuckDB took that Python would not: the Python path decides
    modes = table.column("livemode").to_pandas().value_counts()
    warnings = []
    if len(modes) == 2:
        warnings.append(SourceWarning(
            origin, f"file mixes live-mode ({modes[True]}) and test-mode ({modes[False]}) "
            "events; kept all"))
    return LoadResult(source=se.name, rows=rows, warnings=warnings)


def _read(path: Path, earliest_s: float, latest_s: float, min_bytes: int) -> Any | None:
    """The query's Arrow table for a JSON-lines file this path can read exactly, else None."""
    try:
        if path.stat().st_size < min_bytes:
            return None
        lines = _lines(path)
        import duckdb
    except (OSError, ImportError):
        return None
    if lines < 2:
        return None
    try:
        con = duckdb.connect()
        con.execute(_MACROS)
        rel = con.sql(_QUERY, params={
            "path": str(path), "earliest": int(earliest_s), "latest": int(latest_s)})
        # `to_arrow_table` in DuckDB 2, `arrow` before it
        table = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
        con.close()
    except duckdb.Error:
        return None  # a line DuckDB cannot read: the Python path says which, line by line
    if table.num_rows < 2 or table.num_rows != lines:
        return None  # one document, or blank lines (DuckDB skips them: rows are not lines)
    import pyarrow.compute as pc

    if pc.any(table.column("unusual")).as_py():
        return None
    if pc.count_distinct(table.column("event_id")).as_py() != table.num_rows:
        return None
    return table


# Byte strings the Python path refuses where DuckDB may not: escaped surrogates (orjson rejects
# lone ones; DuckDB would hand back invalid UTF-8) and the non-JSON NaN / Infinity. A file with
# any of them, even inside a string, is left to the Python path. So is one with a NUL byte,
# which JSON text never holds raw (a sparse or zero-filled file: found in the first chunk, not
# after DuckDB has worked through gigabytes of it).
_REFUSED = (b"\\ud", b"\\uD", b"NaN", b"Infinity", b"\x00")


def _lines(path: Path) -> int:
    """How many lines the file has (a last line without a newline counts), or -1 when it starts
    with a byte-order mark or holds one of `_REFUSED`."""
    count = 0
    tail = b""
    with path.open("rb") as fh:
        if fh.read(3) == b"\xef\xbb\xbf":
            return -1
        fh.seek(0)
        while chunk := fh.read(1 << 24):
            count += chunk.count(b"\n")
            seam = tail + chunk  # a token cut between two chunks
            if any(token in seam for token in _REFUSED):
                return -1
            tail = chunk[-8:]
    return count + (tail[-1:] not in (b"\n", b""))


def _columns(table: Any, name: str) -> dict[str, Any] | None:
    """Timeline columns (`from_columns` input) from the query's table; None when a metadata
    value is not text (the Python path would see the original number, not DuckDB's)."""
    n = table.num_rows
    cols: dict[str, Any] = {c: table.column(c) for c in _TEXT if c != "currency"}
    cols["at"] = table.column("at").to_numpy()
    cols["amount"] = table.column("amount")
    currency = table.column("currency").to_pylist()
    lower = {c: c.lower() for c in set(currency) if c is not None}
    cols["currency"] = [None if c is None else lower[c] for c in currency]
    cols["origin"] = [f"{name}:{i}" for i in range(1, n + 1)]
    cols["key_recorded"] = np.ones(n, dtype=np.int64)  # every line's `request` is an object
    cols["livemode"] = [None if v is None else int(v)
                        for v in table.column("livemode").to_pylist()]
    cols["detail"] = [None if c is None else _first_detail(c, short)
                      for c in table.column("detail_candidates").to_pylist()]
    args: list[str | None] = [None] * n
    threads: list[str | None] = [None] * n
    calls: list[str | None] = [None] * n
    for i, text in enumerate(table.column("metadata").to_pylist()):
        if text is None:
            continue
        meta = loads(text)
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
