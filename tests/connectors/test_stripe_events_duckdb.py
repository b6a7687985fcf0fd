"""The DuckDB fast path for big Stripe event exports gives exactly the Python path's rows and
warnings, or declines (None) and leaves the file to the Python path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.connectors.fuzz_inputs import json_text, mutated_records
from tests.connectors.fuzz_summary import fuzz_settings
from twice.connectors._parsing import DETAIL_MAX
from twice.connectors.jsonfile import json_documents
from twice.connectors.provider import stripe_events, stripe_events_duckdb

DATA = Path(__file__).parent / "data" / "provider"
EVENTS: list[Any] = orjson.loads((DATA / "events_page.json").read_bytes())["data"]


def _python_path(path: Path) -> stripe_events.LoadResult:
    warnings: list[stripe_events.SourceWarning] = []
    result = stripe_events.parse_documents(json_documents(path, warnings), str(path))
    result.warnings[:0] = warnings
    return result


def _same(fast: stripe_events.LoadResult, slow: stripe_events.LoadResult) -> None:
    assert list(fast.rows.columns) == list(slow.rows.columns)
    for col in slow.rows.columns:
        assert str(fast.rows[col].dtype) == str(slow.rows[col].dtype), col
        assert fast.rows[col].equals(slow.rows[col]), (col, fast.rows[col].head().tolist(),
                                                       slow.rows[col].head().tolist())
    assert fast.warnings == slow.warnings


def _event(i: int, **changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "id": f"pi_{i:06d}", "object": "payment_intent", "amount": 1000 + i % 7,
        "currency": "USD" if i % 5 == 0 else "eur", "status": "succeeded",
        "customer": {"id": f"cus_{i % 13}", "object": "customer"} if i % 4 == 0
        else f"cus_{i % 13}",
        "metadata": {"thread_id": f"th_{i // 3}", "tool_call_id": f"call_{i}"} if i % 3 == 0
        else {},
        "description": "Subscription\t renewal   for\nApril" if i % 6 == 0 else None,
    }
    if i % 11 == 0:
        obj.update(status="requires_payment_method", amount=None,
                   last_payment_error={"message": "Your card was declined. " * 20})
    if i % 17 == 0:
        obj.update(object="charge", id=f"ch_{i:06d}", status="failed",
                   failure_message="insufficient funds")
    event = {"id": f"evt_{i:06d}", "object": "event", "api_version": "2024-06-20",
             "created": 1_717_424_400 + i, "livemode": i % 9 == 0,
             "type": "charge.failed" if i % 17 == 0 else "payment_intent.succeeded",
             "request": {"id": None if i % 10 == 0 else f"req_{i // 2}",
                         "idempotency_key": None if i % 8 == 0 else f"key_{i // 2}"},
             "data": {"object": obj}}
    event.update(changes)
    return event


def _write(path: Path, events: list[Any], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events) + tail)
    return path


def test_a_clean_export_is_read_by_duckdb_exactly_as_by_python(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_event(i) for i in range(3000)])
    fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
    assert fast is not None
    _same(fast, _python_path(path))
    assert any("live-mode" in w.detail for w in fast.warnings)  # the file mixes modes
    assert fast.rows["detail"].str.len().max() == DETAIL_MAX


def test_big_files_take_the_fast_path_through_load(tmp_path: Path) -> None:
    events = [_event(i) for i in range(60_000)]
    path = _write(tmp_path / "events.jsonl", events)
    assert path.stat().st_size >= stripe_events_duckdb.MIN_BYTES
    assert stripe_events_duckdb.load(path, str(path)) is not None
    _same(stripe_events.load(path), _python_path(path))


def test_an_export_past_the_size_cap_is_streamed_by_duckdb_and_a_dirty_one_refused(
        tmp_path: Path) -> None:
    """The 1 GiB cap is for the Python path, which reads a file whole: a clean export that
    DuckDB streams is read at any size (the cap lowered here to stand for a 3 GiB month)."""
    events = [_event(i) for i in range(60_000)]
    path = _write(tmp_path / "events.jsonl", events)
    cap = path.stat().st_size // 2
    _same(stripe_events.load(path, max_bytes=cap), _python_path(path))
    dirty = _write(tmp_path / "dirty.jsonl", events, tail=b"{not json\n")
    with pytest.raises(stripe_events.SourceError, match="more than the"):
        stripe_events.load(dirty, max_bytes=cap)
    assert len(stripe_events.load(dirty).rows) == len(events)  # under the cap: Python reads it


def test_a_stripe_list_is_read_by_duckdb_exactly_as_by_python(tmp_path: Path) -> None:
    """Stripe's own list shape (what the API and `stripe events list` give), one document,
    pretty or on one line: read by DuckDB at any size, each event's origin its place in the
    list, and `has_more` warned of, as the Python path reads it."""
    events = [_event(i) for i in range(3000)]
    for name, document, option in (
            ("pretty.json", {"object": "list", "data": events, "has_more": True,
                             "url": "/v1/events"}, orjson.OPT_INDENT_2),
            ("one_line.json", {"object": "list", "data": events, "has_more": False}, None)):
        path = tmp_path / name
        path.write_bytes(orjson.dumps(document, option=option))
        fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
        assert fast is not None
        _same(fast, _python_path(path))
        assert fast.rows["origin"].iloc[-1] == f"{path}:data[2999]"
        assert any("more pages" in w.detail for w in fast.warnings) == (name == "pretty.json")


@pytest.mark.parametrize("head, tail, more", [
    (b'{"object": "list", "data": ', b', "has_more": true, "url": "/v1/events"}', True),
    (b'{"url": "/v1/events?x=[", "object" : "list",\n  "data":', b'}\n', False),
    (b'{"object": "list", "data": ', b', "url": "/v1/events?after=]", "has_more": false}',
     False),
], ids=["stripe's order", "data last", "a bracket in the tail"])
def test_a_lists_events_are_streamed_from_between_the_ends_of_its_data(
        tmp_path: Path, head: bytes, tail: bytes, more: bool) -> None:
    """The `data` array's ends are found from the list's head and tail, whatever the keys'
    order, and the events between them are read as an array streamed through a pipe: the
    Python path's rows and warnings, and no writer left behind."""
    import threading

    path = tmp_path / "events.json"
    data = orjson.dumps([_event(i) for i in range(3000)], option=orjson.OPT_INDENT_2)
    path.write_bytes(head + data + tail)
    start, end, said_more = stripe_events_duckdb._data_span(path, path.stat().st_size)
    assert (start, end + 1, said_more) == (len(head), len(head) + len(data), more)
    fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
    assert fast is not None
    _same(fast, _python_path(path))
    assert not [t for t in threading.enumerate() if t.name == "twice-events-pipe"]


@pytest.mark.parametrize("document", [
    b'{"object": "list", "has_more": {"pages": 2}, "data": []}',  # an object before data
    b'{"object": "list", "data": {}}',
    b'{"object": "list", "data": [], "has_more": false, "has_more": true}',  # a key twice
    b'{"object": "list", "data": [], "has_more": NaN}',  # not JSON
    b'{"object": "event", "data": []}',
    b'["object", "list", "data", []]',
], ids=["object before", "data not an array", "key twice", "not json", "no list", "array"])
def test_a_list_whose_data_ends_are_not_certain_has_no_span(tmp_path: Path,
                                                           document: bytes) -> None:
    path = tmp_path / "events.json"
    path.write_bytes(document)
    assert stripe_events_duckdb._data_span(path, path.stat().st_size) is None


def test_a_pipe_no_one_reads_lets_its_writer_go(tmp_path: Path) -> None:
    """A query that fails before DuckDB opens the pipe, or stops reading it early (an element
    that is no event, past the pipe's buffer): the writer thread ends all the same."""
    import threading
    import time

    events = [_event(i) for i in range(3000)]
    path = tmp_path / "events.json"
    path.write_bytes(b'{"object": "list", "data": [' + b",".join(
        orjson.dumps(e) for e in [*events[:10], 7, *events[10:]]) + b"]}")  # 1 MB past the 7
    with stripe_events_duckdb._piped(path, 0, path.stat().st_size - 1):
        time.sleep(0.5)  # no reader comes, and the writer waits in its open meanwhile
    assert stripe_events_duckdb.load(path, str(path), min_bytes=0) is None
    assert not [t for t in threading.enumerate() if t.name == "twice-events-pipe"]
    assert len(stripe_events.load(path).rows) == len(events)  # the Python path skips the 7


@pytest.mark.parametrize("document", [
    b'{"object": "list", "data": [%s, %s]}\n{"object": "list", "data": [%s]}\n',  # pages
    b'{"object": "list", "data": [%s, %s, {"object": "customer", "id": "cus_1"}, %s]}',
    b'{"object": "list", "data": [%s, %s, %s], "object": "event"}',  # a key given twice
    b'{"object": "list", "items": [%s, %s, %s]}',
], ids=["two pages", "not an event", "a key twice", "no data"])
def test_a_list_the_query_cannot_read_exactly_is_left_to_the_python_path(
        tmp_path: Path, document: bytes) -> None:
    path = tmp_path / "events.json"
    path.write_bytes(document % tuple(orjson.dumps(_event(i)) for i in range(3)))
    assert stripe_events_duckdb.load(path, str(path), min_bytes=0) is None


def test_a_list_too_big_to_read_whole_is_refused_naming_what_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stripe's own shape, one list document, is read whole up to `MAX_DOCUMENT_BYTES` (lowered
    here to stand for a month of events); past it the error says so and names what is read at
    any size: the same records as JSON lines. (On one line past 256 MiB: tests/cli.)"""
    from twice.connectors import jsonfile

    events = [_event(i) for i in range(300)]
    pretty = tmp_path / "events.json"
    pretty.write_bytes(orjson.dumps({"object": "list", "data": events},
                                    option=orjson.OPT_INDENT_2))
    assert len(stripe_events.load(pretty).rows) > 0
    monkeypatch.setattr(jsonfile, "MAX_DOCUMENT_BYTES", pretty.stat().st_size // 2)
    with pytest.raises(stripe_events.SourceError, match=r"as one JSON document it is .* "
                       r"MiB, past the 0 MiB read whole: export the records as JSON lines"):
        stripe_events.load(pretty)
    lines = _write(tmp_path / "events.jsonl", events)
    assert len(stripe_events.load(lines).rows) == len(_python_path(lines).rows) > 0


def test_a_file_with_a_nul_byte_is_left_to_the_python_path(tmp_path: Path) -> None:
    """Raw NUL is never JSON text: such a file (sparse, zero-filled) is declined at its first
    chunk, before DuckDB works through it."""
    path = _write(tmp_path / "events.jsonl", [_event(0), _event(1)], tail=b"\x00" * 64)
    assert stripe_events_duckdb._lines(path) == -1
    assert stripe_events_duckdb.load(path, str(path), min_bytes=0) is None


def _with_description(i: int, raw: bytes) -> bytes:
    """An event's line whose description is `raw`, as written (JSON text orjson would not
    write: a lone escaped surrogate)."""
    line = orjson.dumps(_event(i, data={"object": {"id": f"pi_{i}", "description": "@"}}))
    return line.replace(b'"@"', b'"' + raw + b'"') + b"\n"


@pytest.mark.parametrize("why, tail", [
    ("NaN in a text", _with_description(900, b"NaN here")),
    ("Infinity in a text", _with_description(900, b"to Infinity")),
    ("escaped surrogate", _with_description(900, b"\\ud800x")),
    ("NUL bytes", b"\x00" * 64),
    ("blank line", b"\n" + orjson.dumps(_event(901)) + b"\n"),
    ("no more", b""),
])
def test_what_the_scan_finds_past_the_first_chunk_declines_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: str, tail: bytes) -> None:
    """The byte scan before the query reads the file a chunk at a time: what it refuses far
    from the head (a token the Python path reads otherwise, which DuckDB would take; a NUL; a
    blank line the rows would not show) declines the file all the same. Chunks made small so
    that a small file has many."""
    monkeypatch.setattr(stripe_events_duckdb, "_CHUNK", 4096)
    path = _write(tmp_path / "events.jsonl", [_event(i) for i in range(300)], tail)
    assert path.stat().st_size > 20 * 4096
    fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
    if why == "no more":
        assert fast is not None
        _same(fast, _python_path(path))
        return
    assert fast is None, why
    result = stripe_events.load(path)  # the Python path's answer, warnings and all
    slow = _python_path(path)
    assert result.rows.equals(slow.rows)
    assert result.warnings == slow.warnings


@pytest.mark.parametrize("why, events, tail", [
    ("blank line", [_event(0), _event(1)], b"\n" + orjson.dumps(_event(2)) + b"\n"),
    ("bad JSON line", [_event(0), _event(1)], b"{not json\n"),
    ("duplicate id", [_event(0), _event(1), _event(1)], b""),
    ("untrimmed id", [_event(0), _event(1, id="evt_1 ")], b""),
    ("unicode space", [_event(0), _event(1, id="\u2003evt_1")], b""),
    ("string request", [_event(0), _event(1, request="req_1")], b""),
    ("no request", [_event(0), {k: v for k, v in _event(1).items() if k != "request"}], b""),
    ("float created", [_event(0), _event(1, created=1_717_424_400.5)], b""),
    ("absurd created", [_event(0), _event(1, created=17_174_244_000_000)], b""),
    ("not an event", [_event(0), _event(1, object="charge")], b""),
    ("float amount", [_event(0), _event(1, data={"object": {"id": "pi_1", "amount": 10.0}})],
     b""),
    ("numeric metadata", [_event(0), _event(1, data={"object": {"id": "pi_1", "metadata": {
        "n": 1}}})], b""),
    ("one event", [_event(0)], b""),
    # DuckDB reads text fields as VARCHAR, which writes a number, a boolean or an object as
    # text too: a value that may have been one is the Python path's to read
    ("numeric id", [_event(0), _event(1, id=123)], b""),
    ("boolean type", [_event(0), _event(1, type=True)], b""),
    ("numeric type", [_event(0), _event(1, type=5)], b""),
    ("text created", [_event(0), _event(1, created="1717424401")], b""),
    ("numeric request id", [_event(0), _event(1, request={"id": 5, "idempotency_key": "k"})],
     b""),
    ("object key", [_event(0), _event(1, request={"id": "req_1", "idempotency_key": {}})],
     b""),
    ("numeric currency", [_event(0), _event(1, data={"object": {"id": "pi_1", "currency": 8}})],
     b""),
    ("float amount text", [_event(0), _event(1, data={"object": {"id": "pi_1",
                                                                 "amount": 1e5}})], b""),
    ("boolean amount", [_event(0), _event(1, data={"object": {"id": "pi_1", "amount": True}})],
     b""),
    ("numeric status", [_event(0), _event(1, data={"object": {"id": "pi_1", "status": 3}})],
     b""),
    ("numeric description", [_event(0), _event(1, data={"object": {"id": "pi_1",
                                                                    "description": 7}})], b""),
    ("numeric cancellation", [_event(0), _event(1, data={"object": {
        "id": "pi_1", "cancellation_reason": 4}})], b""),
    ("list failure message", [_event(0), _event(1, data={"object": {
        "id": "ch_1", "failure_message": ["x"]}})], b""),
    ("text parent", [_event(0), _event(1, data={"object": {"id": "in_1", "object": "invoice",
                                                           "parent": "sub_1"}})], b""),
    ("a record that is a list", [["x", "\x80"], _event(0), _event(1)], b""),
])
def test_anything_unusual_is_left_to_the_python_path(tmp_path: Path, why: str,
                                                     events: list[Any], tail: bytes) -> None:
    path = _write(tmp_path / "events.jsonl", events, tail)
    assert stripe_events_duckdb.load(path, str(path), min_bytes=0) is None, why
    # load() answers as the Python path does, warnings and all
    result = stripe_events.load(path)
    slow = _python_path(path)
    assert result.rows.equals(slow.rows)
    assert result.warnings == slow.warnings


def test_values_both_paths_read_alike_stay_on_the_fast_path(tmp_path: Path) -> None:
    """An amount written as a digit string, a livemode that is no boolean and metadata that is
    text read the same on both paths (a whole number; no mode; no metadata), so DuckDB keeps
    them."""
    path = _write(tmp_path / "events.jsonl", [
        _event(0), _event(1, livemode="true"),
        _event(3, data={"object": {"id": "pi_3", "metadata": '{"thread_id": "th_1"}'}}),
        _event(2, data={"object": {"id": "pi_2", "object": "payment_intent", "amount": "4900",
                                   "currency": "usd", "customer": "cus_1"}})])
    fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
    assert fast is not None
    _same(fast, _python_path(path))
    assert fast.rows["amount"].iloc[-1] == 4900


def test_a_byte_order_mark_is_left_to_the_python_path(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"".join(orjson.dumps(_event(i)) + b"\n"
                                               for i in range(3)))
    assert stripe_events_duckdb.load(path, str(path), min_bytes=0) is None


@fuzz_settings(30)
@given(events=mutated_records(EVENTS), spare=st.integers(0, 3))
def test_mutated_events_are_read_exactly_or_declined(tmp_path_factory: pytest.TempPathFactory,
                                                     events: list[Any], spare: int) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "events.jsonl"
    # the mutated records, among clean ones so that most files are worth reading
    records = [_event(i) for i in range(spare)] + events
    path.write_bytes(b"".join(json_text(r) + b"\n" for r in records))
    fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
    if fast is not None:
        _same(fast, _python_path(path))


@fuzz_settings(30)
@given(events=mutated_records(EVENTS), spare=st.integers(0, 3), more=st.booleans())
def test_mutated_events_in_a_list_are_read_exactly_or_declined(
        tmp_path_factory: pytest.TempPathFactory, events: list[Any], spare: int,
        more: bool) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "events.json"
    records = [_event(i) for i in range(spare)] + events
    path.write_bytes(b'{"object": "list", "data": [' + b",".join(json_text(r) for r in records)
                     + b'], "has_more": ' + (b"true" if more else b"false") + b"}")
    fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
    if fast is not None:
        _same(fast, _python_path(path))


def test_the_whitespace_it_checks_is_what_python_strips() -> None:
    import sys

    assert list(stripe_events_duckdb._WS_CODES) == [
        c for c in range(sys.maxunicode + 1) if chr(c).isspace()]


def _linked(i: int) -> list[dict[str, Any]]:
    """One renewal's objects in both API shapes: before 2025-03-31.basil (`invoice.subscription`,
    `payment_intent.invoice`, `charge.invoice`) and from it (`parent.subscription_details`, an
    `invoice_payment` tying the invoice to its PaymentIntent)."""
    sub, inv, pi, ch = f"sub_{i}", f"in_{i}", f"pi_{i}", f"ch_{i}"
    legacy = [
        {"id": inv, "object": "invoice", "subscription": sub, "customer": "cus_1"},
        {"id": pi, "object": "payment_intent", "invoice": inv, "amount": 900,
         "currency": "usd", "customer": "cus_1", "status": "succeeded"},
        {"id": ch, "object": "charge", "payment_intent": {"id": pi, "object": "payment_intent"},
         "invoice": inv, "amount": 900, "currency": "usd", "status": "succeeded"},
    ]
    modern = [
        {"id": inv + "b", "object": "invoice", "customer": "cus_1",
         "parent": {"type": "subscription_details",
                    "subscription_details": {"subscription": sub + "b"}}},
        {"id": f"inpay_{i}", "object": "invoice_payment", "invoice": inv + "b",
         "payment": {"type": "payment_intent", "payment_intent": pi + "b"}},
        {"id": f"re_{i}", "object": "refund", "charge": ch, "payment_intent": pi,
         "amount": 900, "currency": "usd", "status": "succeeded"},
    ]
    return [_event(1000 * i + j, type=f"{o['object']}.created", request={"id": None,
                   "idempotency_key": None}, data={"object": o})
            for j, o in enumerate(legacy + modern)]


def test_what_an_object_belongs_to_is_read_alike_on_both_paths(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [e for i in range(1, 40) for e in _linked(i)])
    fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
    assert fast is not None
    _same(fast, _python_path(path))
    rows = fast.rows.set_index("object_id")
    assert rows.loc["in_1", "belongs_to"] == "sub_1"
    assert rows.loc["pi_1", "belongs_to"] == "in_1"
    assert rows.loc["ch_1", "belongs_to"] == "pi_1,in_1"
    assert rows.loc["in_1b", "belongs_to"] == "sub_1b"
    assert rows.loc["inpay_1", "belongs_to"] == "in_1b,pi_1b"
    assert pd.isna(rows.loc["re_1", "belongs_to"])  # a refund is an effect of its own
    assert set(rows["initiator"]) == {"automatic"}


def _with_ref(i: int, field: str, raw: bytes) -> bytes:
    """A charge event's line whose reference `field` is the JSON text `raw`, as written."""
    obj = {"id": f"ch_{i}", "object": "charge", "amount": 100, "currency": "usd",
           "status": "succeeded", "customer": "cus_0", "payment_intent": f"pi_{i}"}
    line = orjson.dumps(_event(i, type="charge.succeeded", data={"object": {**obj, field: "@"}}))
    return line.replace(b'"@"', raw) + b"\n"


@pytest.mark.parametrize("field, raw, read", [
    # a plain string is read off its text; anything else by the JSON functions, alike
    ("customer", b'"cus_7"', "cus_7"),
    ("customer", b'"cus_\\u0037"', "cus_7"),  # an escape: the JSON functions read it
    ("customer", b'"cus_\\"7"', 'cus_"7'),
    ("customer", b'{"id": "cus_7", "object": "customer"}', "cus_7"),  # expanded
    ("customer", b'{"id": "cus_\\u0037"}', "cus_7"),
    ("customer", b"null", None),
    ("customer", b'"caf\xc3\xa9"', "caf\u00e9"),
    ("payment_intent", b'"pi_\\u0037"', "pi_7"),
    ("payment_intent", b'{"id": "pi_7", "object": "payment_intent"}', "pi_7"),
    # unusual either way: the Python path's to read
    ("customer", b'""', "declined"),
    ("customer", b'" cus_7"', "declined"),
    ("customer", b'"cus_7\\t"', "declined"),
    ("customer", b"7", "declined"),
    ("customer", b'{"id": 7}', "declined"),
    ("payment_intent", b'"pi_7,pi_8"', "declined"),
    ("payment_intent", b'"pi_\\u002c8"', "declined"),  # an escaped comma
])
def test_references_are_read_alike_in_any_form(tmp_path: Path, field: str, raw: bytes,
                                               read: str | None) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(orjson.dumps(_event(i)) + b"\n" for i in range(3))
                     + _with_ref(7, field, raw))
    fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
    if read == "declined":
        assert fast is None
        return
    assert fast is not None
    _same(fast, _python_path(path))
    row = fast.rows.iloc[-1]
    value = row["subject"] if field == "customer" else row["belongs_to"]
    assert (None if pd.isna(value) else value) == read


@pytest.mark.parametrize("changes", [
    {"livemode": True}, {"livemode": False}, {"livemode": None}, {"livemode": "true"},
    {"livemode": 1}, {"livemode": [True]}, {"created": 1_717_424_401.0},
    {"created": -5}, {"created": 2**63}, {"created": [1_717_424_401]},
    {"data": {"object": {"id": "pi_1", "metadata": []}}},
    {"data": {"object": {"id": "pi_1", "metadata": {}}}},
    {"data": {"object": {"id": "pi_1", "metadata": None}}},
    {"data": {"object": {"id": "pi_1", "metadata": "{}"}}},
    {"data": {"object": {"id": "pi_1", "metadata": {"thread_id": "th_9"}}}},
])
def test_a_json_value_is_read_by_its_text_as_by_its_type(tmp_path: Path,
                                                         changes: dict[str, Any]) -> None:
    """The query reads an integer, a boolean or an object off the text DuckDB writes of the
    JSON value (no JSON function): each form reads as on the Python path, or is declined."""
    path = _write(tmp_path / "events.jsonl", [_event(0), _event(2), _event(1, **changes)])
    fast = stripe_events_duckdb.load(path, str(path), min_bytes=0)
    if fast is not None:
        _same(fast, _python_path(path))


def test_initiator_says_api_automatic_or_nothing(tmp_path: Path) -> None:
    api = _event(1)
    automatic = _event(2, request={"id": None, "idempotency_key": None})
    legacy = _event(3, request="req_3")
    absent = {k: v for k, v in _event(4).items() if k != "request"}
    rows = stripe_events.parse_events([api, automatic, legacy, absent], "events.json").rows
    assert rows["initiator"].tolist()[:3] == ["api", "automatic", "api"]
    assert pd.isna(rows["initiator"].iloc[3])
