"""Times and money as every part of twice writes them (twice/formats.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pandas as pd
import pytest

from twice.formats import iso, minor_unit_exponent, money, utc


@pytest.mark.parametrize(("amounts", "shown"), [
    ({"usd": 4900}, "49.00 USD"),
    ({"jpy": 4900}, "4,900 JPY"),  # no minor unit: 4900 yen, not 49.00
    ({"krw": 1_250_000}, "1,250,000 KRW"),
    ({"kwd": 1500}, "1.500 KWD"),  # thousandths
    ({"eur": 5, "jpy": 500}, "0.05 EUR, 500 JPY"),
    ({"usd": 2**63 - 1}, "92,233,720,368,547,758.07 USD"),  # exact, not a float's rounding
])
def test_money_is_written_by_the_currency_s_exponent(amounts: dict[str, int],
                                                     shown: str) -> None:
    assert money(amounts) == shown


def test_no_money_says_so() -> None:
    assert money({}) == "—"
    assert money({}, empty="no second effect") == "no second effect"


def test_exponents() -> None:
    assert [minor_unit_exponent(c) for c in ("USD", "jpy", "VND", "bhd", "xyz")] == [2, 0, 0, 3, 2]


def test_times_are_utc_and_end_in_z() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert iso(datetime(2024, 6, 3, 16, 21, tzinfo=plus_two)) == "2024-06-03T14:21:00Z"
    assert iso(pd.Timestamp("2024-06-03T14:21:00.123456789Z")) == \
        "2024-06-03T14:21:00.123456789Z"
    assert iso(1717424460.5, "milliseconds") == "2024-06-03T14:21:00.500Z"
    assert iso(datetime(2024, 6, 3, tzinfo=UTC), "microseconds", zulu=False) == \
        "2024-06-03T00:00:00.000000+00:00"
    assert iso(datetime(1, 1, 1, tzinfo=UTC), "seconds") == "0001-01-01T00:00:00Z"


def test_a_time_without_a_zone_is_utc() -> None:
    assert utc("2024-06-03 14:21") == pd.Timestamp("2024-06-03T14:21Z")
    assert utc(pd.Timestamp("2024-06-03T16:21+02:00")) == pd.Timestamp("2024-06-03T14:21Z")
    assert str(utc(datetime(2024, 6, 3)).tz) == "UTC"
