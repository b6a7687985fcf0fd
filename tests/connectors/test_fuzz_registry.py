"""Fuzzing what opening an incident folder does: `scan_folder` over junk (binary, empty, truncated
evidence, magic numbers followed by junk, folders named like files, unreadable files, symlink
loops), then `load_all` on whatever it recognised. And 2 GB files: a clear answer, quickly, with
bounded memory (measured in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.connectors import trace_formats
from tests.connectors.fuzz_summary import check, fuzz_settings, record
from twice.connectors import registry
from twice.connectors.base import SourceError
from twice.connectors.jsonfile import lines

ROOT = Path(__file__).parents[2]
SAMPLE = ROOT / "sample_data" / "redelivery"
EVIDENCE = {p.name: p.read_bytes() for p in SAMPLE.iterdir() if p.name not in (
    "README.md", "truth.json")}
# the sample's spans as the trace stores give them back (Phoenix, Langfuse, LangSmith)
_DOCS = trace_formats.exports(SAMPLE / "spans.jsonl")
EVIDENCE |= {
    "phoenix.json": json.dumps(trace_formats.phoenix_page(_DOCS)).encode(),
    "langfuse.jsonl": "".join(json.dumps(d) + "\n" for d in trace_formats.langfuse(_DOCS)).encode(),
    "langsmith.jsonl": "".join(json.dumps(r) + "\n"
                               for r in trace_formats.langsmith(_DOCS)).encode(),
    # a page of Langfuse's observations API, as `--traces langfuse+...` saves it
    "langfuse_observations.json": json.dumps(
        trace_formats.langfuse_page(trace_formats.langfuse(_DOCS))).encode(),
}
NAMES = ["events.json", "events.jsonl", "requests.csv", "logs.jsonl", "sqs.jsonl", "spans.jsonl",
         "cp.sqlite", "timeline.parquet", "noext", "x.json", "data.bin"]


@st.composite
def _content(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["binary", "empty", "cut", "magic", "evidence"]))
    if kind == "binary":
        return draw(st.binary(max_size=300))
    if kind == "empty":
        return draw(st.sampled_from([b"", b"\n", b"   \n\t", b"\xef\xbb\xbf"]))
    source = EVIDENCE[draw(st.sampled_from(sorted(EVIDENCE)))]
    if kind == "cut":
        return source[: draw(st.integers(0, min(len(source), 20_000)))]
    if kind == "magic":
        return draw(st.sampled_from([b"SQLite format 3\x00", b"PAR1", b'{"object": "event"',
                                     b"request_id,created,idempotency_key\n"])) + \
            draw(st.binary(max_size=200))
    return source


@fuzz_settings(40)
@given(files=st.lists(st.tuples(st.sampled_from(NAMES), _content()), min_size=1, max_size=5),
       folder_named_like_a_file=st.booleans())
def test_folder_of_junk(files: list[tuple[str, bytes]], folder_named_like_a_file: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i, (name, content) in enumerate(files):
            (folder / f"{i}_{name}").write_bytes(content)
        if folder_named_like_a_file:
            (folder / "events.json").mkdir()
            (folder / "events.json" / "nested.jsonl").write_bytes(files[0][1])
            (folder / "loop").symlink_to(folder)  # a symlink loop: not followed
        found, skipped = registry.scan_folder(folder)
        assert len(found) + len(skipped) <= len(files) + 1
        for name, path in found:
            check(f"registry:{name}", lambda n=name, p=path: registry.load_all([(n, p, {})]),
                  source=str(path))
        record("registry", "ok")


def test_unreadable_and_special_files(tmp_path: Path) -> None:
    events = tmp_path / "events.json"
    events.write_bytes(EVIDENCE["events.json"])
    locked = tmp_path / "locked.json"
    locked.write_bytes(EVIDENCE["events.json"])
    locked.chmod(0)
    os.mkfifo(tmp_path / "pipe.jsonl")  # opening it would block: never opened
    (tmp_path / "dangling.json").symlink_to(tmp_path / "gone.json")
    found, skipped = registry.scan_folder(tmp_path)
    assert ("stripe_events", events) in found
    assert not any(p.name in ("pipe.jsonl", "dangling.json") for _, p in found)
    for name, path in found:
        result = check(f"registry:{name}", lambda n=name, p=path: registry.load_all([(n, p, {})]),
                       source=str(path))
        if path == locked and os.geteuid() != 0:  # root reads anything
            assert isinstance(result, SourceError) and "permission" in result.reason.lower()


# --- 2 GB files ---------------------------------------------------------------------------------

TWO_GB = 2 * 2**30
_PROBE = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from twice.connectors import registry
    from twice.connectors.base import SourceError
    def peak_mb():
        # VmHWM belongs to this process's own memory; ru_maxrss would carry the peak of the
        # (large) pytest process that started it across exec
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    path = Path(sys.argv[1])
    start = time.monotonic()
    name = registry.detect(path)
    try:
        result = registry.load_all([(name, path, {})]) if name else None
        outcome = "no connector" if name is None else f"{len(result.rows)} rows, " \\
            f"{len(result.warnings)} warnings"
    except SourceError as exc:
        outcome = f"SourceError: {exc}"
    print(json.dumps({"connector": name, "outcome": outcome,
                      "seconds": time.monotonic() - start,
                      "peak_rss_mb": peak_mb()}))
""")


def _sparse(path: Path, head: bytes, size: int = TWO_GB) -> Path:
    """`head`, then zero bytes up to `size`: written instantly, holding no disk blocks."""
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


def _probe(path: Path) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(path)], cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("name", "head", "connector"), [
    ("events.jsonl", EVIDENCE["events.json"].replace(b"\n", b"") + b"\n", "stripe_events"),
    ("one_line.json", b'{"object": "list", "data": [{"object": "event", "id": "e"',
     "stripe_events"),
    ("requests.csv", EVIDENCE["request_log.csv"], "request_log"),
    ("logs.jsonl", EVIDENCE["stripe_logs.jsonl"], "stripe_logs"),
    ("sqs.jsonl", EVIDENCE["sqs.jsonl"], "sqs"),
    ("cp.sqlite", EVIDENCE["checkpoints.sqlite"][:8192], "checkpoints"),
    ("t.parquet", b"PAR1", "timeline"),
    ("junk.bin", b"\x00\xff" * 1000, None),
], ids=lambda v: v if isinstance(v, str) and "." in v else "")
def test_two_gigabyte_file(tmp_path: Path, name: str, head: bytes, connector: str | None) -> None:
    path = _sparse(tmp_path / name, head)
    probe = _probe(path)
    record(f"2GB:{connector}", "source_error" if "SourceError" in str(probe["outcome"]) else "ok")
    print(f"2 GB {name}: {probe}")  # the figures, with pytest -s
    assert probe["connector"] == connector, probe
    assert float(probe["seconds"]) < 30, probe  # type: ignore[arg-type]
    assert float(probe["peak_rss_mb"]) < 600, probe  # type: ignore[arg-type]
    if connector is not None and connector != "checkpoints":
        assert "more than the 1 GiB" in str(probe["outcome"]), probe


def test_long_lines_are_not_copied() -> None:
    raw = b'{"a": 1}\n' + b"x" * 100 + b"\n\n{}"
    assert list(lines(raw, max_line=50)) == [(1, b'{"a": 1}\n'), (2, None), (3, b"\n"),
                                             (4, b"{}")]
