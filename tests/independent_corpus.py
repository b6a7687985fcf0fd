"""The independent corpus as tests read it: `tests/lab/independent_corpus.tar.xz`, a snapshot of
`shared/corpus/independent/` (92 production-shaped incidents with their truth, made apart from
the lab), so a clean clone has it. Refresh it as `tests/lab/test_independent_corpus.py` says."""

from __future__ import annotations

import tarfile
from pathlib import Path

SNAPSHOT = Path(__file__).parent / "lab" / "independent_corpus.tar.xz"


def incidents(step: int = 1) -> list[str]:
    """Every `step`th incident's folder inside the snapshot ("independent/set-.../kind/name"),
    in sorted order (a spread of the sets and kinds)."""
    with tarfile.open(SNAPSHOT) as tar:
        names = [str(Path(n).parent) for n in tar.getnames() if n.endswith("/truth.json")]
    return sorted(names)[::step]


def extract(into: Path) -> Path:
    """The snapshot extracted under `into`; returns `into` (the incidents' folders are below)."""
    with tarfile.open(SNAPSHOT) as tar:
        tar.extractall(into, filter="data")
    return into
