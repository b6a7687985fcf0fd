"""What every tab of an investigation is given: one object, read once per page run."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from twice.engine import Analysis, Group
from twice.failure import AnalysisFailure
from twice.store import Snapshot, Store
from twice.store.links import DuplicateKey, ViewState
from twice.verdict import Duplicate
from twice.web.figures import duplicates_frame


@dataclass(frozen=True)
class Investigation:
    store: Store
    snap: Snapshot  # without its timeline: the analysis holds it (twice.web.cache)
    analysis: Analysis
    state: ViewState  # what the URL asked for
    failure: AnalysisFailure | None = None  # the analysis failed: `analysis` has no groups

    @cached_property
    def dups(self) -> pd.DataFrame:
        """One row per duplicate, newest group first (`figures.duplicates_frame`)."""
        return duplicates_frame(self.analysis)

    @cached_property
    def key(self) -> str | None:
        """The duplicate shown: the URL's, else the first one of the URL's group (a sweep's
        link names the group), else the first one (None: there is none)."""
        keys = list(self.dups["key"]) if len(self.dups) else []
        if self.state.dup in keys:
            return self.state.dup
        if self.state.group is not None:
            in_group = [k for k in keys if DuplicateKey.parse(k).group == self.state.group]
            if in_group:
                return in_group[0]
        return keys[0] if keys else None

    @cached_property
    def group(self) -> Group | None:
        """The logical call of the duplicate shown."""
        if self.key is None:
            return None
        wanted = DuplicateKey.parse(self.key).group
        return next((g for g in self.analysis.groups if g.group_id == wanted), None)

    @cached_property
    def duplicate(self) -> Duplicate | None:
        """The duplicate shown (its verdict, evidence and fix)."""
        if self.group is None or self.key is None:
            return None
        second = DuplicateKey.parse(self.key).second
        return next(d for d in self.group.duplicates if d.second == second)

    @property
    def inv_id(self) -> str:
        return self.snap.summary.id
