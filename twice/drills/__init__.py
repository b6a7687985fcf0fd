"""Drills: a lab incident with the verdict hidden, for training on-call engineers.

The public names live here; the code is split by concern:
- `twice.drills.curriculum`: drill ids (`L<level>-<seed>`), the levels and their cases, drawing
  a drill evenly;
- `twice.drills.generate`: running a drill's case in the field lab in a child process, cached
  by id, repeatable;
- `twice.drills.question`: what the trainee sees (the page, each source on request; no
  verdicts);
- `twice.drills.facts`, `twice.drills.explain`: the explanation and the feedback, built from
  the shown evidence only;
- `twice.drills.grading`: the answer key and grading (layer, fix, sources, response);
- `twice.drills.store`: every try per trainee, progress, spaced repetition, cohorts.
"""

from __future__ import annotations

from twice.drills.curriculum import (
    CURRICULUM,
    ID_PATTERN,
    SOURCE_WORDS,
    SOURCES,
    Case,
    Drill,
    Level,
    all_drills,
    drill_for,
    drill_of_case,
    drill_set,
    format_id,
    new_drill,
    parse_id,
)
from twice.drills.explain import Explanation, Point, every_feedback, explain, feedback
from twice.drills.generate import default_cache, generate, generate_all, main
from twice.drills.grading import (
    CONFIDENCE,
    FIX_CHOICES,
    FIX_TEXT,
    LAYER_CHOICES,
    MAX_RESPONSE,
    MAX_SCORE,
    MITIGATION_CHOICES,
    NEED,
    NONE,
    OWNER_CHOICES,
    STATUS_CHOICES,
    Answer,
    Grade,
    Key,
    answer_key,
    grade,
    parse_choice,
    parse_sources,
)
from twice.drills.question import Gap, Question, band_text, gap_text, load, question

__all__ = [
    "CONFIDENCE", "CURRICULUM", "FIX_CHOICES", "FIX_TEXT", "ID_PATTERN", "LAYER_CHOICES",
    "MAX_RESPONSE", "MAX_SCORE", "MITIGATION_CHOICES", "NEED", "NONE", "OWNER_CHOICES",
    "SOURCES", "SOURCE_WORDS", "STATUS_CHOICES", "Answer", "Case", "Drill", "Explanation",
    "Gap", "Grade", "Key", "Level", "Point", "Question", "all_drills", "answer_key",
    "band_text", "default_cache", "drill_for", "drill_of_case", "drill_set", "every_feedback",
    "explain", "feedback", "format_id", "gap_text", "generate", "generate_all", "grade", "load",
    "main", "new_drill", "parse_choice", "parse_id", "parse_sources", "question",
]
