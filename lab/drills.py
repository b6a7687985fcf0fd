"""Drills: a lab incident with the verdict hidden, for training on-call engineers.

The public names live here; the code is split by concern:
- `lab.drill_curriculum`: drill ids (`L<level>-<seed>`) and the curriculum, from one clear
  duplicate to controls among hard cases;
- `lab.drill_generate`: running a drill's scenario in a child process, cached by id;
- `lab.drill_question`: what the trainee sees (requests, gaps, agent records; no verdicts);
- `lab.drill_grading`: grading an answer against `truth.json`, and the explanation.
"""

from __future__ import annotations

from lab.drill_curriculum import (
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
from lab.drill_generate import default_cache, generate, generate_all, main, skew_provider
from lab.drill_grading import (
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
from lab.drill_question import (
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

if __name__ == "__main__":
    raise SystemExit(main())
