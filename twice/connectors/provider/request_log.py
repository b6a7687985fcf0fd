"""A generic provider request log (CSV or JSON lines) with a column mapping.

Covers what has no API: request logs exported by hand from a provider's dashboard, a gateway's
access log, or a log a team writes itself. The mapping names, for each of our fields, the file's
column: `load(path, mapping={"request_id": "Request ID", "created": "Date"})`; fields not mapped
are looked up under their own name. Only `request_id` and `created` are required.

`body` may be form-encoded (`amount=2000&currency=usd&metadata[thread_id]=t1`, what stripe-python
sends; lists as `items[0][price]=...`) or JSON. It is parsed into `args` / `args_fingerprint`,
`amount`, `currency`, `subject` (customer) and thread / tool call ids stamped in `metadata`.

Limits: files up to 1 GiB (`twice.connectors.jsonfile`); a CSV field over 128 KiB (Python csv's
limit) makes its record a warning; amounts and statuses beyond 64-bit integers are left empty
with a warning.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
import pandas as pd

from twice.connectors._parsing import (
    EARLIEST,
    LATEST,
    Skip,
    ids_from_metadata,
    minor_units,
    short,
    text_or_none,
)
from twice.connectors.base import LoadResult, SourceError, SourceWarning, Warnings, redact
from twice.connectors.jsonfile import (
    MAX_BAD_LEAD,
    MAX_LINE_BYTES,
    json_documents,
    lines,
    loads,
    open_bytes,
)
from twice.timeline import Kind, canonical_json, fingerprint, make_timeline

name = "request_log"

FIELDS = (
    "request_id", "created", "method", "path", "idempotency_key", "status", "body",
    "replayed", "customer", "amount", "currency", "object_id",
)
REQUIRED = ("request_id", "created")
_TRUE = frozenset({"true", "t", "yes", "y", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "0", ""})
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")
_FORM_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")
# unix time in s, ms, us or ns (10**0, 10**3, ...): the first reading between EARLIEST and
# LATEST wins; the four ranges do not overlap, so the magnitude alone tells the unit
_UNIT_EXPONENTS = (0, 3, 6, 9)
_EARLIEST_NS = int(EARLIEST.timestamp()) * 10**9
_LATEST_NS = int(LATEST.timestamp()) * 10**9
# Shown as *** in `args` (the fingerprint is taken before, so it still tells bodies apart).
_SECRET_PARAMS = frozenset({"number", "cvc", "password", "client_secret", "secret", "api_key"})


def parse_mapping(text: str) -> dict[str, str]:
    """`"request_id=Request ID,created=Date"` -> {"request_id": "Request ID", "created": "Date"}.

    Raises ValueError naming the bad part (an entry without `=`, or an unknown field).
    """
    mapping: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        field, sep, column = part.partition("=")
        field, column = field.strip(), column.strip()
        if not sep or not field or not column:
            raise ValueError(f"mapping entry {part.strip()!r} is not field=column")
        if field not in FIELDS:
            raise ValueError(f"unknown field {field!r} in mapping; fields: {', '.join(FIELDS)}")
        mapping[field] = column
    return mapping


def parse_created(value: Any) -> tuple[pd.Timestamp, bool]:
    """A request time -> (UTC timestamp, True when the text had no zone and was read as UTC).

    Accepts ISO 8601 (with or without zone) and unix time in s, ms, us or ns (told apart by
    magnitude). Raises Skip for anything else or for times outside 2000-2100.
    """
    if isinstance(value, bool) or value is None:
        raise Skip(f"created {value!r} is not a time")
    text = str(value).strip()
    if isinstance(value, (int, float)) or _NUMBER.fullmatch(text):
        try:
            number = Decimal(text)
        except InvalidOperation:
            raise Skip(f"created {short(text, 40)!r} is not a time") from None
        for exponent in _UNIT_EXPONENTS if number.is_finite() else ():
            ns = int(number * 10 ** (9 - exponent))
            if _EARLIEST_NS <= ns <= _LATEST_NS:
                return pd.Timestamp(ns, unit="ns", tz="UTC"), False
        raise Skip(f"created {short(text, 40)} is not a plausible unix time (s, ms, us or ns)")
    says_utc = text.upper().endswith(" UTC")  # "2024-05-01 10:00:00 UTC", a common export
    try:
        parsed = datetime.fromisoformat(text[:-4].rstrip() if says_utc else text)
    except ValueError:
        raise Skip(f"created {short(text, 40)!r} is not ISO 8601 or unix time") from None
    if says_utc and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    naive = parsed.tzinfo is None
    aware = parsed.replace(tzinfo=UTC) if naive else parsed
    if not EARLIEST <= aware <= LATEST:
        raise Skip(f"created {short(text, 40)} is outside 2000-2100")
    return pd.Timestamp(aware).tz_convert("UTC"), naive


def _listify(value: Any) -> Any:
    """Turn dicts keyed "0".."n-1" (form-encoded arrays) into lists, recursively."""
    if isinstance(value, dict):
        value = {k: _listify(v) for k, v in value.items()}
        if value and all(k.isdigit() for k in value):
            keys = sorted(value, key=int)
            if [int(k) for k in keys] == list(range(len(keys))):
                return [value[k] for k in keys]
    return value


def parse_form(text: str) -> dict[str, Any]:
    """Stripe-style form body -> nested params (`metadata[thread_id]=x` -> {"metadata": {...}})."""
    params: dict[str, Any] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        match = _FORM_KEY.match(key)
        parts = [match[1], *re.findall(r"\[([^\[\]]*)\]", match[2])] if match else [key]
        node: Any = params
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        last = parts[-1]
        if not isinstance(node, dict) or isinstance(node.get(last), dict):
            params[key] = value  # `a=1&a[b]=2`: the two shapes clash, keep this one flat
            continue
        node[last if last else str(len(node))] = value  # `a[]=x`: next index
    return {k: _listify(v) for k, v in params.items()}


def mask_secrets(value: Any) -> Any:
    """Params for display: card numbers, CVCs and secrets replaced by `***`."""
    if isinstance(value, dict):
        return {k: "***" if str(k).lower() in _SECRET_PARAMS else mask_secrets(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


def parse_body(body: Any) -> Any:
    """A request body (form text, JSON text, or already parsed JSON) -> params.

    Raises ValueError for text that starts like JSON but does not parse.
    """
    if isinstance(body, (dict, list)):
        return body
    text = str(body).strip()
    if text[:1] in ("{", "["):
        try:
            return loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"body is not valid JSON ({exc})") from None
    return parse_form(text)


def _truthy(value: Any, where: str, warnings: list[SourceWarning]) -> bool:
    if isinstance(value, bool):
        return value
    text = "" if value is None else str(value).strip().lower()
    if text in _TRUE:
        return True
    if text not in _FALSE:
        warnings.append(SourceWarning(where, f"replayed {short(text, 40)!r} is not yes/no; "
                                      "read as not replayed"))
    return False


def _status(value: Any, where: str, warnings: list[SourceWarning]) -> int | None:
    text = text_or_none(value)
    if text is None:
        return None
    try:
        status = minor_units(text if not isinstance(value, (int, float)) else value)
    except ValueError:
        status = 0
    if 100 <= status <= 599:
        return status
    warnings.append(SourceWarning(where, f"status {short(text, 40)!r} is not an HTTP status; "
                                  "left empty"))
    return None


def record_row(
    record: Mapping[str, Any], columns: Mapping[str, str], where: str,
    warnings: list[SourceWarning],
) -> tuple[dict[str, Any], bool]:
    """One log record -> (provider_request row, time had no zone). Raises Skip when unusable."""
    def cell(field: str) -> Any:
        column = columns.get(field)
        return None if column is None else record.get(column)

    request_id = text_or_none(cell("request_id"))
    if not request_id:
        raise Skip("empty request id")
    at, naive = parse_created(cell("created"))
    status = _status(cell("status"), where, warnings)
    row: dict[str, Any] = {
        "at": at, "source": name, "origin": where, "kind": Kind.PROVIDER_REQUEST.value,
        "initiator": "api",
        "request_id": request_id, "status": status,
        "idempotency_key": text_or_none(cell("idempotency_key")),
        "key_recorded": 1 if "idempotency_key" in columns else 0,
        "object_id": text_or_none(cell("object_id")),
    }
    method = text_or_none(cell("method"))
    row["method"] = method.upper() if method else None
    path = text_or_none(cell("path"))
    row["path"] = (urlsplit(path).path or None) if path else None  # no query strings
    params: Any = None
    body = cell("body")
    if text_or_none(body) is not None or isinstance(body, (dict, list)):
        try:
            params = parse_body(body)
        except ValueError as exc:
            warnings.append(SourceWarning(where, f"{exc}; kept as text"))
            row["args"] = short(body, 2000)
            row["args_fingerprint"] = fingerprint(str(body))
    if params is not None:
        row["args"] = canonical_json(mask_secrets(params))
        row["args_fingerprint"] = fingerprint(params)
    given = params if isinstance(params, Mapping) else {}
    amount = cell("amount") if text_or_none(cell("amount")) else given.get("amount")
    if amount is not None and not isinstance(amount, (dict, list)):
        try:
            row["amount"] = minor_units(amount)
        except ValueError as exc:
            warnings.append(SourceWarning(where, f"{exc}; amount left empty"))
    currency = text_or_none(cell("currency")) or text_or_none(given.get("currency"))
    row["currency"] = currency.lower() if currency else None
    row["subject"] = text_or_none(cell("customer")) or text_or_none(given.get("customer"))
    row.update(ids_from_metadata(given.get("metadata")))
    if cell("replayed") is not None and _truthy(cell("replayed"), where, warnings):
        row["outcome"] = "replayed"
    elif status is not None:
        row["outcome"] = "ok" if 200 <= status < 300 else "error"
    return row, naive


def resolve_columns(
    header: Iterable[str], mapping: Mapping[str, str] | None, origin: str,
) -> tuple[dict[str, str], list[SourceWarning]]:
    """Our field -> the file's column, checked against the header.

    Names match exactly, else ignoring case and surrounding spaces. Raises one SourceError naming
    every missing required or explicitly mapped column.
    """
    mapping = dict(mapping or {})
    unknown = sorted(set(mapping) - set(FIELDS))
    if unknown:
        raise SourceError(origin, f"unknown field(s) in mapping: {', '.join(unknown)}; "
                          f"fields: {', '.join(FIELDS)}")
    present = list(header)
    loose = {h.strip().lower(): h for h in present}
    columns: dict[str, str] = {}
    missing: list[str] = []
    for field in FIELDS:
        wanted = mapping.get(field, field)
        found = wanted if wanted in present else loose.get(wanted.strip().lower())
        if found is not None:
            columns[field] = found
        elif field in REQUIRED or field in mapping:
            missing.append(f"{wanted!r} (for {field})" if wanted != field else repr(wanted))
    if missing:
        raise SourceError(origin, f"missing column(s) {', '.join(missing)}; "
                          f"header has: {', '.join(present) or 'nothing'}")
    warnings: list[SourceWarning] = Warnings()
    if "idempotency_key" not in columns:
        warnings.append(SourceWarning(origin, "no idempotency_key column: the keys are unknown "
                                      "(empty here does not mean none was sent)"))
    return columns, warnings


def parse_records(
    records: Iterable[tuple[str, Mapping[str, Any]]], columns: Mapping[str, str], origin: str,
) -> LoadResult:
    """(locator, record) pairs with resolved columns -> provider_request rows and warnings."""
    warnings: list[SourceWarning] = Warnings()
    rows: list[dict[str, Any]] = []
    naive = 0
    for where, record in records:
        try:
            row, was_naive = record_row(record, columns, where, warnings)
        except Skip as exc:
            warnings.append(SourceWarning(where, f"{exc}; skipped"))
            continue
        naive += was_naive
        rows.append(row)
    if naive:
        warnings.append(SourceWarning(origin, f"{naive} time(s) have no zone; read as UTC"))
    return LoadResult(source=name, rows=make_timeline(rows), warnings=warnings)


def parse_csv(text: str, origin: str, mapping: Mapping[str, str] | None = None) -> LoadResult:
    """CSV text (decoded with surrogateescape, so bad bytes are visible) -> rows and warnings."""
    return parse_csv_lines(io.StringIO(text, newline=""), _delimiter(text[:65536]), origin,
                           mapping)


def _csv_lines(raw: bytes, origin: str) -> Iterator[str]:
    """The lines of a CSV file, each decoded on its own (a whole file decoded at once, and
    then read through a StringIO, costs up to five times its size)."""
    for n, line in lines(raw):
        if line is None:
            raise SourceError(origin, f"line {n} is longer than {MAX_LINE_BYTES // 2**20} MiB: "
                                      "not a request log")
        yield line.decode("utf-8", errors="surrogateescape")


def parse_csv_lines(lines_: Iterable[str], delimiter: str, origin: str,
                    mapping: Mapping[str, str] | None = None) -> LoadResult:
    """CSV lines (with their line ends) -> rows and warnings."""
    # strict: a quoted field cut off by the end of the file is an error, not a short value
    reader = csv.reader(lines_, delimiter=delimiter, strict=True)
    header: list[str] = []
    pre: list[SourceWarning] = Warnings()
    records: list[tuple[str, dict[str, str]]] = []
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            pre.append(SourceWarning(f"{origin}:{reader.line_num}", f"bad CSV ({exc}); skipped"))
            continue
        where = f"{origin}:{reader.line_num}"
        if not any(c.strip() for c in cells):
            continue
        if not header:
            header = [c.lstrip("\ufeff") for c in cells]
            continue
        if any(_has_bad_bytes(c) for c in cells):
            pre.append(SourceWarning(where, "invalid UTF-8 bytes; skipped"))
        elif len(cells) != len(header):
            pre.append(SourceWarning(where, f"{len(cells)} fields, header has {len(header)}; "
                                     "skipped"))
        else:
            records.append((where, dict(zip(header, cells, strict=True))))
    if not header:
        raise SourceError(origin, "no CSV header")
    if _has_bad_bytes("".join(header)):
        raise SourceError(origin, "header is not UTF-8 text")
    columns, notes = resolve_columns(header, mapping, origin)
    result = parse_records(records, columns, origin)
    result.warnings[:0] = pre + notes
    return result


def _delimiter(head: str) -> str:
    """The delimiter of the header line: whichever of , ; tab | it holds most of."""
    first = next((line for line in head.splitlines() if line.strip()), "")
    return max(",;\t|", key=lambda d: (first.count(d), d == ","))


def _has_bad_bytes(text: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def parse_json_records(
    documents: Iterable[tuple[str, Any]], origin: str, mapping: Mapping[str, str] | None = None,
) -> LoadResult:
    """Parsed JSON documents (JSON lines, or one array of objects) -> rows and warnings."""
    pre: list[SourceWarning] = Warnings()
    records: list[tuple[str, Mapping[str, Any]]] = []
    for locator, value in documents:
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for i, item in items:
            where = locator if i is None else f"{locator}[{i}]"
            if isinstance(item, Mapping):
                records.append((where, item))
            else:
                pre.append(SourceWarning(where, f"expected a JSON object, got "
                                         f"{type(item).__name__}; skipped"))
                if not records and len(pre) >= MAX_BAD_LEAD:  # junk: do not read it all
                    raise SourceError(origin, "no JSON objects (request log records) in the "
                                              f"first {len(pre):,} records")
    if not records:
        raise SourceError(origin, "no JSON objects (request log records) found")
    header = list(dict.fromkeys(k for _, r in records for k in r))
    columns, notes = resolve_columns(header, mapping, origin)
    result = parse_records(records, columns, origin)
    result.warnings[:0] = pre + notes
    return result


def _looks_like_json(raw: bytes) -> bool:
    return raw.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[")


def load(target: str | Path, mapping: Mapping[str, str] | None = None) -> LoadResult:
    path = Path(target)
    origin = redact(str(path))
    raw = open_bytes(path)
    if not raw.strip():
        raise SourceError(origin, "file is empty")
    if _looks_like_json(raw):
        warnings: list[SourceWarning] = Warnings()
        result = parse_json_records(json_documents(path, warnings), origin, mapping)
        result.warnings[:0] = warnings
        return result
    head = raw[:65536].decode("utf-8", errors="surrogateescape")
    return parse_csv_lines(_csv_lines(raw, origin), _delimiter(head), origin, mapping)


def sniff(path: Path, head: bytes) -> bool:
    if _looks_like_json(head):
        first = head.lstrip(b"\xef\xbb\xbf \t\r\n").splitlines()[0]
        try:
            value = loads(first)
        except orjson.JSONDecodeError:
            return False
        return isinstance(value, dict) and {"request_id", "idempotency_key"} <= value.keys()
    text = head.decode("utf-8", errors="ignore").lstrip("\ufeff")
    first_line = next((line for line in text.splitlines() if line.strip()), "")
    try:
        cells = next(csv.reader([first_line], delimiter=_delimiter(first_line)))
    except (csv.Error, StopIteration):
        return False
    names = {c.strip().lower() for c in cells}
    return {"request_id", "created", "idempotency_key"} <= names
