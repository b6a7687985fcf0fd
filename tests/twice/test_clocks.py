"""A clock offset in words, as every view (terminal, web, report) shows it."""

from __future__ import annotations

from twice.clocks import ClockOffset


def test_an_offset_says_how_far_against_what_its_range_and_support() -> None:
    offset = ClockOffset("provider", 2.8304, 16, "provider requests inside HTTP client spans",
                         "spans of worker-a", 2.8291, 2.8312, False)
    assert offset.describe() == (
        "provider runs +2.830 s against spans of worker-a (its evidence allows +2.829 … "
        "+2.831 s); 16 records support it: provider requests inside HTTP client spans")


def test_an_offset_without_a_range_says_so_by_leaving_it_out() -> None:
    offset = ClockOffset("spans of worker-b", -0.4, 2, "the provider's requests placed in this "
                         "host's spans", "spans of worker-a", thin=True)
    assert offset.describe() == (
        "spans of worker-b runs -0.400 s against spans of worker-a; 2 records support it: "
        "the provider's requests placed in this host's spans")
