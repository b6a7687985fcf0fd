"""Peers that run in virtual environments of their own: their pins would otherwise disturb
twice's resolution (langfuse's OTLP exporter pins opentelemetry-exporter-otlp-proto-common and
-proto versions the `lab` extra's JSON-file exporter cannot share; arize-phoenix brings ~800 MB
and pins of its own; localstripe 1.15.5 is older than the `test` extra allows).

`scripts/side-venvs DIR` makes them (`.ci/run` does, and exports the variables below); a test
that needs one reads its variable and is skipped, saying how to make it, where it is unset. A
variable that names a missing interpreter is an error, not a skip: CI set it to run the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the python of a venv with langfuse, langgraph, langchain-core and stripe
LANGFUSE = "TWICE_TEST_LANGFUSE_PYTHON"
# the python of a venv with arize-phoenix, openinference-instrumentation-langchain, langgraph,
# langchain-core and stripe
PHOENIX = "TWICE_TEST_PHOENIX_PYTHON"
# the python of a venv with localstripe 1.15.5 (it refuses the `created` filter)
OLD_LOCALSTRIPE = "TWICE_TEST_OLD_LOCALSTRIPE_PYTHON"


def side_python(variable: str) -> str:
    """The interpreter `variable` names; the test is skipped when it is unset."""
    given = os.environ.get(variable, "").strip()
    if not given:
        pytest.skip(f"{variable} is unset: `bash scripts/side-venvs DIR` makes the virtual "
                    "environment this test runs its peer in and prints the variables to set "
                    "(.ci/run does both)")
    if not Path(given).is_file():
        pytest.fail(f"{variable}={given!r} names no interpreter (scripts/side-venvs makes it)",
                    pytrace=False)
    return given
