"""Drills: a lab incident with the verdict hidden, for training on-call engineers.

The public names live here; the code is split by concern:
- `twice.drills.curriculum`: drill ids (`L<level>-<seed>`) and the curriculum, from one clear
  duplicate to controls among hard cases;
- `twice.drills.generate`: running a drill's scenario in a child process, cached by id;
- `twice.drills.question`: what the trainee sees (requests, gaps, agent records; no verdicts);
- `twice.drills.grading`: grading an answer against `truth.json`, and the explanation.
"""

from __future__ import annotations

from twice.drills.curriculum import (
    CURRICULUM,
    ID_PATTERN,
    NO_SPANS,
    Drill,
    Entry,
    Level,
    Variant,
    all_drills,
    drill_for,
    format_id,
    new_drill,
    parse_id,
    scenario_for,
    variant,
)
from twice.drills.generate import default_cache, generate, generate_all, main, skew_provider
from twice.drills.grading import (
    ACCEPTED_FIXES,
    FIX_CHOICES,
    FIX_TEXT,
    LAYER_CHOICES,
    NONE,
    Explanation,
    Grade,
    answer_key,
    explain,
    grade,
    parse_choice,
)
from twice.drills.question import (
    AGENT_VIEW,
    ATTEMPT_VIEW,
    EFFECT_PATH,
    Gap,
    Question,
    load,
    question,
)

__all__ = [
    "ACCEPTED_FIXES", "AGENT_VIEW", "ATTEMPT_VIEW", "CURRICULUM", "EFFECT_PATH", "FIX_CHOICES",
    "FIX_TEXT", "ID_PATTERN", "LAYER_CHOICES", "NONE", "NO_SPANS", "Drill", "Entry",
    "Explanation", "Gap", "Grade", "Level", "Question", "Variant", "all_drills", "answer_key",
    "default_cache", "drill_for", "explain", "format_id", "generate", "generate_all", "grade",
    "load", "main", "new_drill", "parse_choice", "parse_id", "question", "scenario_for",
    "skew_provider", "variant",
]
