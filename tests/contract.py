"""The JSON contract's schema (twice/contract.schema.json), applied to what the command line
prints: every CLI test that reads `--format json` output reads it through `contract`, so a key
renamed, a type changed or a nested key added without the schema fails where it is printed."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

SCHEMA = Path(__file__).resolve().parents[1] / "twice" / "contract.schema.json"


@cache
def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=FormatChecker())


def _kind(doc: Any) -> int:
    """Which of the schema's `oneOf` the document means to be: 0 an analysis, 1 a sweep,
    2 a sweep listing (to name its own problems rather than "valid under none")."""
    if isinstance(doc, list):
        return 2
    return 1 if isinstance(doc, dict) and "sweep" in doc else 0


def problems(doc: Any) -> list[str]:
    """Each way `doc` breaks the contract, as `path: message` (empty when it keeps it)."""
    found = []
    for error in validator().iter_errors(doc):
        if error.validator == "oneOf" and not error.absolute_path:
            mine = [e for e in error.context or () if e.relative_schema_path[0] == _kind(doc)]
            found.extend(mine or [error])
        else:
            found.append(error)
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
                  for e in found)


def contract(text: str | bytes) -> Any:
    """A `--format json` document the command line printed, parsed and checked against the
    schema (AssertionError naming each problem)."""
    doc = json.loads(text)
    found = problems(doc)
    assert not found, "the JSON breaks twice/contract.schema.json:\n" + "\n".join(found[:20])
    return doc
