"""Fuzzing the spans connector (issue 7): OTLP JSON and Jaeger JSON, from bytes to timeline.

Every case ends one of two ways (`fuzz_summary.check`): a LoadResult whose timeline validates,
with a warning per bad record naming the file (and line), or one SourceError naming the file.
Never another exception, never a hang. Cases: mutations of real valid exports at every level
(fields dropped, retyped, set to nasty values), hand-picked bad values in every field that once
crashed or could (ints past int64, times in the wrong unit, malformed URLs, huge strings),
truncation at every byte offset, invalid UTF-8 and control bytes spliced in, duplicate spans.
Counts per shape: `python tests/connectors/fuzz_summary.py tests/connectors/test_fuzz_spans.py`.
Inputs that found a bug are kept in tests/corpus/spans/ and loaded by `test_corpus`; the fast
way through OTLP lines is checked against the general way in test_spans_streaming.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.connectors.fuzz_inputs import NASTY, json_text, json_values, mutate
from tests.connectors.fuzz_summary import check, fuzz_settings, record
from twice.connectors import spans
from twice.connectors.base import LoadResult, SourceError
from twice.lab.otlp_json import attribute

CORPUS = Path(__file__).parents[1] / "corpus" / "spans"
DATA = Path(__file__).parent / "data" / "spans"
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns
TRACE = "5b8efff798038103d269b633813fc60c"


def _otlp(*span_list: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{
        "resource": {"attributes": [attribute("host.name", "worker-a"),
                                    attribute("service.name", "billing-agent")]},
        "scopeSpans": [{"scope": {"name": "lab"}, "spans": list(span_list)}]}]}


TOOL = {"traceId": TRACE, "spanId": "00000000000000a1", "name": "execute_tool charge", "kind": 1,
        "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 900_000_000),
        "status": {"code": 1},
        "attributes": [attribute("gen_ai.tool.call.id", "toolu_1"),
                       attribute("gen_ai.conversation.id", "thread-7"),
                       attribute("gen_ai.tool.call.arguments",
                             '{"customer": "cus_9", "amount": 5000, "currency": "usd"}')]}
HTTP = {"traceId": TRACE, "spanId": "00000000000000b1", "parentSpanId": "00000000000000a1",
        "name": "POST", "kind": 3, "startTimeUnixNano": str(T0 + 100_000_000),
        "endTimeUnixNano": str(T0 + 700_000_000), "status": {"code": 2, "message": "timed out"},
        "attributes": [attribute("http.request.method", "POST"),
                       attribute("url.full", "https://api.stripe.com/v1/charges?x=1"),
                       attribute("http.response.status_code", 502),
                       attribute("http.request.resend_count", 1),
                       attribute("http.request.header.idempotency-key", ["key-1"]),
                       attribute("http.response.header.request-id", ["req_1"])],
        "events": [{"name": "exception", "timeUnixNano": str(T0 + 700_000_000), "attributes": [
            attribute("exception.type", "httpx.ReadTimeout"),
            attribute("exception.message", "The read operation timed out")]}]}
RECEIVE = {"traceId": "6e0c63257de34c926e0c63257de34c92", "spanId": "00000000000000c1",
           "name": "runs process", "kind": 5, "startTimeUnixNano": str(T0 + 10**12),
           "endTimeUnixNano": str(T0 + 10**12 + 10**9),
           "attributes": [attribute("messaging.message.id", "m-1"),
                          attribute("messaging.sqs.message.approximate_receive_count", 2),
                          attribute("langgraph.thread_id", "thread-7")]}
VALID_OTLP = [_otlp(TOOL, HTTP), _otlp(RECEIVE)]  # two export objects: two lines
VALID_JAEGER = orjson.loads((DATA / "jaeger_traces.json").read_bytes())


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def _lines(docs: list[Any]) -> bytes:
    return b"".join(json_text(doc) + b"\n" for doc in docs)


def _load(folder: Path, raw: bytes, name: str = "spans.jsonl") -> LoadResult:
    path = folder / name
    path.write_bytes(raw)
    return spans.load(path)


def _case(shape: str, folder: Path, raw: bytes, *, engine: bool = False,
          name: str = "spans.jsonl") -> LoadResult | SourceError:
    return check(shape, lambda: _load(folder, raw, name), source=str(folder / name),
                 engine=engine)


def test_the_valid_inputs_load_without_warnings(folder: Path) -> None:
    otlp = _case("spans_otlp", folder, _lines(VALID_OTLP), engine=True)
    assert isinstance(otlp, LoadResult) and not otlp.warnings
    assert sorted(otlp.rows["kind"]) == ["http_span", "queue_receive", "tool_span"]
    jaeger = _case("spans_jaeger", folder, json_text(VALID_JAEGER), engine=True)
    assert isinstance(jaeger, LoadResult) and not jaeger.warnings and len(jaeger.rows)


# --- mutations of real exports at every level: fields dropped or set to nasty values ---------

@fuzz_settings(80)
@given(docs=st.lists(st.sampled_from(VALID_OTLP), min_size=1, max_size=3).flatmap(
    lambda docs: st.tuples(*[mutate(doc) for doc in docs])))
def test_mutated_otlp_exports(folder: Path, docs: tuple[Any, ...]) -> None:
    _case("spans_otlp", folder, _lines(list(docs)))


@fuzz_settings(80)
@given(doc=mutate(VALID_JAEGER))
def test_mutated_jaeger_downloads(folder: Path, doc: Any) -> None:
    _case("spans_jaeger", folder, json_text(doc), name="jaeger.json")


@fuzz_settings(40)
@given(doc=json_values)
def test_arbitrary_json(folder: Path, doc: Any) -> None:
    _case("spans_otlp", folder, json_text(doc))


# --- hand-picked bad values in every field ---------------------------------------------------

BAD_TIMES = [
    str(T0 // 10**9), str(T0 // 10**6), str(T0 // 10**3),  # seconds, ms, us: not ns
    T0 // 10**9, T0 / 1e9, "-1", -T0, "0", 0, "1e30", 1e30, str(2**63), str(2**64), 2**64,
    "99999999999999999999999", "9" * 5000, "+-5", "²", "١٧٦٧٢٢٥٦٠٠٠٠٠٠٠٠٠٠٠٠", " 17 ", None,
    True, [], {}, "2026-01-01T00:00:00Z",
]
BAD_IDS = ["", "0" * 32, "0" * 16, "xyz", "ABCDEF0123456789", "\x00" * 16,
           "AAAAAAAAAAAAAAAAAAAAAA==", "=" * 24, 5, None, [], {"a": 1}, "é" * 16, "a" * 33,
           "a" * 10_000]
BAD_URLS = ["http://[::1/x", "http://[::1]:99999/x", "https://user:pass@api/v1?secret=1",
            "http://[fe80::1%25en0]/p", "://", "http://", "\x00://\x01", "http://a/\ud800",
            "http://" + "a" * 100_000, "//host/only", "?q=1", "#frag", "http://[::1/x?y=1"]
BAD_INTS = [2**63, 2**64, -(2**63) - 1, 10**30, "99999999999999999999", "9" * 5000, "-5", "1.5",
            "0x10", "²", "+-1", 1e30, float("inf"), None, [], {}]


def _set_attr(span: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(span)
    out["attributes"] = [a for a in out["attributes"] if a["key"] != key]
    out["attributes"].append({"key": key, "value": value})
    return out


def _bad_span_cases() -> Iterator[tuple[str, dict[str, Any]]]:
    for field in ("startTimeUnixNano", "endTimeUnixNano"):
        for value in BAD_TIMES:
            yield f"{field}={value!r:.30}", {**HTTP, field: value}
    for field in ("traceId", "spanId", "parentSpanId"):
        for value in BAD_IDS:
            yield f"{field}={value!r:.30}", {**HTTP, field: value}
    for field in ("kind", "status", "name", "attributes", "events"):
        for value in NASTY[:40]:
            yield f"{field}={value!r:.30}", {**HTTP, field: value}
    for url in BAD_URLS:
        for key in ("url.full", "http.url", "url.path", "http.target"):
            yield f"{key}={url!r:.30}", _set_attr(HTTP, key, {"stringValue": url})
    for key in ("http.response.status_code", "http.request.resend_count",
                "http.request.header.x-envoy-attempt-count"):
        for number in BAD_INTS:
            for tag in ("intValue", "stringValue", "doubleValue"):
                yield f"{key}={tag}:{number!r:.30}", _set_attr(HTTP, key, {tag: number})
    receive = {**RECEIVE, "spanId": "00000000000000c2"}  # beside the good ones, not a copy
    tool = {**TOOL, "spanId": "00000000000000a2"}
    for number in BAD_INTS:
        yield (f"receive_count={number!r:.30}",
               _set_attr(receive, "messaging.sqs.message.approximate_receive_count",
                         {"intValue": number}))
        args = {"customer": "cus_9", "amount": number, "currency": "usd"}
        yield (f"amount={number!r:.30}",
               _set_attr(tool, "gen_ai.tool.call.arguments", {"stringValue": json_text(args)
                                                               .decode()}))


BAD_SPANS = list(_bad_span_cases())


def test_bad_values_in_every_otlp_field(folder: Path) -> None:
    """Each bad value in its own file, beside the good spans: they still load; the bad span is
    read with a warning, or skipped with one. Parsed from bytes, as a file would be."""
    for label, span in BAD_SPANS:
        raw = _lines([_otlp(TOOL), _otlp(span), _otlp(RECEIVE)])
        result = _case("spans_otlp", folder, raw)
        assert isinstance(result, LoadResult), label
        assert {"tool_span", "queue_receive"} <= set(result.rows["kind"]), label


def test_times_in_the_wrong_unit_are_named(folder: Path) -> None:
    for unit, divisor in (("seconds", 10**9), ("milliseconds", 10**6), ("microseconds", 10**3)):
        span = {**TOOL, "startTimeUnixNano": str(T0 // divisor),
                "endTimeUnixNano": str((T0 + 10**9) // divisor)}
        result = _case("spans_otlp", folder, _lines([_otlp(span), _otlp(HTTP)]))
        assert isinstance(result, LoadResult), unit
        assert result.rows["kind"].tolist() == ["http_span"], unit  # 1970 is no real time
        assert any("not nanoseconds" in w.detail for w in result.warnings), unit


def test_ints_past_int64_are_warnings_not_crashes(folder: Path) -> None:
    http = _set_attr(HTTP, "http.response.status_code", {"intValue": str(2**64)})
    http = _set_attr(http, "http.request.resend_count", {"intValue": "9" * 5000})
    result = _case("spans_otlp", folder, _lines([_otlp(TOOL, http)]))
    assert isinstance(result, LoadResult)
    row = result.rows[result.rows["kind"] == "http_span"].iloc[0]
    # an unreadable value is ignored: no status; a client span without a resend count is try 0
    assert pd.isna(row["status"]) and row["resend_count"] == 0
    assert any("http.response.status_code" in w.detail and "http.request.resend_count"
               in w.detail for w in result.warnings)


def test_a_malformed_ipv6_url_keeps_the_span(folder: Path) -> None:
    http = _set_attr(HTTP, "url.full", {"stringValue": "http://[::1/v1/charges?key=sk_live_x"})
    result = _case("spans_otlp", folder, _lines([_otlp(TOOL, http)]))
    assert isinstance(result, LoadResult)
    row = result.rows[result.rows["kind"] == "http_span"].iloc[0]
    assert row["path"] == "/v1/charges"  # the query string (a secret) is still dropped


def test_duplicate_span_ids(folder: Path) -> None:
    raw = _lines([_otlp(TOOL, TOOL, HTTP), _otlp(HTTP, {**HTTP, "name": "again"})])
    result = _case("spans_otlp", folder, raw)
    assert isinstance(result, LoadResult) and len(result.rows) == 2
    assert [w.detail for w in result.warnings] == [
        "3 span(s) appear more than once (same trace and span id); kept the first of each"]


def test_a_10_mb_string_in_every_text_field(folder: Path) -> None:
    huge = "x" * 10_000_000
    http = {**HTTP, "name": huge, "status": {"code": 2, "message": huge}}
    http = _set_attr(http, "url.full", {"stringValue": "https://api/" + huge})
    tool = _set_attr(TOOL, "gen_ai.tool.call.arguments", {"stringValue": huge})
    result = _case("spans_otlp", folder, _lines([_otlp(tool, http)]))
    assert isinstance(result, LoadResult) and len(result.rows) == 2
    assert result.rows["detail"].str.len().max() <= 200


# --- bytes: truncated files, invalid UTF-8, control characters ---------------------------------

def test_every_truncation_of_an_otlp_file(folder: Path) -> None:
    raw = _lines(VALID_OTLP)
    for end in range(0, len(raw), 2):  # every other byte offset: ~1500 files
        _case("spans_otlp", folder, raw[:end])


def test_every_truncation_of_a_jaeger_file(folder: Path) -> None:
    raw = orjson.dumps({"data": [VALID_JAEGER["data"][1]]})
    for end in range(len(raw)):
        _case("spans_jaeger", folder, raw[:end], name="jaeger.json")


@fuzz_settings(100)
@given(data=st.data(), junk=st.binary(min_size=1, max_size=8) | st.sampled_from(
    [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\x1b[2J", b"\r", b"\x0b\x0c",
     b"\xef\xbb\xbf", b"\n", b'"', b"\\"]))
def test_bytes_spliced_into_a_file(folder: Path, data: st.DataObject, junk: bytes) -> None:
    shape, raw, name = data.draw(st.sampled_from([
        ("spans_otlp", _lines(VALID_OTLP), "spans.jsonl"),
        ("spans_jaeger", json.dumps(VALID_JAEGER, indent=1).encode(), "jaeger.json")]))
    at = data.draw(st.integers(0, len(raw)))
    _case(shape, folder, raw[:at] + junk + raw[at:], name=name)


# --- the corpus of inputs that found bugs -----------------------------------------------------

CORPUS_FILES = sorted(p for p in CORPUS.glob("*") if p.suffix in (".json", ".jsonl"))


def test_the_corpus_is_there() -> None:
    assert len(CORPUS_FILES) >= 5


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_corpus(path: Path) -> None:
    result = check("spans_corpus", lambda: spans.load(path), source=str(path), engine=True)
    assert isinstance(result, LoadResult | SourceError)


# --- a big file is streamed ------------------------------------------------------------------

_MEASURE = """
import re, sys
from pathlib import Path
from twice.connectors import spans

def status(key):
    return int(re.search(key + r":\\s+(\\d+)", Path("/proc/self/status").read_text())[1])

spans.load(sys.argv[2])  # a small file first: what the first timeline imports is not reading
try:
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from here
except OSError:
    pass
before = status("VmRSS")
result = spans.load(sys.argv[1])
print(len(result.rows), len(result.warnings), before, status("VmHWM"))
"""


def test_a_300_mb_file_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """300 MB of export lines, each span carrying a 20 KB attribute no row keeps (a chat span's
    prompt): the parsing process grows by far less than the file (a whole-file read alone would
    hold all 300 MB). Memory, not time, measured in a subprocess: its peak RSS from
    /proc/self/status (VmHWM, restarted just before the load), not getrusage's ru_maxrss, which
    a child forked from a big pytest process inherits."""
    path = tmp_path / "big.jsonl"
    prompt = attribute("gen_ai.prompt", "p" * 20_000)
    lines = 0
    with path.open("wb") as out:
        while out.tell() < 300 * 2**20:
            batch = []
            for k in range(64):
                n = lines * 64 + k
                batch.append({**TOOL, "spanId": f"{n + 1:016x}", "traceId": f"{n + 1:032x}",
                              "name": "chat", "attributes": [prompt]})
            batch[0] = {**TOOL, "spanId": f"{lines + 1:08x}{'f' * 8}"}  # one row a line
            out.write(orjson.dumps(_otlp(*batch)) + b"\n")
            lines += 1
    size_mib = path.stat().st_size / 2**20
    root = Path(__file__).parents[2]
    small = tmp_path / "small.jsonl"
    small.write_bytes(_lines(VALID_OTLP))
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(path), str(small)],
                         capture_output=True,
                         text=True, check=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    rows, warnings, before_kib, after_kib = (int(x) for x in out.stdout.split())
    growth_mib = (after_kib - before_kib) / 1024
    print(f"{size_mib:.0f} MiB file, {lines} lines: peak RSS grew {growth_mib:.0f} MiB")
    assert (rows, warnings) == (lines, 0)
    # measured: ~14 MiB (a line, its parsed spans, the allocator's slack); a whole-file read
    # adds the whole file and more
    assert growth_mib < size_mib / 6, (growth_mib, size_mib)
    record("spans_big_file", "ok")
