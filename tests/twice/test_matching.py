"""The matching primitives the links and the clocks share (`twice.matching`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import example, given
from hypothesis import strategies as st

from twice.matching import agree, best_offset, known, one_to_one, ordered_match, stab


def _brute(times: np.ndarray, starts: np.ndarray, ends: np.ndarray, tol: float
           ) -> set[tuple[int, int]]:
    return {(q, w) for q in range(len(times)) for w in range(len(starts))
            if starts[w] - tol <= times[q] <= ends[w] + tol}


def test_stab_finds_the_intervals_that_hold_each_time() -> None:
    times = np.array([0.0, 5.0, 10.0, 1000.0])
    starts = np.array([-1.0, 4.0, 9.5, 0.0, 2000.0])
    ends = np.array([1.0, 6.0, 9.9, np.inf, 3000.0])
    q, w = stab(times, starts, ends, 0.2)
    assert set(zip(q.tolist(), w.tolist(), strict=True)) == {
        (0, 0), (0, 3), (1, 1), (1, 3), (2, 2), (2, 3), (3, 3)}


def test_stab_on_nothing() -> None:
    q, w = stab(np.array([]), np.array([1.0]), np.array([2.0]), 0.0)
    assert len(q) == len(w) == 0


@given(st.lists(st.floats(-100, 100), max_size=12),
       st.lists(st.tuples(st.floats(-100, 100), st.floats(0, 500)), max_size=12),
       st.sampled_from([0.0, 0.5, 3.0]))
# a sum and a difference round apart at the edge (drawn by hypothesis 6.100, not by 6.14x)
@example([-1.3877787807814457e-17], [(0.0, 0.0), (0.5, 0.0)], 0.5)
def test_stab_agrees_with_the_obvious_pairs(times: list[float],
                                            intervals: list[tuple[float, float]],
                                            tol: float) -> None:
    t = np.array(times, dtype=float)
    s = np.array([a for a, _ in intervals], dtype=float)
    e = np.array([a + length for a, length in intervals], dtype=float)
    q, w = stab(t, s, e, tol)
    assert len(set(zip(q.tolist(), w.tolist(), strict=True))) == len(q)  # each pair once
    assert set(zip(q.tolist(), w.tolist(), strict=True)) == _brute(t, s, e, tol)


def test_best_offset_is_the_range_most_owners_allow() -> None:
    # owners 0 and 1 allow [1, 3] and [2, 4]; owner 2 allows [10, 11]
    found = best_offset(np.array([0, 1, 2]), np.array([1.0, 2.0, 10.0]),
                        np.array([3.0, 4.0, 11.0]))
    assert found == (2.0, 3.0, 2, False)


def test_best_offset_counts_an_owner_once_and_breaks_ties_near_zero() -> None:
    # one owner allowing two overlapping ranges is one vote; two separate ranges tie
    found = best_offset(np.array([0, 0, 1]), np.array([5.0, 5.5, -1.0]),
                        np.array([6.0, 6.5, -0.5]))
    assert found is not None
    low, high, support, tie = found
    assert (low, high, support, tie) == (-1.0, -0.5, 1, True)
    assert best_offset(np.array([]), np.array([]), np.array([])) is None


def _pairs(rows: list[tuple[int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["_attempt", "_window"])


def test_one_to_one_keeps_pairs_in_order_of_preference() -> None:
    kept = one_to_one(_pairs([(1, 10), (2, 10), (1, 11), (2, 11), (3, 12)]))
    assert list(zip(kept["_attempt"], kept["_window"], strict=True)) == [(1, 10), (2, 11),
                                                                          (3, 12)]


def test_ordered_match_keeps_the_order_of_both_clocks() -> None:
    # attempt 0 may take window 0 or 1 (1 is nearer), attempt 1 only window 1: greedy on the
    # cost would leave attempt 1 alone; in order, both are matched
    chosen = ordered_match(np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([0.7, 0.1, 0.4]))
    assert chosen.tolist() == [0, 2]
    # two requests and one window: one is matched, the cheaper
    assert ordered_match(np.array([0, 1]), np.array([0, 0]), np.array([0.3, 0.1])).tolist() == [1]
    assert ordered_match(np.array([], dtype=int), np.array([], dtype=int),
                         np.array([])).tolist() == []


def test_agree_compares_only_what_both_sides_know() -> None:
    left = pd.DataFrame({"subject": ["cus_1", "cus_1", None, "CUS_2"],
                         "amount": [4900, 4900, 4900, 100],
                         "currency": ["usd", "usd", "usd", "usd"]})
    right = pd.DataFrame({"subject": ["cus_1", "cus_9", "cus_9", "cus_2"],
                          "amount": [4900.0, 4900.0, None, 100],
                          "currency": [None, "usd", "usd", "usd"]})
    assert agree(left, right).tolist() == [True, False, True, True]
    assert known(right).tolist() == [2, 3, 2, 3]
    # pd.NA beside None: no truth-value error
    nas = pd.DataFrame({"subject": pd.array([pd.NA, "cus_1"], dtype="string"),
                        "amount": [None, 1], "currency": [None, None]})
    assert agree(nas, nas).tolist() == [True, True]
