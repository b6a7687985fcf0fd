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
