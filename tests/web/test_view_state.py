"""Every view is a URL: view state to a query string and back, tolerant of hand-edited links."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from twice.store.links import TABS, ViewState, from_query, link, to_query

ids = st.from_regex(r"[A-Za-z0-9_:.#-]{1,128}", fullmatch=True)
times = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2200, 1, 1),
                     timezones=st.just(UTC)).map(pd.Timestamp)


@st.composite
def states(draw: st.DrawFn) -> ViewState:
    window = draw(st.none() | st.tuples(times, times).map(sorted))
    t0, t1 = window if window else (None, None)
    return ViewState(
        inv=draw(st.none() | ids), group=draw(st.none() | ids), dup=draw(st.none() | ids),
        tab=draw(st.sampled_from(TABS)), t0=t0, t1=t1,
        clock=draw(st.sampled_from(["aligned", "raw"])),
    )


@given(states())
def test_query_round_trips(state: ViewState) -> None:
    assert from_query(to_query(state)) == state
    # and through a real link, as a browser would hand it back
    query = parse_qs(urlsplit(link("http://localhost:8501/", state)).query)
    assert from_query(query) == state


@given(st.dictionaries(st.sampled_from(["inv", "group", "dup", "tab", "t0", "t1", "clock", "x"]),
                       st.text() | st.lists(st.text())))
def test_garbage_falls_back_to_defaults_without_raising(params: dict) -> None:
    state = from_query(params)
    assert state.tab in TABS and state.clock in ("aligned", "raw")
    assert (state.t0 is None) == (state.t1 is None)
    assert state.t0 is None or state.t1 is None or state.t0 <= state.t1
    assert from_query(to_query(state)) == state


def test_defaults_make_an_empty_query() -> None:
    assert to_query(ViewState()) == {}
    assert from_query({}) == ViewState()


def test_query_keys_are_exactly_the_view_fields() -> None:
    # nothing but these fields can reach a link: no key, password or token has a place
    t0 = pd.Timestamp("2025-03-04T14:04:50Z")
    full = ViewState(inv="inv_1", group="g_660ade1a98", dup="g_660ade1a98:req_fystMARVnNGQ9P",
                     tab="timeline", t0=t0, t1=t0 + timedelta(minutes=1), clock="raw")
    query = to_query(full)
    assert set(query) == {f.name for f in dataclasses.fields(ViewState)}
    assert query["t0"] == "2025-03-04T14:04:50Z"
    assert query["t1"] == "2025-03-04T14:05:50Z"
    assert query["dup"] == "g_660ade1a98:req_fystMARVnNGQ9P"


def test_invalid_values_fall_back_one_by_one() -> None:
    state = from_query({
        "inv": "../../etc/passwd", "group": "g_1", "dup": "x" * 129, "tab": "admin",
        "t0": "now", "t1": "2025-03-04T14:00:00Z", "clock": "local", "sk": "sk_live_123",
    })
    assert state == ViewState(group="g_1")


def test_times_are_read_as_utc() -> None:
    state = from_query({"t0": "2025-03-04T15:00:00+01:00", "t1": "2025-03-04T14:30:00"})
    assert state.t0 == pd.Timestamp("2025-03-04T14:00:00Z")
    assert state.t1 == pd.Timestamp("2025-03-04T14:30:00Z")
    assert str(state.t0.tz) == "UTC"


def test_reversed_or_half_windows_are_dropped() -> None:
    assert from_query({"t0": "2025-03-04T15:00:00Z", "t1": "2025-03-04T14:00:00Z"}).t0 is None
    assert from_query({"t0": "2025-03-04T15:00:00Z"}).t0 is None
    assert from_query({"t0": "99999-01-01T00:00:00Z", "t1": "2025-03-04T14:00:00Z"}).t1 is None


def test_repeated_parameters_take_the_last_value() -> None:
    assert from_query({"tab": ["gaps", "verdict"]}).tab == "verdict"
    assert from_query({"tab": []}).tab == "incidents"


def test_link_is_base_url_plus_encoded_query() -> None:
    state = ViewState(inv="inv_1", dup="g_1:req#2", tab="verdict")
    assert link("http://host/app", state) == \
        "http://host/app?inv=inv_1&dup=g_1%3Areq%232&tab=verdict"
    assert link("", state).startswith("?inv=inv_1")
