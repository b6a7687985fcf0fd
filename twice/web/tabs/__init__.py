"""The tabs of an investigation; each `render(inv)` takes the one `context.Investigation`."""

from __future__ import annotations

from collections.abc import Callable

from twice.web.tabs import export, gaps, notes, timeline, verdict
from twice.web.tabs.context import Investigation

TABS: dict[str, tuple[str, Callable[[Investigation], None]]] = {
    "timeline": ("Timeline", timeline.render),
    "gaps": ("Gaps against the bands", gaps.render),
    "verdict": ("Verdict", verdict.render),
    "notes": ("Notes", notes.render),
    "export": ("Export", export.render),
}

__all__ = ["TABS", "Investigation"]
