"""One drill of every case of every level, generated once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from twice import drills
from twice.drills import Drill


@pytest.fixture(scope="session")
def drill_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "drill-cache"


@pytest.fixture(scope="session")
def generated(drill_cache: Path) -> dict[str, tuple[Drill, Path]]:
    every = drills.all_drills()
    folders = drills.generate_all(every, drill_cache)
    return {d.id: (d, f) for d, f in zip(every, folders, strict=True)}
