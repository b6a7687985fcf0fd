"""An analysis that fails keeps what loaded: the error said once, naming the input and why.

The engine is pure pandas over a timeline the connectors made valid, so an exception in it is
twice's bug met on some evidence, not the user's mistake. Whoever is paged must still see the
evidence and know which file to look at: `analyze_or_keep` gives back an analysis with no
groups that holds the whole timeline (the timeline view still draws it, it can still be saved
and exported) and an `AnalysisFailure` naming the inputs that fail on their own (each input's
rows analysed alone) and the reason. The traceback goes to the log, never to the page.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import PurePath

import pandas as pd

from twice.engine import Analysis, Options, analyze
from twice.timeline import SourceWarning, empty_timeline

_LOG = logging.getLogger("twice.analysis")
# where in its file a row was read: ":12", ":data[45]", ":row 3", "#thread..."
_LOCATOR = re.compile(r"(?:#.*|:(?:\d+|data\[\d+\]|row \d+)(?::\d+)?)$")
SOURCE = "analysis"  # the source of the warning a failed analysis saves


@dataclass(frozen=True)
class AnalysisFailure:
    inputs: tuple[str, ...]  # the files (or connectors) the analysis fails on
    reason: str  # the exception, in one line

    def describe(self) -> str:
        return f"The analysis failed on {', '.join(self.inputs)}: {self.reason}"


def input_of(origin: object, source: object) -> str:
    """The input a row came from, as its user named it: the file's name without the place in
    it (`events.json`), else the connector's name."""
    text = str(origin) if isinstance(origin, str) and origin else ""
    text = _LOCATOR.sub("", text)
    return PurePath(text).name if text else str(source)


def _reason(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 300 else text[:299] + "…"


def analyze_or_keep(timeline: pd.DataFrame, warnings: Sequence[SourceWarning] = (),
                    options: Options | None = None
                    ) -> tuple[Analysis, AnalysisFailure | None]:
    """`analyze`, or, when it raises, an analysis without groups holding the whole timeline and
    the failure: which inputs fail alone (all of them when none does) and why."""
    try:
        return analyze(timeline, warnings, options), None
    except Exception as exc:  # noqa: BLE001 - said on the page in one line, logged in full
        _LOG.exception("the analysis failed on %d rows", len(timeline))
        reason = _reason(exc)
    inputs = pd.Series([input_of(o, s) for o, s in zip(timeline["origin"], timeline["source"],
                                                        strict=True)], index=timeline.index)
    names = sorted(set(inputs))
    failing = []
    for name in names if len(names) > 1 else []:
        try:
            analyze(timeline[inputs == name].reset_index(drop=True), options=options)
        except Exception:  # noqa: BLE001 - this input fails on its own: it is named
            failing.append(name)
    kept = analyze(empty_timeline(), warnings, options)
    aligned = timeline.assign(at_aligned=timeline["at_aligned"].fillna(timeline["at"]))
    return replace(kept, timeline=aligned), AnalysisFailure(tuple(failing or names), reason)
