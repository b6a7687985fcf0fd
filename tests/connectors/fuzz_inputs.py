"""Hypothesis strategies for bad evidence: nasty scalars, arbitrary JSON, and mutations of real
valid records (fields dropped, altered or retyped; records duplicated or replaced)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

# Values that broke, or could break, a connector: beyond int64/uint64, non-finite floats, times in
# the wrong unit or out of range, control characters, bidi overrides, lone surrogates.
NASTY: list[Any] = [
    2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30, -(10**30), 0, -1, 1,
    1e30, -1e30, 1e308, float("nan"), float("inf"), float("-inf"), 0.5, -0.0,
    True, False, None, "", " ", "\x00", "\x1b[31m", "\u202e", "\ud800", "\ufeff", "null",
    "NaN", "Infinity", "1e400", "9" * 40, "-1", "0x10", "٣", "²",
    1714557600, 1714557600000, 1714557600000000, 1714557600000000000, -1714557600,
    253402300800, 4102444800, 946684799, "2024-05-01T10:00:00Z", "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00", "10000-01-01", "2024-02-30T00:00:00Z", "2024-05-01 10:00:00 UTC",
    "yesterday", [], {}, [1, 2], {"id": None}, {"": ""}, "x" * 5000,
]

text = st.text(st.characters(codec=None, blacklist_categories=("Cs",)), max_size=20) | \
    st.text(st.characters(min_codepoint=0, max_codepoint=0x1F), max_size=8)
scalars = (st.sampled_from(NASTY) | st.none() | st.booleans()
           | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | text)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(text, children, max_size=4),
    max_leaves=12,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path inside a JSON value (dict keys and list indexes), parents first."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield (*prefix, i)
            yield from paths(child, (*prefix, i))


def _parent(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        value = value[key]
    return value


@st.composite
def mutate(draw: st.DrawFn, record: Any) -> Any:
    """A copy of one valid record with 1-4 changes: a field dropped, or set to a nasty value."""
    out = copy.deepcopy(record)
    for _ in range(draw(st.integers(1, 4))):
        where = sorted(paths(out), key=repr)
        if not where:
            break
        path = draw(st.sampled_from(where))
        parent = _parent(out, path)
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            # a copy: NASTY's lists and dicts are shared, and later changes edit in place
            parent[path[-1]] = copy.deepcopy(draw(json_values))
    return out


@st.composite
def mutated_records(draw: st.DrawFn, records: list[Any]) -> list[Any]:
    """Valid records, some mutated, some duplicated, some replaced by arbitrary JSON."""
    out = [copy.deepcopy(r) for r in records]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(out) - 1))
        action = draw(st.sampled_from(["mutate", "mutate", "mutate", "duplicate", "replace"]))
        if action == "mutate":
            out[i] = draw(mutate(out[i]))
        elif action == "duplicate":
            out.insert(draw(st.integers(0, len(out))), copy.deepcopy(out[i]))
        else:
            out[i] = copy.deepcopy(draw(json_values))
    return out


def json_text(value: Any) -> bytes:
    """JSON as a careless writer would produce it: the stdlib's NaN/Infinity, big ints, and
    lone surrogates written as escapes."""
    import json

    return json.dumps(value).encode()


def truncations(raw: bytes) -> Iterator[bytes]:
    """`raw` cut at every byte offset."""
    for end in range(len(raw)):
        yield raw[:end]
