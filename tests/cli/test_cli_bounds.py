"""Inputs under the size caps that used to run away (issue 19): each ends `twice analyze` with
exit 0 or 2, one line naming the file, no traceback, and a peak memory well under 4 GiB.

Memory is the peak resident size of the `twice` process, measured by a wrapper process whose
only child it is. Time is not asserted (the machine may be loaded); the timeout is a hang guard.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contract import contract

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data" / "step_retry"
PEAK_LIMIT_KIB = 3 * 2**20  # 3 GiB: the bound is 4 GiB
_WRAPPER = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(done.returncode)
"""


def bounded(*args: str, timeout: float = 600) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `twice analyze ARGS`; fails past the memory bound."""
    env = {**os.environ, "TWICE_WORKERS": "1"}
    done = subprocess.run([sys.executable, "-c", _WRAPPER, sys.executable, "-m", "twice.cli",
                           "analyze", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    err, _, peak = done.stderr.rstrip("\n").rpartition("\n")
    assert int(peak) < PEAK_LIMIT_KIB, f"peak {int(peak) / 2**20:.2f} GiB: {args}"
    assert "Traceback" not in err, err[-2000:]
    assert done.returncode in (0, 2), (done.returncode, err[-2000:])
    if done.returncode == 2:
        assert err.startswith("twice: ") and err.count("\n") == 0, err[-2000:]
    return done.returncode, done.stdout, err


@pytest.mark.parametrize(("flag", "mib"), [("--stripe-events", 10), ("--stripe-events", 250),
                                           ("--request-log", 10), ("--sqs", 10),
                                           ("--stripe-logs", 250), ("--spans", 250)])
def test_a_document_of_empty_lists_is_bounded(tmp_path: Path, flag: str, mib: int) -> None:
    """`[[],[],...]`: each empty list a record to look at, and 60 bytes once parsed."""
    path = tmp_path / "wide.json"
    with open(path, "wb") as out:
        out.write(b"[")
        out.write(b"[]," * (mib * 2**20 // 3))
        out.write(b"[]]")
    code, _, err = bounded(flag, str(path))
    assert code == 2 and str(path) in err


def test_a_list_of_events_too_big_to_read_whole_says_what_is_read(tmp_path: Path) -> None:
    """Stripe's list shape on one line, past the 256 MiB a document or a line is read whole,
    with an event DuckDB's reader leaves to the Python path (a time given as text): refused,
    saying to export JSON lines, which are read a line at a time."""
    event = (b'{"id":"evt_0","object":"event","type":"charge.succeeded","created":1717424400,'
             b'"request":{"id":"req_0","idempotency_key":"k"},"data":{"object":{"id":"ch_0",'
             b'"object":"charge","amount":900,"currency":"usd","status":"succeeded"}}}')
    path = tmp_path / "events.json"
    with open(path, "wb") as out:
        out.write(b'{"object":"list","data":[' + event.replace(b"1717424400", b'"soon"'))
        out.write((b"," + event) * (257 * 2**20 // (len(event) + 1)))
        out.write(b"]}")
    code, _, err = bounded("--stripe-events", str(path))
    assert code == 2 and "export the records as JSON lines" in err, err


def test_a_gigabyte_of_nul_bytes_as_a_request_log_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "requests.csv"
    with open(path, "wb") as out:  # sparse: no disk, but every byte is read
        out.truncate(1023 * 2**20)
    code, _, err = bounded("--request-log", str(path))
    assert code == 2 and "longer than 256 MiB" in err


def test_nul_lines_in_a_request_log_are_counted_not_listed(tmp_path: Path) -> None:
    path = tmp_path / "requests.csv"
    with open(path, "wb") as out:
        out.write(b"request_id,created,idempotency_key\n")
        out.write(b"req_1,2025-03-04T10:00:00Z,k1\n")
        out.write(b"\0" * 50 + b"\n" * 2 + (b"\0" * 30 + b"\n") * 500_000)
    code, out, _ = bounded("--request-log", str(path), "--format", "json")
    assert code == 0
    warnings = contract(out)["warnings"]
    assert 1000 <= len(warnings) <= 1010
    assert any("more warning(s) like these not listed" in w["detail"] for w in warnings)


def test_a_huge_blob_and_a_wal_to_dev_zero_beside_checkpoints(tmp_path: Path) -> None:
    """A 60 MiB msgpack blob, and a `-wal` linking to /dev/zero: neither is read; the rest is."""
    path = tmp_path / "checkpoints.sqlite"
    shutil.copyfile(SAMPLE / "checkpoints.sqlite", path)
    blob = b"\xc6" + (60 * 2**20).to_bytes(4, "big") + bytes(60 * 2**20)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE writes SET value = ? WHERE rowid = (SELECT min(rowid) FROM writes "
                   "WHERE type = 'msgpack')", (blob,))
    db.close()
    path.with_name(path.name + "-wal").symlink_to("/dev/zero")
    code, out, _ = bounded("--checkpoints", str(path), "--format", "json")
    assert code == 0
    details = " ".join(w["detail"] for w in contract(out)["warnings"])
    assert "more than the 32 MiB twice decodes" in details and "-wal file" in details


def test_a_folder_with_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    folder = tmp_path / "incident"
    folder.mkdir()
    shutil.copyfile(SAMPLE / "events.json", folder / "events.json")
    odd = os.fsencode(folder) + b"/spans-\xff\xfe.jsonl"
    shutil.copyfile(SAMPLE / "spans.jsonl", odd)
    code, out, err = bounded(str(folder), "--format", "json")
    assert code == 0, err
    report = contract(out)
    assert [d["layer"] for g in report["groups"] for d in g["duplicates"]] == ["step_retry"]
    code, table, _ = bounded(str(folder))
    assert code == 0 and "spans-\\xff\\xfe.jsonl" in table.replace("\n", "")


@pytest.mark.parametrize("count", [2500, 5000])
def test_thousands_of_tool_spans_of_one_call_are_bounded(tmp_path: Path, count: int) -> None:
    """Thousands of tool spans sharing one tool call id and one start time (about 1 MB):
    one logical call of that many attempts, judged pair by pair in linear time; the table
    shows the first of them and says how many more the JSON lists."""
    spans = [{"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "execute_tool x",
              "kind": 1, "startTimeUnixNano": "1741000000000000000",
              "endTimeUnixNano": "1741000001000000000",
              "attributes": [{"key": "gen_ai.tool.call.id", "value": {"stringValue": "toolu_1"}},
                             {"key": "gen_ai.tool.name", "value": {"stringValue": "charge"}}]}
             for i in range(count)]
    path = tmp_path / "spans.json"
    path.write_text(json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [
        {"scope": {"name": "x"}, "spans": spans}]}]}))
    code, out, _ = bounded(str(path))
    assert code == 0 and f"{count} attempts" in out
    assert f"... and {count - 20} more attempts" in out
    code, out, _ = bounded(str(path), "--format", "json")
    (group,) = contract(out)["groups"]
    assert len(group["attempts"]) == count and len(group["duplicates"]) == count - 1
