"""The vectorised paths the engine takes at scale give what the plain ones give."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from twice.grouping import components
from twice.timeline import from_columns, make_timeline


def _reference(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Smallest node of each node's component, by a plain graph walk."""
    neighbours: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in edges:
        neighbours[a].add(b)
        neighbours[b].add(a)
    label = [-1] * n
    for start in range(n):
        if label[start] >= 0:
            continue
        seen, todo = {start}, [start]
        while todo:
            for nxt in neighbours[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        for node in seen:
            label[node] = min(seen)
    return label


@pytest.mark.parametrize("seed", range(20))
def test_components_match_a_graph_walk(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randrange(1, 300)
    edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(rng.randrange(0, n))]
    # long chains too, in shuffled order: the worst case for label propagation
    chain = list(range(0, n, 3))
    rng.shuffle(chain)
    edges += list(zip(chain, chain[1:], strict=False))
    got = components(n, np.array(edges, dtype=np.intp).reshape(-1, 2))
    assert got.tolist() == _reference(n, edges)


def test_components_without_edges_are_singletons() -> None:
    assert components(4, np.empty((0, 2), dtype=np.intp)).tolist() == [0, 1, 2, 3]


def test_from_columns_takes_arrow_and_numpy_columns_as_it_takes_lists() -> None:
    at = [1_717_424_400_000_000_000 + i for i in range(4)]
    text = ["req_1", None, "req_3", "req_é"]
    amounts = [900, None, 2**62, 0]
    from_lists = from_columns({"at": at, "request_id": text, "amount": amounts}, 4)
    from_arrow = from_columns({"at": np.array(at), "request_id": pa.chunked_array([text]),
                               "amount": pa.chunked_array([pa.array(amounts)])}, 4)
    for col in from_lists.columns:
        assert str(from_arrow[col].dtype) == str(from_lists[col].dtype), col
        assert from_arrow[col].equals(from_lists[col]), col


def test_make_timeline_with_ns_times_equals_the_general_path() -> None:
    records = [{"at": 1_717_424_400_000_000_000, "source": "checkpoints", "kind": "checkpoint",
                "step": 3, "thread_id": "th_1"},
               {"at": 1_717_424_401_000_000_000, "source": "checkpoints", "kind": "tool_call",
                "tool_call_id": "toolu_1", "amount": None}]
    fast = make_timeline(records)  # times are ints: the column-wise path
    general = make_timeline([{**r, "at": pd.Timestamp(r["at"], tz="UTC")}
                             for r in records])
    for col in general.columns:
        assert str(fast[col].dtype) == str(general[col].dtype), col
        assert fast[col].equals(general[col]), col
