"""The timeline: one pandas DataFrame every evidence source is normalised into.

One row is one thing a source recorded (a provider request or event, a checkpoint, a tool call
found in a checkpoint, a tool result, a span, a queue receive). Every connector returns rows in
this schema; the engine reads nothing else. Columns a source does not know stay null.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import orjson
import pandas as pd


class Kind(StrEnum):
    """What a timeline row is."""

    PROVIDER_EVENT = "provider_event"  # a provider Event object (e.g. Stripe charge.succeeded)
    PROVIDER_REQUEST = "provider_request"  # one API request the provider logged
    CHECKPOINT = "checkpoint"  # one LangGraph checkpoint (a step of a thread)
    TOOL_CALL = "tool_call"  # a tool call the model emitted, found in a checkpoint
    TOOL_RESULT = "tool_result"  # a ToolMessage answering a tool call, found in a checkpoint
    TOOL_SPAN = "tool_span"  # a span around one tool execution
    HTTP_SPAN = "http_span"  # an HTTP client span (one attempt on the wire)
    QUEUE_RECEIVE = "queue_receive"  # a queue handing a message/run to a worker


TIME = "datetime64[ns, UTC]"
TEXT = "string"
INT = "Int64"


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("at", TIME, "when the source says it happened (raw, the source's own clock)"),
    Column("at_aligned", TIME, "`at` corrected by the source's estimated clock offset"),
    Column("end", TIME, "end time for rows with a duration (spans), raw clock"),
    Column("source", TEXT, "connector name: stripe_events, stripe_logs, request_log, checkpoints, "
           "spans, sqs"),
    Column("origin", TEXT, "where the row came from: file (or redacted DSN) and line/row locator"),
    Column("kind", TEXT, "one of Kind"),
    Column("thread_id", TEXT, "agent conversation/run id (LangGraph thread_id)"),
    Column("checkpoint_id", TEXT, "LangGraph checkpoint id (UUIDv6)"),
    Column("step", INT, "LangGraph metadata step"),
    Column("tool_call_id", TEXT, "id the model gave the tool call (toolu_..., call_...)"),
    Column("tool_name", TEXT, "tool name"),
    Column("args", TEXT, "tool arguments or request body as canonical JSON / form text"),
    Column("args_fingerprint", TEXT, "sha256[:16] of canonical arguments"),
    Column("subject", TEXT, "who the effect is for: a customer id (cus_...) or equivalent"),
    Column("amount", INT, "amount in minor units, when the effect has one"),
    Column("currency", TEXT, "ISO currency, lower case"),
    Column("idempotency_key", TEXT, "idempotency key sent on the wire (null: none sent, when "
           "key_recorded is 1)"),
    Column("key_recorded", INT, "1: the record says which key was sent, so a null key means none "
           "was; 0 or null: it cannot say (stripe logs tail, Stripe events before API version "
           "2017-05-25, a request log without a key column, spans that capture no headers)"),
    Column("request_id", TEXT, "provider request id (req_...)"),
    Column("object_id", TEXT, "id of the effect object (ch_..., pi_..., re_...)"),
    Column("object_type", TEXT, "type of the effect object (charge, payment_intent, ...)"),
    Column("belongs_to", TEXT, "ids of the provider objects this one is part of, comma-separated: "
           "a charge's PaymentIntent, a PaymentIntent's (or invoice payment's) invoice, an "
           "invoice's subscription; one payment is the root object and its children"),
    Column("initiator", TEXT, "who made a provider record happen: api (a request), automatic "
           "(the provider's own flow, e.g. a renewal: Stripe's request.id null), null: not said"),
    Column("event_type", TEXT, "provider event type (charge.succeeded, ...)"),
    Column("event_id", TEXT, "provider event id (evt_...)"),
    Column("method", TEXT, "HTTP method"),
    Column("path", TEXT, "HTTP path (no query string secrets)"),
    Column("status", INT, "HTTP status code"),
    Column("trace_id", TEXT, "trace id, lower-case hex"),
    Column("span_id", TEXT, "span id, lower-case hex"),
    Column("parent_span_id", TEXT, "parent span id, lower-case hex"),
    Column("name", TEXT, "span name / operation / checkpoint source"),
    Column("worker", TEXT, "host or process that did the work (host.name, service.instance.id)"),
    Column("resend_count", INT, "http.request.resend_count of an HTTP span (0 = first try)"),
    Column("proxy_attempt", INT, "attempt number a proxy stamped (x-envoy-attempt-count)"),
    Column("delivery_count", INT, "queue receive/delivery count (1 = first delivery)"),
    Column("message_id", TEXT, "queue message id"),
    Column("outcome", TEXT, "ok | error | timeout | unknown | replayed (source's word for it)"),
    Column("detail", TEXT, "short human text: error message, tool result content, ..."),
    Column("livemode", INT, "1: the provider's live mode, 0: its test mode (Stripe's `livemode`); "
           "null: the record does not say"),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
DTYPES: dict[str, str] = {c.name: c.dtype for c in COLUMNS}
_TIME_COLUMNS = [c.name for c in COLUMNS if c.dtype == TIME]
_INT_COLUMNS = [c.name for c in COLUMNS if c.dtype == INT]
_TEXT_COLUMNS = [c.name for c in COLUMNS if c.dtype == TEXT]
KINDS = frozenset(k.value for k in Kind)
_DTYPE_OBJECTS: dict[str, pd.api.extensions.ExtensionDtype] = {
    TIME: pd.DatetimeTZDtype(unit="ns", tz="UTC"), INT: pd.Int64Dtype(), TEXT: pd.StringDtype(),
}


@dataclass(frozen=True)
class SourceWarning:
    """A record a source could not use, and what was done about it."""

    source: str  # the file (or redacted DSN) and, where known, the line / row
    detail: str  # what was wrong with the record and what was done about it


class SchemaError(ValueError):
    """A frame does not follow the timeline schema (a bug in a connector, not bad input)."""


def empty_timeline() -> pd.DataFrame:
    return pd.DataFrame({c.name: pd.Series([], dtype=c.dtype) for c in COLUMNS})


def make_timeline(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Build a timeline from row dicts (missing keys are null).

    Times may be `pd.Timestamp`, `datetime` (aware) or int nanoseconds since the epoch.
    `at_aligned` defaults to `at`.
    """
    rows = list(records)
    if not rows:
        return empty_timeline()
    present = set().union(*(r.keys() for r in rows))
    unknown = present - set(COLUMN_NAMES)
    if unknown:
        raise SchemaError(f"unknown timeline columns: {sorted(unknown)}")
    data = {name: [r.get(name) for r in rows] for name in COLUMN_NAMES if name in present}
    if all(_int_or_none(data[name]) for name in _TIME_COLUMNS if name in data):
        # times already in ns (checkpoints): the column-wise path, without a pass through
        # pandas' mixed-format date parsing for every column
        return from_columns(data, len(rows))
    # integer columns as objects: pandas would make ints beside a None float64, which rounds
    # past 2**53 and cannot hold 2**63 - 1
    return coerce(pd.DataFrame({name: pd.Series(values, dtype=object) if name in _INT_COLUMNS
                                else values for name, values in data.items()}))


def _int_or_none(values: list[Any]) -> bool:
    return all(v is None or type(v) is int for v in values)


def from_columns(columns: Mapping[str, Sequence[Any]], n: int) -> pd.DataFrame:
    """Build a timeline of `n` rows from column lists (absent columns are null).

    The fast path for sources with many rows: each column is converted once, with no row dicts.
    Times are int nanoseconds since the epoch, integers ints, text str; None is null. A column
    may also be a numpy integer array (times, integers) or an Arrow array (from DuckDB), taken
    without a round trip through Python objects.
    `at_aligned` defaults to `at`.
    """
    if not n:
        return empty_timeline()
    unknown = set(columns) - set(COLUMN_NAMES)
    if unknown:
        raise SchemaError(f"unknown timeline columns: {sorted(unknown)}")
    ragged = sorted(name for name, values in columns.items() if len(values) != n)
    if ragged:
        raise SchemaError(f"columns without {n} values: {ragged}")
    data = {name: _column(columns.get(name), DTYPES[name], n) for name in COLUMN_NAMES}
    data["at_aligned"] = data["at_aligned"].fillna(data["at"])
    return pd.DataFrame(data)


def _column(values: Sequence[Any] | None, dtype: str, n: int) -> pd.Series:
    """One column of `from_columns` in its schema dtype."""
    index = pd.RangeIndex(n)
    if values is None:
        if dtype == TEXT and pd.StringDtype().storage == "pyarrow":
            # all null at once (a column a source leaves empty): pandas would repeat its NA a
            # million times through a take
            import pyarrow as pa

            return pd.Series(pd.array(pa.nulls(n, pa.large_string()), dtype=pd.StringDtype()),
                             index=index)
        return pd.Series(pd.NaT if dtype == TIME else pd.NA, index=index,
                         dtype=_DTYPE_OBJECTS[dtype])
    if type(values).__module__.startswith("pyarrow"):  # an Arrow (chunked) array, from DuckDB
        return _arrow_column(values, dtype, index)
    if isinstance(values, np.ndarray) and values.dtype.kind == "i" and dtype in (TIME, INT):
        ints = pd.Series(values.astype(np.int64), index=index)
        if dtype == INT:
            return ints.astype(_DTYPE_OBJECTS[INT])
        return pd.to_datetime(ints, unit="ns", utc=True).astype(_DTYPE_OBJECTS[TIME])
    if dtype in (TIME, INT) and _all_none(values, n):
        return _column(None, dtype, n)  # all null (a column only some row kinds fill)
    if dtype == TIME:
        ints = _int_array(values)
        ns = pd.Series(pd.array(list(values), dtype=pd.Int64Dtype()) if ints is None else ints,
                       index=index)
        return pd.to_datetime(ns, unit="ns", utc=True).astype(_DTYPE_OBJECTS[TIME])
    if dtype == INT:
        if (ints := _int_array(values)) is not None:
            return pd.Series(ints, index=index)
        return whole_numbers(pd.Series(list(values), index=index, dtype=object))
    text = pd.StringDtype()
    if text.storage == "pyarrow":
        # pandas keeps strings in Arrow here: making the Arrow array straight from the list is
        # several times faster than pandas' own element-by-element conversion
        import pyarrow as pa

        try:
            return pd.Series(pd.array(pa.array(values, type=pa.large_string()), dtype=text),
                             index=index)
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            pass  # not all str or None: pandas converts them as `coerce` does
    return pd.Series(pd.array(list(values), dtype=text), index=index)


_INT_OR_NONE = frozenset((int, type(None)))


def _all_none(values: Sequence[Any], n: int) -> bool:
    if type(values) not in (list, tuple):
        return False
    try:
        return values.count(None) == n  # (counted in C)
    except TypeError:  # a value that cannot say whether it equals None: pd.NA
        return False


def _int_array(values: Sequence[Any]) -> pd.arrays.IntegerArray | None:
    """Python ints (and None) as an Int64 array, through Arrow: several times faster than
    pandas' element-by-element conversion. None when some value is not an int or None, or
    beyond int64, or pyarrow is missing: the caller converts them as before."""
    if not _INT_OR_NONE.issuperset(map(type, values)):
        return None
    try:
        import pyarrow as pa
    except ImportError:
        return None
    try:
        arrow = pa.array(values, type=pa.int64())
    except (OverflowError, pa.ArrowInvalid):
        return None
    return pd.arrays.IntegerArray(arrow.fill_null(0).to_numpy(zero_copy_only=False, writable=True),
                                  arrow.is_null().to_numpy(zero_copy_only=False))


def _arrow_column(values: Any, dtype: str, index: pd.RangeIndex) -> pd.Series:
    import pyarrow as pa

    if dtype == TEXT:
        return pd.Series(pd.array(values.cast(pa.large_string()), dtype=pd.StringDtype()),
                         index=index)
    ints = pd.Series(values.cast(pa.int64()).to_pandas(
        types_mapper={pa.int64(): pd.Int64Dtype()}.get), index=index)
    if dtype == INT:
        return ints
    return pd.to_datetime(ints, unit="ns", utc=True).astype(_DTYPE_OBJECTS[TIME])


def coerce(df: pd.DataFrame) -> pd.DataFrame:
    """Give a frame with (a subset of) the schema's columns the schema's columns and dtypes."""
    out = pd.DataFrame(index=df.index)
    for name in COLUMN_NAMES:
        col = df[name] if name in df.columns else pd.Series([None] * len(df), index=df.index)
        dtype = DTYPES[name]
        if dtype == TIME:
            if pd.api.types.is_integer_dtype(col.dtype):
                col = pd.to_datetime(col, unit="ns", utc=True)
            else:
                col = pd.to_datetime(col, utc=True, format="mixed")
            out[name] = col.astype(_DTYPE_OBJECTS[TIME])
        elif dtype == INT:
            out[name] = whole_numbers(col)
        else:
            out[name] = col.astype(object).where(col.notna(), None).astype(_DTYPE_OBJECTS[TEXT])
    if out["at_aligned"].isna().all():
        out["at_aligned"] = out["at"]
    else:
        out["at_aligned"] = out["at_aligned"].fillna(out["at"])
    return out


def whole_numbers(col: pd.Series) -> pd.Series:
    """An integer column as Int64. Values given as Python objects are converted exactly (every
    int64, 2**63 - 1 included, with nulls beside it); one that is not a whole number within
    int64 (2**64, 1.5, "x") becomes null."""
    if col.dtype == object:
        try:
            return pd.Series(pd.array(col.tolist(), dtype=pd.Int64Dtype()), index=col.index)
        except (TypeError, ValueError, OverflowError):
            return pd.Series(pd.array([_whole(v) for v in col.tolist()], dtype=pd.Int64Dtype()),
                             index=col.index)
    if str(col.dtype) == INT:
        return col
    numbers = pd.to_numeric(col, errors="coerce")
    if numbers.dtype.kind == "f":
        # a float that is no whole number within int64 (1.5, inf, 2**64) is none
        values = numbers.to_numpy()
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(values) & (np.floor(values) == values) & \
                (np.abs(values) < 2.0**63)
        numbers = numbers.where(whole)
    return numbers.astype(_DTYPE_OBJECTS[INT])


def _whole(value: Any) -> Any:
    try:
        return pd.array([value], dtype=pd.Int64Dtype())[0]
    except (TypeError, ValueError, OverflowError):
        return pd.NA


def validate(df: pd.DataFrame) -> None:
    """Raise SchemaError unless `df` has exactly the schema's columns, dtypes and kinds."""
    missing = [c for c in COLUMN_NAMES if c not in df.columns]
    extra = [c for c in df.columns if c not in DTYPES]
    if missing or extra:
        raise SchemaError(f"timeline columns differ: missing {missing}, extra {extra}")
    for name, dtype in DTYPES.items():
        if str(df[name].dtype) != dtype:
            raise SchemaError(f"column {name!r} has dtype {df[name].dtype}, expected {dtype}")
    bad_kinds = set(df["kind"].dropna().unique()) - KINDS
    if bad_kinds:
        raise SchemaError(f"unknown kinds: {sorted(bad_kinds)}")
    if df["at"].isna().any():
        raise SchemaError("every row needs a time in `at`")
    if df["source"].isna().any() or df["kind"].isna().any():
        raise SchemaError("every row needs `source` and `kind`")


def concat(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    parts = [f for f in frames if len(f)]
    if not parts:
        return empty_timeline()
    out = pd.concat(parts, ignore_index=True)
    if out["at"].is_monotonic_increasing:  # one source written in time order: nothing to move
        return out
    order = np.argsort(out["at"].to_numpy(dtype="datetime64[ns]").view(np.int64), kind="stable")
    if out["at"].isna().any():  # (never: every row has a time) NaT last, as pandas sorts it
        return out.sort_values("at", kind="stable", ignore_index=True)
    # a column a source leaves empty stays empty in any order: only the others are moved
    return pd.DataFrame({name: col if col.isna().all() else
                         pd.Series(col.array.take(order), name=name)
                         for name, col in out.items()})


def sort_by_time_and_id(frame: pd.DataFrame, at: str = "at", ids: str = "attempt_id"
                        ) -> pd.DataFrame:
    """`frame.sort_values([at, ids], kind="stable", ignore_index=True)`, sorted by Arrow: pandas
    would factorize every id to sort on text (seconds for a month of attempts). Arrow compares
    text as UTF-8 bytes, which orders as Python orders code points."""
    times = frame[at]
    if len(frame) > 1 and isinstance(times.dtype, pd.DatetimeTZDtype) and times.notna().all():
        import pyarrow as pa
        import pyarrow.compute as pc

        names = frame[ids].to_numpy(dtype=object)
        try:
            table = pa.table({
                "at": pa.array(times.to_numpy(dtype="datetime64[ns]").view(np.int64)),
                "id": pa.array(names, type=pa.large_string())})
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeError):
            pass  # an id that is no text (or no valid UTF-8): pandas compares it
        else:
            if table.column("id").null_count == 0:
                order = pc.sort_indices(table, sort_keys=[("at", "ascending"),
                                                          ("id", "ascending")])
                return frame.take(order.to_numpy()).reset_index(drop=True)
    return frame.sort_values([at, ids], kind="stable", ignore_index=True)


def canonical_json(value: Any) -> str:
    """Stable JSON text of a value: sorted keys, no whitespace."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()
    except TypeError:  # integers beyond 64 bits, or keys that are not text (decoded msgpack)
        return json.dumps(_text_keys(value), sort_keys=True, separators=(",", ":"), default=str)


MAX_DEPTH = 100  # deeper parts of a value are written as "…" (hostile nesting, not data)


def _text_keys(value: Any, depth: int = 0) -> Any:
    if depth >= MAX_DEPTH and isinstance(value, Mapping | list | tuple):
        return "…"
    if isinstance(value, Mapping):
        return {str(k): _text_keys(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_text_keys(v, depth + 1) for v in value]
    return value


def fingerprint(value: Any) -> str:
    """Fingerprint of tool arguments / request parameters (sha256 of canonical JSON, 16 hex)."""
    text = value if isinstance(value, str) else canonical_json(value)
    return hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()[:16]


def isin(column: pd.Series, values: Iterable[Any]) -> pd.Series:
    """`column.isin(values)`, with pandas' meaning (a missing value matches a missing value among
    `values`), in time linear in both: pandas' arrow-backed text columns turn every one of
    `values` into an arrow scalar in Python first, which costs seconds for 100,000 ids. An
    arrow-backed text column is looked up in Arrow's own hash table (`pyarrow.compute.is_in`):
    no id becomes a Python object."""
    found = _arrow_isin(column, values)
    if found is not None:
        return pd.Series(found, index=column.index)
    vals = pd.Series(values if isinstance(values, pd.Series | pd.Index) else list(values),
                     dtype=object)
    missing = vals.isna()
    out = column.astype(object).isin(vals[~missing].to_numpy())
    if missing.any():
        out |= column.isna()
    return out.astype(bool)


def positions(haystack: pd.Series, needles: pd.Series) -> np.ndarray:
    """For each of `needles`, the position in `haystack` of its first equal value (-1: none; a
    missing needle finds the first missing value). Arrow-backed text is looked up in Arrow's
    hash table (`pyarrow.compute.index_in`), other values through an index of the first
    occurrences."""
    hay = arrow_text(haystack)
    if hay is not None and len(needles):
        import pyarrow as pa
        import pyarrow.compute as pc

        wanted = arrow_text(needles)
        try:
            if wanted is None:
                wanted = pa.array(needles.to_numpy(dtype=object), type=hay.type, from_pandas=True)
            elif wanted.type != hay.type:
                wanted = wanted.cast(hay.type)
            hay_array = hay.combine_chunks() if isinstance(hay, pa.ChunkedArray) else hay
            found = pc.index_in(wanted, value_set=hay_array, skip_nulls=False)
            return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False),
                              dtype=np.intp)
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeError):
            pass  # a value that is no text: pandas compares it below
    values = haystack.astype(object).to_numpy()
    first = np.flatnonzero(~pd.Series(values).duplicated().to_numpy())
    where = pd.Index(values[first]).get_indexer(needles.astype(object).to_numpy())
    out = np.full(len(where), -1, dtype=np.intp)
    out[where >= 0] = first[where[where >= 0]]
    return out


def arrow_text(values: Any) -> Any | None:
    """The Arrow array behind an arrow-backed text Series, Index or array (None otherwise)."""
    array = values.array if isinstance(values, pd.Series | pd.Index) else values
    data = getattr(array, "_pa_array", None)
    if data is None or not isinstance(getattr(array, "dtype", None), pd.StringDtype):
        return None
    return data


_SAMPLE = 2048  # values a column's first distinct count is taken of (text_objects)


def text_objects(data: Any) -> np.ndarray:
    """An Arrow text array as a numpy array of Python str, None for null.

    A column of few distinct values (a method, a currency, a source, how an attempt was
    linked) makes each distinct str once and shares it: half a million rows then hold a
    handful of str objects, not half a million (about 27 MB a column), made in a quarter of
    the time. Whether a column is such is judged on its first `_SAMPLE` values; the values
    are the same either way."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(data) >= 4 * _SAMPLE and pc.count_distinct(
            data.slice(0, _SAMPLE), mode="all").as_py() <= _SAMPLE // 8:
        whole = data.combine_chunks() if isinstance(data, pa.ChunkedArray) else data
        coded = pc.dictionary_encode(whole)
        distinct = np.empty(len(coded.dictionary) + 1, dtype=object)  # the last for null
        distinct[:-1] = coded.dictionary.to_pylist()
        return distinct[coded.indices.fill_null(len(coded.dictionary)).to_numpy(
            zero_copy_only=False)]
    if isinstance(data, pa.ChunkedArray):
        return data.to_numpy()  # (takes no zero_copy_only before pyarrow 16; never zero-copy)
    return data.to_numpy(zero_copy_only=False)


def _arrow_isin(column: pd.Series, values: Iterable[Any]) -> np.ndarray | None:
    data = arrow_text(column)
    if data is None:
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = arrow_text(values)
    if wanted is None:
        items = values.tolist() if isinstance(values, pd.Series | pd.Index | np.ndarray) \
            else list(values)
        if not all(v is None or isinstance(v, str) for v in items):
            return None  # pd.NA, NaN or a non-text value: pandas decides what they mean
        try:
            wanted = pa.array(items, type=data.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeError):
            return None
    elif wanted.type != data.type:
        wanted = wanted.cast(data.type)
    if isinstance(wanted, pa.ChunkedArray):
        wanted = wanted.combine_chunks()
    found = pc.is_in(data, value_set=wanted, skip_nulls=False).fill_null(False)
    return np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)


def derived_key(thread_id: str, tool_call_id: str) -> str:
    """The idempotency key every re-execution of one tool call re-derives (domain.md)."""
    return hashlib.sha256(f"{thread_id}:{tool_call_id}".encode()).hexdigest()[:32]
