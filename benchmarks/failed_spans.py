"""A span file of `analyze_bench`'s calls in which some tool calls failed, as the SDK exports them.

    python benchmarks/failed_spans.py FOLDER [--spans 1m] [--every 100]

Writes FOLDER/spans.jsonl: the spans `analyze_bench.call_spans` gives (a tool span and an HTTP
client span per call, 512 a line), and on one tool span in `--every` what `span.record_exception`
and `span.set_status(StatusCode.ERROR, message)` leave: an exception event (type, message,
stack trace, escaped) and an ERROR status with a message. The columnar spans reader reads such
files on columns (issue 24); time `twice analyze FOLDER --format json` on it, before and after.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from analyze_bench import T0, _export, call_spans  # noqa: E402
from suite import parse_size  # noqa: E402

from twice.lab.otlp_json import attribute  # noqa: E402


def failed(span: dict, i: int, timed_out: bool) -> dict:
    """The tool span of call i as the SDK exports it when the tool raised and the span says so
    (a timeout, or a declined card)."""
    message = f"Request req_{i:08x} timed out" if timed_out else f"card_declined on call {i}"
    kind = "TimeoutError" if timed_out else "stripe.error.CardError"
    trace = (f'Traceback (most recent call last):\n  File "agent/tools.py", line 42, in charge\n'
             f"    raise {kind}({message!r})\n{kind}: {message}\n")
    return {**span, "status": {"message": message, "code": 2}, "events": [{
        "timeUnixNano": str(int(span["endTimeUnixNano"]) - 1000), "name": "exception",
        "attributes": [attribute("exception.type", kind), attribute("exception.message", message),
                       attribute("exception.stacktrace", trace),
                       attribute("exception.escaped", "False")]}]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--spans", default="1m")
    parser.add_argument("--every", type=int, default=100)
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    calls = parse_size(args.spans) // 2
    batch: list[dict] = []
    with (args.folder / "spans.jsonl").open("wb") as out:
        for i in range(calls):
            cid = f"{i:08x}"
            tool, http = call_spans(i, 0, T0 + i * 0.05, f"key_{cid}_0", f"req_{cid}0",
                                    f"toolu_01{cid}{cid}{cid[:6]}", f"th_{i // 4:07d}",
                                    f"cus_{i % 10**8:08d}", 900 + i % 4 * 1000)
            if i % args.every == 7:
                tool = failed(tool, i, timed_out=bool(i // args.every % 2))
            batch += [tool, http]
            if len(batch) >= 512 or i == calls - 1:
                out.write(orjson.dumps(_export(batch)) + b"\n")
                batch = []


if __name__ == "__main__":
    main()
