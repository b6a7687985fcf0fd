"""The engine leaves the timeline it is given as it was: a second analysis of the same frame (the
copy a store saves, a page, the lab's scoring) gives the same verdicts and clock offsets. On
pandas 2, which copies on write only when asked, the clock alignment once moved the caller's
own `at_aligned`, and the second analysis of an incident with several span hosts found one
offset fewer. Run on the bundled samples and on evidence the lab did not make."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.independent_corpus import extract, incidents
from twice.connectors.registry import load_all, scan_folder
from twice.engine import analyze

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (ROOT / "sample_data").iterdir() if p.is_dir())
FIELD = incidents(step=10)  # every tenth incident of the independent corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract(tmp_path_factory.mktemp("corpus"))


@pytest.mark.parametrize("folder", [*SAMPLES, *FIELD], ids=lambda p: Path(p).name)
def test_analysing_a_timeline_leaves_it_as_it_was(folder: Path | str, corpus: Path) -> None:
    found, _ = scan_folder(folder if isinstance(folder, Path) else corpus / folder)
    timeline = load_all((c, p, {}) for c, p in found).rows
    before = timeline.copy(deep=True)
    first = analyze(timeline)
    pd.testing.assert_frame_equal(timeline, before, check_exact=True)
    second = analyze(timeline)
    assert second.offsets == first.offsets
    assert [(g.group_id, g.duplicates, g.findings) for g in second.groups] == \
        [(g.group_id, g.duplicates, g.findings) for g in first.groups]
    pd.testing.assert_frame_equal(second.timeline, first.timeline, check_exact=True)


def test_the_field_corpus_is_here() -> None:
    assert len(FIELD) >= 9
