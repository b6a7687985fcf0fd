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


def test_windows_made_once_are_each_hosts_own() -> None:
    """The clock vote makes the span windows of every host once and takes them host by host:
    each host's share equals what its own rows alone give, an HTTP span under another host's
    tool span included (it takes no tool fields there) and spans with no host as one host."""
    import numpy as np
    import pandas as pd

    from tests.twice.test_engine import http_span, tool_span
    from twice.clocks import _HostWindows
    from twice.timeline import make_timeline
    from twice.windows import http_spans, tool_windows

    rows = [tool_span(0, 5, "s1", "c1", worker="a"), http_span(1, 2, "h1", "s1", worker="a"),
            http_span(3, 4, "h2", "s1", worker="b"),  # its tool span is on host a
            tool_span(10, 15, "s2", "c2", worker="b"), http_span(11, 12, "h3", "s2", worker="b"),
            {**tool_span(20, 25, "s3", "c3"), "worker": None},
            {**http_span(21, 22, "h4", "s3"), "worker": None},
            http_span(30, 31, "h5", None, worker="a")]
    timeline = make_timeline(rows)
    made = _HostWindows(timeline)
    hosts = timeline["worker"].fillna("").astype(object).to_numpy()
    for host in ("a", "b", ""):
        own = timeline[hosts == host]
        tools, calls, http = made.of(host)
        pd.testing.assert_frame_equal(tools, tool_windows(own)[0])
        pd.testing.assert_frame_equal(http, http_spans(own))
        assert calls.empty
    http_b = made.of("b")[2].set_index("span_id")
    assert pd.isna(http_b.loc["h2", "subject"]) and http_b.loc["h3", "subject"] == "cus_8123"
    assert np.all(made.of("")[2]["subject"] == "cus_8123")
