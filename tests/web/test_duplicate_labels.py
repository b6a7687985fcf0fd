"""A duplicate's label names the tool call its evidence gives (issue 20: customer · amount ·
tool · layer · gap), short, one line and without hidden characters, and leaves the part out when
the evidence names no tool."""

from __future__ import annotations

import pandas as pd

from twice.web.text import TOOL_SHOWN, tool_words


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
