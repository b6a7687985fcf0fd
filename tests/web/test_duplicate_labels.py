"""A duplicate's label names the tool call its evidence gives (issue 20: customer · amount ·
tool · layer · gap), short, one line and without hidden characters, and leaves the part out when
the evidence names no tool."""

from __future__ import annotations

import dataclasses

import pandas as pd

from twice.store import DuplicateRow
from twice.web.text import TOOL_SHOWN, duplicate_words, tool_words


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
