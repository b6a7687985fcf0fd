"""`from_columns`, the column-wise way connectors with many rows build a timeline: the same frame
as `make_timeline` gives for the same rows."""

from __future__ import annotations

import pandas as pd
import pytest

from twice.timeline import SchemaError, from_columns, make_timeline, validate

T0 = 1_717_424_400_000_000_000  # ns


def test_same_frame_as_row_by_row() -> None:
    rows = [
        {"at": pd.Timestamp(T0, unit="ns", tz="UTC"), "source": "spans", "kind": "http_span",
         "status": 200, "method": "POST", "end": None},
        {"at": pd.Timestamp(T0 + 1, unit="ns", tz="UTC"), "source": "spans", "kind": "tool_span",
         "status": None, "method": None, "end": pd.Timestamp(T0 + 5, unit="ns", tz="UTC"),
         "at_aligned": pd.Timestamp(T0 + 2, unit="ns", tz="UTC")},
    ]
    columns = {"at": [T0, T0 + 1], "source": ["spans", "spans"],
               "kind": ["http_span", "tool_span"], "status": [200, None],
               "method": ["POST", None], "end": [None, T0 + 5], "at_aligned": [None, T0 + 2]}
    frame = from_columns(columns, 2)
    validate(frame)
    pd.testing.assert_frame_equal(frame, make_timeline(rows), check_exact=True)
    assert frame["at_aligned"].tolist() == [frame["at"][0], frame["at"][1] + pd.Timedelta(1)]


def test_no_rows_is_the_empty_timeline() -> None:
    pd.testing.assert_frame_equal(from_columns({}, 0), make_timeline([]))


def test_schema_mistakes_are_refused() -> None:
    with pytest.raises(SchemaError, match="unknown timeline columns"):
        from_columns({"at": [T0], "source": ["x"], "kind": ["tool_span"], "colour": ["red"]}, 1)
    with pytest.raises(SchemaError, match="without 2 values"):
        from_columns({"at": [T0, T0], "source": ["x"], "kind": ["tool_span"] * 2}, 2)


def test_integers_beside_nulls_are_kept_exactly() -> None:
    """An int64 beside a null once went through float64: 2**53 + 1 was rounded and 2**63 - 1
    raised TypeError (an SQS receive count, found by the connectors' fuzz tests)."""
    at = pd.Timestamp("2025-03-04T10:00:00Z")
    values = [2**63 - 1, None, 2**53 + 1, -(2**63), 2**64, 1.5, "7"]
    rows = make_timeline([{"at": at, "source": "sqs", "kind": "queue_receive",
                           "delivery_count": v} for v in values])
    assert rows["delivery_count"].tolist() == [2**63 - 1, pd.NA, 2**53 + 1, -(2**63), pd.NA,
                                               pd.NA, 7]
    validate(rows)


def test_isin_means_what_pandas_means_on_text_columns() -> None:
    """twice.timeline.isin is Series.isin as pandas 3 means it (a missing value matches a
    missing value; pandas 2.2's arrow-backed text columns did not), only faster on the
    arrow-backed text columns, and the same under every pandas the project allows."""
    from twice.timeline import empty_timeline, isin

    dtype = empty_timeline()["request_id"].dtype
    column = pd.Series(["a", None, "b", "c"], dtype=dtype, index=[5, 6, 7, 8])
    for values in (["a", None], ["a"], [], pd.Series(["c", None], dtype=dtype), {"b"},
                   pd.Index(["b", "a"])):
        wanted = {None if pd.isna(v) else v for v in values}
        assert isin(column, values).tolist() == [
            (None if pd.isna(v) else v) in wanted for v in column], values
        if int(pd.__version__.split(".")[0]) >= 3:
            assert isin(column, values).tolist() == column.isin(values).tolist(), values
        assert list(isin(column, values).index) == [5, 6, 7, 8]


@pytest.mark.parametrize("values", [
    ["POST", "GET", None] * 4000,  # few distinct: each made once and shared
    ["spans"] * 9000 + [f"id_{i}" for i in range(9000)],  # few at first, many later
    [f"id_{i}" if i % 3 else None for i in range(12000)],  # many: one str a row
    [None] * 10000, ["é", "", "\x00z"] * 4000, ["x"] * 3,
], ids=["few", "few-then-many", "many", "all-null", "unicode", "short"])
@pytest.mark.parametrize("chunks", [1, 3])
def test_text_objects_are_the_arrow_texts_as_python_str(values: list[str | None],
                                                         chunks: int) -> None:
    """`text_objects` gives what Arrow's own `to_numpy` gives, value for value (str or None),
    whether a column's values are made once per distinct value or once per row."""
    import numpy as np
    import pyarrow as pa

    from twice.timeline import text_objects

    step = -(-len(values) // chunks)
    data = pa.chunked_array([pa.array(values[k:k + step], pa.large_string())
                             for k in range(0, len(values), step)], pa.large_string())
    for arrow in (data, data.combine_chunks()):
        got = text_objects(arrow)
        assert isinstance(got, np.ndarray) and got.dtype == object
        assert [type(v) for v in got] == [type(v) for v in values]
        assert got.tolist() == values
