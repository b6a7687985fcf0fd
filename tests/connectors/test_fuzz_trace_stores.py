"""Fuzzing the spans connector on the shapes trace stores give back (issue 21): Phoenix's spans
API page and snake_case download, Langfuse-attributed OTLP (protobuf's canonical JSON), a page
of Langfuse's observations API (and its observations a line each), and LangSmith run exports. As
for the other formats (test_fuzz_spans.py), every case ends in a LoadResult whose timeline
validates, with warnings naming the file, or in one SourceError naming it: never another
exception, never a hang. The valid inputs are the fuzz suite's own OTLP spans converted by
`tests.connectors.trace_formats`."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.connectors import trace_formats
from tests.connectors.fuzz_inputs import json_text, mutate
from tests.connectors.fuzz_summary import check, fuzz_settings
from tests.connectors.test_fuzz_spans import VALID_OTLP
from twice.connectors import spans
from twice.connectors.base import LoadResult, SourceError

PHOENIX_PAGE = trace_formats.phoenix_page(VALID_OTLP)
PHOENIX_DOWNLOAD = trace_formats.phoenix_download(VALID_OTLP)
LANGFUSE = trace_formats.langfuse(VALID_OTLP)
LANGFUSE_PAGE = trace_formats.langfuse_page(LANGFUSE)
LANGSMITH = trace_formats.langsmith(VALID_OTLP)
VALID: dict[str, tuple[Any, str]] = {  # shape -> (document, file name)
    "spans_phoenix_page": (PHOENIX_PAGE, "phoenix.json"),
    "spans_phoenix_download": (PHOENIX_DOWNLOAD, "phoenix_trace.json"),
    "spans_langfuse": (LANGFUSE[0], "langfuse.json"),
    "spans_langfuse_api": (LANGFUSE_PAGE, "langfuse_observations.json"),
    "spans_langsmith": (LANGSMITH, "runs.json"),
}


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def _case(shape: str, folder: Path, raw: bytes, name: str, *, engine: bool = False
          ) -> LoadResult | SourceError:
    path = folder / name
    path.write_bytes(raw)
    return check(shape, lambda: spans.load(path), source=str(path), engine=engine)


@pytest.mark.parametrize("shape", sorted(VALID))
def test_the_valid_inputs_load_without_warnings(folder: Path, shape: str) -> None:
    doc, name = VALID[shape]
    result = _case(shape, folder, json_text(doc), name, engine=True)
    assert isinstance(result, LoadResult) and not result.warnings, result
    assert "tool_span" in set(result.rows["kind"])


@fuzz_settings(60)
@given(data=st.data())
def test_mutated_exports(folder: Path, data: st.DataObject) -> None:
    shape = data.draw(st.sampled_from(sorted(VALID)))
    doc, name = VALID[shape]
    _case(shape, folder, json_text(data.draw(mutate(doc))), name)


@fuzz_settings(40)
@given(runs=st.lists(st.sampled_from(LANGSMITH), min_size=1, max_size=4).flatmap(
    lambda runs: st.tuples(*[mutate(run) for run in runs])))
def test_mutated_langsmith_runs_a_line_each(folder: Path, runs: tuple[Any, ...]) -> None:
    raw = b"".join(json_text(run) + b"\n" for run in runs)
    _case("spans_langsmith", folder, raw, "runs.jsonl")


@fuzz_settings(40)
@given(found=st.lists(st.sampled_from(LANGFUSE_PAGE["data"]), min_size=1, max_size=4).flatmap(
    lambda found: st.tuples(*[mutate(obs) for obs in found])))
def test_mutated_langfuse_observations_a_line_each(folder: Path, found: tuple[Any, ...]) -> None:
    raw = b"".join(json_text(obs) + b"\n" for obs in found)
    _case("spans_langfuse_api", folder, raw, "observations.jsonl")


@pytest.mark.parametrize("shape", sorted(VALID))
def test_every_truncation(folder: Path, shape: str) -> None:
    doc, name = VALID[shape]
    raw = json.dumps(doc).encode()
    for end in range(0, len(raw), max(1, len(raw) // 300)):
        _case(shape, folder, raw[:end], name)


@fuzz_settings(60)
@given(data=st.data(), junk=st.binary(min_size=1, max_size=8) | st.sampled_from(
    [b"\xff", b"\xc3\x28", b"\x00", b"\x1b[2J", b"\n", b'"', b"\\", b"null", b"{}"]))
def test_bytes_spliced_into_a_file(folder: Path, data: st.DataObject, junk: bytes) -> None:
    shape = data.draw(st.sampled_from(sorted(VALID)))
    doc, name = VALID[shape]
    raw = json.dumps(doc, indent=1).encode()
    at = data.draw(st.integers(0, len(raw)))
    _case(shape, folder, raw[:at] + junk + raw[at:], name)
