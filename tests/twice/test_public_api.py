"""The public API: what `import twice` offers (as httpx does, re-exported with `__all__`)."""

from __future__ import annotations

from pathlib import Path

import twice
from twice import engine, layers

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "step_retry"


def test_all_names_the_public_api_and_each_name_is_there() -> None:
    assert set(twice.__all__) == {"Analysis", "Band", "Bands", "Group", "Layer", "Options",
                                  "analyze"}
    assert twice.__all__ == sorted(twice.__all__)
    for name in twice.__all__:
        assert getattr(twice, name) is getattr(engine, name, None) or \
            getattr(twice, name) is getattr(layers, name)


def test_star_import_gives_exactly_the_public_api() -> None:
    names: dict[str, object] = {}
    exec("from twice import *", names)  # noqa: S102 - what a user's star import sees
    assert set(names) - {"__builtins__"} == set(twice.__all__)


def test_the_public_api_analyzes_a_timeline() -> None:
    from twice.connectors import registry

    found, _ = registry.scan_folder(SAMPLE)
    timeline = registry.load_all([(n, p, {}) for n, p in found]).rows
    analysis = twice.analyze(timeline, options=twice.Options())
    assert isinstance(analysis, twice.Analysis)
    [group] = analysis.groups
    assert isinstance(group, twice.Group)
    assert [d.layer for d in group.duplicates] == [twice.Layer.STEP_RETRY]


def test_importing_twice_loads_no_pandas_until_a_name_is_used() -> None:
    """`import twice` is lazy (PEP 562): the command line's `--help` starts without pandas,
    and the first use of a public name imports what defines it."""
    import subprocess
    import sys

    code = ("import sys, twice\n"
            "before = 'pandas' in sys.modules\n"
            "twice.Options\n"
            "print(before, 'pandas' in sys.modules, 'Options' in vars(twice))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.split() == ["False", "True", "True"], done.stderr


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'analyse'"):
        twice.analyse  # noqa: B018 - the spelling a user might try
