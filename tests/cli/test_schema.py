"""The JSON contract has a versioned schema (twice/contract.schema.json, `twice schema`); the
CLI tests read every `--format json` document through `tests.contract`, which applies it.
Here: the schema itself, and that it refuses what breaks the contract."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.contract import SCHEMA, contract, problems
from twice.layers import Band, Layer

ROOT = Path(__file__).resolve().parents[2]


def _twice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twice.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    done = _twice("analyze", str(ROOT / "sample_data" / "step_retry"), "--format", "json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = contract(done.stdout)
    assert doc["groups"] and doc["groups"][0]["duplicates"] and doc["clock_offsets"]
    return doc


def test_twice_schema_prints_the_packaged_schema() -> None:
    done = _twice("schema")
    assert done.returncode == 0
    printed = json.loads(done.stdout)
    assert printed == json.loads(SCHEMA.read_text())
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert printed["$defs"]["analysis"]["properties"]["version"] == {"const": 1}
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "contract.schema.json" in data["package-data"]["twice"]  # installed with twice


def test_the_schema_names_every_layer_and_band() -> None:
    defs = json.loads(SCHEMA.read_text())["$defs"]
    assert defs["layer"]["enum"] == [str(layer) for layer in Layer]
    assert defs["band"]["enum"] == [str(band) for band in Band]


def _broken(doc: dict[str, Any], path: list[str | int], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    target: Any = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return out


@pytest.mark.parametrize(("path", "value", "named"), [
    (["groups", 0, "duplicates", 0, "confidence"], "0.9", "groups/0/duplicates/0/confidence"),
    (["groups", 0, "duplicates", 0, "layer"], "cosmic_ray", "groups/0/duplicates/0/layer"),
    (["groups", 0, "attempts", 0, "effect"], "charged", "groups/0/attempts/0/effect"),
    (["groups", 0, "attempts", 0, "amount"], 49.5, "groups/0/attempts/0/amount"),
    (["groups", 0, "attempts", 0, "nickname"], "x", "groups/0/attempts/0"),  # unknown key
    (["groups", 0, "money_at_risk"], {"usd": "49.00"}, "groups/0/money_at_risk/usd"),
    (["clock_offsets", 0, "thin"], "no", "clock_offsets/0/thin"),
    (["warnings"], [{"source": "x"}], "warnings/0"),
    (["version"], 2, "version"),
    (["partial"], True, "(top)"),  # partial says which sources failed: errors is required
])
def test_what_breaks_the_contract_is_named(report: dict[str, Any], path: list[str | int],
                                           value: Any, named: str) -> None:
    found = problems(_broken(report, path, value))
    assert found and any(p.startswith(named + ":") for p in found), found


def test_added_top_level_keys_and_the_investigate_fields_keep_it(
        report: dict[str, Any]) -> None:
    extended = {**report, "partial": True, "errors": ["stripe api: unreachable"],
                "thread_ids": ["t1"], "trace_ids": ["abc"], "generated_by": "a newer twice"}
    assert problems(extended) == []
    assert problems({**extended, "thread_ids": "t1"}) != []
