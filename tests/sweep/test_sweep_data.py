"""The month of evidence the sweep tests use (twice/lab/month.py): every sample is in it, and one
redelivery straddles a midnight."""

from __future__ import annotations

import pandas as pd

from twice.engine import analyze
from twice.lab.month import START, month, sample, sample_names


def test_the_month_holds_every_sample_and_the_straddling_copy() -> None:
    frame = month(days=len(sample_names()) - 1)
    groups = analyze(frame).groups
    tags = {str(r["thread_id"]).rsplit("-", 1)[-1] for g in groups for r in g.records}
    assert "straddle" in tags
    straddle = [g for g in groups if str(g.thread_id).endswith("-straddle")]
    assert len(straddle) == 1
    times = [pd.Timestamp(r["at_raw"]) for r in straddle[0].records]
    boundary = START + pd.Timedelta(days=10)
    assert min(times) < boundary <= max(times)
    # every duplicate-making sample contributes its group; the controls contribute none
    assert len(groups) == 1 + sum(1 for n in sample_names() if analyze(sample(n)).groups)
