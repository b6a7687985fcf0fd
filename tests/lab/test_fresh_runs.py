"""Freshly generated incidents (a seed the samples do not use): `twice analyze` names the layer
truth.json says, and every scenario's fixed form leaves exactly one effect at the provider.

Each batch runs in its own process: the lab moves the whole process's clock and moto keeps its
SQS queues for the life of a process, so one redelivery run per process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from twice.cli import main
from twice.lab.scenarios import SCENARIOS

SEED = 21
RUN_BATCH = f"""
import json, sys
from twice.lab.scenarios import run_scenario
for name, out, options in json.loads(sys.argv[1]):
    run_scenario(name, out, seed={SEED}, noise=2, **options)
"""

# the fix for each layer, as the lab can apply it (domain.md: derived key; unknown outcome)
FIXED = {
    "sdk_retry": {"key": "derived"},
    "gateway_retry": {"key": "derived"},
    "step_retry": {"key": "derived"},
    "redelivery": {"key": "derived"},
    "model_reemission": {"on_timeout": "unknown"},
    "human_pause": {"effects": "ledger"},  # a durable record of the agent's own effects
}


def _run_batch(specs: list[tuple[str, Path, dict[str, Any]]]) -> None:
    arg = json.dumps([(name, str(out), options) for name, out, options in specs])
    done = subprocess.run([sys.executable, "-c", RUN_BATCH, arg], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fresh")
    specs = [(name, root / name, {}) for name in SCENARIOS]
    _run_batch(specs)
    return {name: out for name, out, _ in specs}


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fixed")
    specs = [(name, root / name, options) for name, options in FIXED.items()]
    _run_batch(specs)
    return {name: out for name, out, _ in specs}


def _analyze(folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def _customer_groups(report: dict[str, Any], customer: str) -> list[dict[str, Any]]:
    return [g for g in report["groups"] if any(a["subject"] == customer for a in g["attempts"])]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_analyze_names_the_true_layer_of_a_fresh_incident(
        name: str, fresh: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    truth = json.loads((fresh[name] / "truth.json").read_text())
    groups = _customer_groups(_analyze(fresh[name], capsys), truth["customer"])
    if truth["layer"] == "none":
        assert groups == []
        return
    (group,) = groups
    assert {d["layer"] for d in group["duplicates"]} == {truth["layer"]}
    assert set(truth["duplicate_tool_call_ids"]) <= set(group["tool_call_ids"])


@pytest.mark.parametrize("name", sorted(FIXED))
def test_the_fixed_form_leaves_one_effect(
        name: str, fixed: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    folder = fixed[name]
    truth = json.loads((folder / "truth.json").read_text())
    assert truth["effects_created"] == 1
    # the provider's own record agrees: one PaymentIntent for the customer
    events = json.loads((folder / "events.json").read_text())["data"]
    intents = {e["data"]["object"]["id"] for e in events
               if e["type"] == "payment_intent.created"
               and e["data"]["object"].get("customer") == truth["customer"]}
    assert len(intents) == 1
    # and twice calls nothing unprotected for that customer
    for group in _customer_groups(_analyze(folder, capsys), truth["customer"]):
        assert all(d["protected"] for d in group["duplicates"])
        assert group["money_at_risk"] == {}


def test_a_resume_past_key_retention_is_reported_as_an_expired_key(
        fresh: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    truth = json.loads((fresh["human_pause"] / "truth.json").read_text())
    (group,) = _customer_groups(_analyze(fresh["human_pause"], capsys), truth["customer"])
    (duplicate,) = group["duplicates"]
    assert duplicate["band"] == "beyond_retention" and not duplicate["protected"]
    assert {"key_derived", "key_expired"} <= {f["code"] for f in group["findings"]}
