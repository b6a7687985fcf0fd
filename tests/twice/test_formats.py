"""Times, money and evidence text as every part of twice writes them (twice/formats.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pandas as pd
import pytest

from twice.formats import iso, minor_unit_exponent, money, utc, visible


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


@pytest.mark.parametrize(("text", "shown"), [
    ("t\x1b]52;c;aGVsbG8=\x1b\\\x1b[2J", "t<U+001B>]52;c;aGVsbG8=<U+001B>\\<U+001B>[2J"),
    ("req\x00\x07\x08\r\x7f", "req<U+0000><U+0007><U+0008><U+000D><U+007F>"),
    ("\x9b31m\x85\x9f", "<U+009B>31m<U+0085><U+009F>"),  # C1: the 8-bit CSI, NEL
    ("a\u202eb\u202ac\u2066d\u2069e\u200ef\u200fg\u061ch",
     "a<U+202E>b<U+202A>c<U+2066>d<U+2069>e<U+200E>f<U+200F>g<U+061C>h"),
])
def test_visible_names_control_and_bidi_characters(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_visible_keeps_ordinary_text_tabs_and_lines() -> None:
    text = "cus_é 顧客 عميل 🙂 <b>&amp; line\n\tnext"
    assert visible(text) == text
