"""What each scenario's incident says about itself, from stories.toml (prose apart from the
mechanics): truth.json's one-line description and the README's story."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from twice.lab.incident import Story


@cache
def _stories() -> dict[str, dict[str, str]]:
    text = resources.files("twice.lab").joinpath("stories.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def narrative(name: str, *, truth: str = "truth", **values: Any) -> tuple[str, Story]:
    """Scenario `name`'s truth text (the `truth` entry) and README story, their {names} filled
    from `values`."""
    entry = _stories()[name]
    return (entry[truth].format(**values),
            Story(entry["title"].format(**values), entry["what_happened"].format(**values),
                  entry["twice_should_say"].format(**values)))
