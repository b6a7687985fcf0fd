"""The property every fuzzed connector must keep, and a count of how each case ended.

`check(connector, run)` calls `run()` (which loads or parses one bad input) and accepts exactly two
endings: a `LoadResult` whose timeline validates, whose times lie in 1970-2100, whose warnings
each name a source and a reason, and which `analyze()` takes without crashing; or one
`SourceError` naming the source. Anything else propagates, so hypothesis shrinks it to a minimal
failing input.

Run as a script to fuzz every connector and print how the cases ended, per connector:
    python tests/connectors/fuzz_summary.py [more pytest args, e.g. --hypothesis-seed=1]
`TWICE_FUZZ_EXAMPLES=500` raises the examples per test (the default keeps CI quick).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
import pandas as pd
from hypothesis import HealthCheck, settings

from twice.connectors.base import LATEST, LoadResult, SourceError
from twice.engine import analyze
from twice.timeline import validate

OUTCOMES = ("ok", "warnings", "source_error")
EPOCH = pd.Timestamp(0, tz="UTC")
_COUNTS: dict[str, Counter[str]] = {}
_REPORT = os.environ.get("TWICE_FUZZ_REPORT")
EXAMPLES = int(os.environ.get("TWICE_FUZZ_EXAMPLES", "0"))


def fuzz_settings(max_examples: int, deadline_s: float = 20.0) -> settings:
    """Modest examples; a deadline catches hangs. Whether the cases are the same every run
    (CI) or explored afresh (locally) is the profile's choice: tests/conftest.py."""
    return settings(
        max_examples=EXAMPLES or max_examples,
        deadline=deadline_s * 1000,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.function_scoped_fixture],
    )


def check(connector: str, run: Callable[[], LoadResult], *, source: str | None = None,
          engine: bool = True) -> LoadResult | SourceError:
    """Run one case; return the result or the SourceError; fail on anything else.

    `engine=False` skips `analyze()` (it costs ~0.2 s a call): for cases whose rows another case
    already analysed."""
    try:
        result = run()
    except SourceError as exc:
        assert exc.source and exc.reason, exc
        if source is not None:
            assert source in exc.source, (source, exc.source)
        record(connector, "source_error")
        return exc
    assert isinstance(result, LoadResult), type(result)
    validate(result.rows)
    for column in ("at", "at_aligned", "end"):  # past 2100: garbage, and near 2262 an overflow
        times = result.rows[column].dropna()
        assert times.empty or (times.min() >= EPOCH and times.max() <= LATEST), column
    for warning in result.warnings:
        assert warning.source and warning.detail, warning
        if source is not None:
            assert source in warning.source, (source, warning)
    if engine:
        analyze(result.rows, result.warnings)
    record(connector, "warnings" if result.warnings else "ok")
    return result


def record(connector: str, outcome: str) -> None:
    _COUNTS.setdefault(connector, Counter())[outcome] += 1


def counts() -> dict[str, dict[str, int]]:
    return {name: dict(c) for name, c in sorted(_COUNTS.items())}


@atexit.register
def _write_report() -> None:
    if _REPORT and _COUNTS:
        Path(_REPORT).write_bytes(orjson.dumps(counts(), option=orjson.OPT_INDENT_2))


def table(data: dict[str, dict[str, int]]) -> str:
    lines = [f"{'connector':<22}{'cases':>8}" + "".join(f"{o:>14}" for o in OUTCOMES)]
    for name, c in sorted(data.items()):
        lines.append(f"{name:<22}{sum(c.values()):>8}"
                     + "".join(f"{c.get(o, 0):>14}" for o in OUTCOMES))
    total = Counter[str]()
    for c in data.values():
        total.update(c)
    lines.append(f"{'all':<22}{sum(total.values()):>8}"
                 + "".join(f"{total.get(o, 0):>14}" for o in OUTCOMES))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2]
    report = root / ".fuzz_counts.json"
    report.unlink(missing_ok=True)
    tests = sorted(str(p.relative_to(root)) for p in Path(__file__).parent.glob("test_fuzz_*.py"))
    env = {**os.environ, "TWICE_FUZZ_REPORT": str(report)}
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            *tests, *argv], cwd=root, env=env)
    if report.exists():
        print(table(orjson.loads(report.read_bytes())))
        report.unlink()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
