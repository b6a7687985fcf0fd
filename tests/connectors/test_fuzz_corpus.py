"""Every bad file of `tests/corpus/<connector>/` (inputs that once crashed a connector or made it
drop a record silently) now ends as rows + warnings or one SourceError naming the file."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.connectors.fuzz_summary import check
from tests.connectors.test_fuzz_api import Canned, _Handler, _stripe
from twice.connectors import registry
from twice.connectors.base import LoadResult
from twice.lab.loopback import LoopbackServer

CORPUS = Path(__file__).parents[1] / "corpus"
FILES = sorted(p for p in CORPUS.glob("*/*") if p.parent.name in registry.MODULES
               and p.parent.name != "spans"  # spans: test_fuzz_spans.py
               and not p.name.endswith(("-wal", "-shm")))
BODIES = sorted((CORPUS / "stripe_api").glob("*.body"))
# inputs whose records were dropped without a word: now each is named by a warning
NAMED = {"lambda_records_not_sqs.json": "Records[1]", "messages_not_a_list.jsonl": ":1",
         "kind_unknown_and_at_null.parquet": ":row 1",
         # issue 13: each bad value is named by file and line (or row), the rest is kept
         "receive_count_int64_max.jsonl": ":1", "amount_nan_in_a_document.json": ":13",
         "created_infinity.jsonl": ":2", "created_nan.jsonl": ":2",
         "at_year_2262.parquet": ":row 1"}


def test_the_corpus_is_there() -> None:
    assert len(FILES) >= 15 and len(BODIES) == 5


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_file(path: Path, tmp_path: Path) -> None:
    # a copy: opening a WAL-mode SQLite file leaves -wal/-shm files beside it
    copy = tmp_path / path.name
    shutil.copyfile(path, copy)
    result = check(f"corpus:{path.parent.name}",
                   lambda: registry.load_all([(path.parent.name, copy, {})]), source=str(copy))
    if path.name in NAMED:
        assert isinstance(result, LoadResult)
        assert any(w.source.endswith(NAMED[path.name]) for w in result.warnings), \
            result.warnings


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LoopbackServer, Canned]]:
    canned = Canned()
    srv = LoopbackServer(_Handler, canned, "corpus-api").serve()
    yield srv, canned
    srv.close()


@pytest.mark.parametrize("body", BODIES, ids=lambda p: p.name)
def test_corpus_stripe_api_answer(server: tuple[LoopbackServer, Canned], body: Path) -> None:
    _, canned = server
    canned.status, canned.body = 200, body.read_bytes()
    check("corpus:stripe_api", lambda: _stripe(server, "cus_Q1dUOq0l2nDnvT"))
