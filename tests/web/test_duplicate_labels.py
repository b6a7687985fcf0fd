"""A duplicate's label names the tool call its evidence gives (issue 20: customer · amount ·
tool · layer · gap), short, one line and without hidden characters, and leaves the part out when
the evidence names no tool: in the Duplicate picker, a search's hits (a saved duplicate) and the
verdict tab's dismissed look-alike pairs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from twice.connectors import registry
from twice.controls import Dismissed, dismissed_pairs
from twice.engine import analyze
from twice.store import DuplicateRow
from twice.verdict import fmt_gap
from twice.web.tabs.verdict import attempt_tools, dismissed_words
from twice.web.text import TOOL_SHOWN, duplicate_words, tool_words

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


def test_a_tool_name_is_shown_as_the_evidence_gives_it() -> None:
    assert tool_words("create_charge") == "create_charge"


def test_a_long_tool_name_ends_in_an_ellipsis() -> None:
    shown = tool_words("charge_customer_" * 10)
    assert len(shown) == TOOL_SHOWN and shown.endswith("…")
    assert shown.startswith("charge_customer_")


def test_hostile_tool_names_stay_one_visible_line() -> None:
    shown = tool_words("refund\u202e\nnow")
    assert "\n" not in shown and "\u202e" not in shown and "<U+202E>" in shown
    assert "refund" in shown and "now" in shown


def test_no_tool_means_no_part_not_unknown() -> None:
    for missing in (None, float("nan"), pd.NA):
        assert tool_words(missing) == ""


def _saved(**fields: object) -> DuplicateRow:
    row = DuplicateRow(dup_key="g1:req_2", group_id="g1", layer="step_retry", gap_seconds=4.0,
                       at=None, customer="cus_ZBAwnAjde5AD75", amount=2900, currency="usd",
                       tool="charge_subscription")
    return dataclasses.replace(row, **fields)  # type: ignore[arg-type]


def test_a_saved_duplicate_is_named_customer_amount_tool_layer_gap() -> None:
    """A search's hits and a link's first view name it in words, never by its key."""
    words = duplicate_words(_saved())
    assert words == ("cus\\_ZBAwnAjde5AD75 · 29\\.00 USD · charge\\_subscription · "
                     "**step\\_retry** · gap 4.00 s")
    assert "g1" not in words and "req" not in words
    assert duplicate_words(_saved(), layer=False) == (
        "cus\\_ZBAwnAjde5AD75 · 29\\.00 USD · charge\\_subscription · gap 4.00 s")


def test_a_saved_duplicate_without_a_tool_leaves_the_part_out() -> None:
    # provider-only evidence, or a duplicate saved before twice kept its tool
    assert duplicate_words(_saved(tool=None)) == (
        "cus\\_ZBAwnAjde5AD75 · 29\\.00 USD · **step\\_retry** · gap 4.00 s")


def test_a_hostile_saved_tool_is_one_escaped_line() -> None:
    words = duplicate_words(_saved(tool="**[pay](https://evil.example)**\n# now\u202e"))
    assert "\n" not in words and "\u202e" not in words and "](" not in words
    assert "\\*\\*\\[pay\\]" in words


def _dismissed(**fields: object) -> Dismissed:
    pair = Dismissed(first="req_3UeSpxkWc63T3u", second="req_GFob81eqtzM4M4",
                     customer="cus_kiaGuU7XxMXSI0", amount=900, currency="usd",
                     gap_seconds=300.0, why=("different tool calls",))
    return dataclasses.replace(pair, **fields)  # type: ignore[arg-type]


def test_a_dismissed_pair_is_named_in_words_not_by_its_attempts_ids() -> None:
    pair = _dismissed()
    tools = {pair.first: "charge_subscription", pair.second: "charge_subscription"}
    words = dismissed_words(pair, tools)
    assert words == (f"**cus\\_kiaGuU7XxMXSI0 · 9\\.00 USD · charge\\_subscription** · gap "
                     f"{fmt_gap(300.0)}")
    assert "req" not in words
    # the evidence names no tool: the part is left out; two tools: both, each once
    assert dismissed_words(pair, {}) == (f"**cus\\_kiaGuU7XxMXSI0 · 9\\.00 USD** · gap "
                                         f"{fmt_gap(300.0)}")
    assert "charge\\_subscription / refund" in dismissed_words(
        pair, {pair.first: "charge_subscription", pair.second: "refund"})


def test_a_dismissed_pairs_hostile_tool_is_one_escaped_line() -> None:
    pair = _dismissed()
    words = dismissed_words(pair, {pair.second: "**[pay](https://evil.example)**\n# now\u202e"})
    assert "\n" not in words and "\u202e" not in words and "](" not in words
    assert "\\*\\*\\[pay\\]" in words


def test_a_control_samples_pair_is_named_by_the_tool_its_evidence_gives() -> None:
    found, _ = registry.scan_folder(SAMPLES / "control_new_turn")
    analysis = analyze(registry.load_all([(n, p, {}) for n, p in found]).rows)
    pairs = dismissed_pairs(analysis)
    tools = attempt_tools(analysis, [a for d in pairs for a in (d.first, d.second)])
    pair = pairs[0]
    assert tools[pair.first] == tools[pair.second] == "charge_subscription"
    assert "charge\\_subscription" in dismissed_words(pair, tools)
