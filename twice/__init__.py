"""twice: find where one intended call of an AI agent became two.

    from twice import analyze
    analysis = analyze(timeline)          # a timeline: twice.timeline documents its columns
    for group in analysis.groups:         # each logical call that executed more than once
        for d in group.duplicates:
            print(d.layer, d.confidence, d.evidence, d.fix)

The package: the core at the top (timeline, attempts, link, grouping, verdict, findings,
layers, engine, report; pure pandas), then `connectors`, `store`, `sweep`, `drills`, `lab`,
`cli` and `web` (README.md, Layout). Importing `twice` loads the core only.
"""

from __future__ import annotations

from twice.engine import Analysis, Group, Options, analyze
from twice.layers import Band, Bands, Layer

__all__ = ["Analysis", "Band", "Bands", "Group", "Layer", "Options", "analyze"]
