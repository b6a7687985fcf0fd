"""Control samples explained: the look-alike pairs the engine dismissed, and why."""

from __future__ import annotations

import json
from pathlib import Path

from twice.connectors import registry
from twice.controls import dismissed_pairs
from twice.engine import analyze

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


def _analysis(name: str):  # type: ignore[no-untyped-def]
    found, _ = registry.scan_folder(SAMPLES / name)
    return analyze(registry.load_all([(n, p, {}) for n, p in found]).rows)


def test_a_renewal_a_month_later_is_dismissed_by_its_gap() -> None:
    truth = json.loads((SAMPLES / "control_renewal" / "truth.json").read_text())
    analysis = _analysis("control_renewal")
    assert not analysis.groups
    pairs = [d for d in dismissed_pairs(analysis) if d.customer == truth["customer"]]
    assert len(pairs) == 1
    (pair,) = pairs
    assert pair.gap_seconds > 29 * 86400
    assert any("beyond the 15.0 min" in why for why in pair.why)


def test_a_new_request_in_the_conversation_is_dismissed_by_its_tool_calls() -> None:
    truth = json.loads((SAMPLES / "control_new_turn" / "truth.json").read_text())
    pairs = dismissed_pairs(_analysis("control_new_turn"))
    (pair,) = [d for d in pairs if d.customer == truth["customer"]]
    assert pair.gap_seconds < 900  # inside the window: told apart by the evidence, not time
    assert any(why.startswith("different tool calls") and "'ok'" in why for why in pair.why)


def test_a_duplicate_is_not_listed_as_dismissed() -> None:
    analysis = _analysis("step_retry")
    group = analysis.groups[0]
    ids = {str(r["attempt_id"]) for r in group.records}
    assert all({d.first, d.second} - ids for d in dismissed_pairs(analysis))
