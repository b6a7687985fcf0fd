"""twice: find where one intended call of an AI agent became two.

    from twice import analyze
    analysis = analyze(timeline)          # a timeline: twice.timeline documents its columns
    for group in analysis.groups:         # each logical call that executed more than once
        for d in group.duplicates:
            print(d.layer, d.confidence, d.evidence, d.fix)

The package: the core at the top (timeline, attempts, link, grouping, verdict, findings,
layers, engine, report; pure pandas), then `connectors`, `store`, `sweep`, `drills`, `lab`,
`cli` and `web` (README.md, Layout). Importing `twice` loads nothing: each name of `__all__`
is imported when first used (PEP 562), so `twice --help` starts without pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# each public name and the module that defines it
_EXPORTS = {
    "Analysis": "twice.engine",
    "Group": "twice.engine",
    "Options": "twice.engine",
    "analyze": "twice.engine",
    "Band": "twice.layers",
    "Bands": "twice.layers",
    "Layer": "twice.layers",
}

__all__ = ["Analysis", "Band", "Bands", "Group", "Layer", "Options", "analyze"]

if TYPE_CHECKING:
    from twice.engine import Analysis, Group, Options, analyze
    from twice.layers import Band, Bands, Layer


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'twice' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
