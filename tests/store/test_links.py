"""A shareable link names the duplicate it shows whatever its ids hold (issue 13, item 12):
evidence ids (request ids, tool call ids, attempt ids) may be any text, and a link once dropped
the duplicate when one held a character outside `[A-Za-z0-9_:.#-]` or was over 128 long."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from hypothesis import given
from hypothesis import strategies as st

from tests.connectors.fuzz_summary import fuzz_settings
from twice.store.links import DuplicateKey, ViewState, decode_id, encode_id, from_query, link

# any text an evidence file can hold (surrogates too: JSON escapes can spell lone ones)
any_id = st.text(min_size=1, max_size=300) | st.text(
    st.characters(codec=None), min_size=1, max_size=40)
group_ids = any_id.filter(lambda g: ":" not in g)  # a group id has no ":" (DuplicateKey)


def _through_a_browser(state: ViewState) -> ViewState:
    query = parse_qs(urlsplit(link("http://localhost:8501/", state)).query,
                     keep_blank_values=True)
    return from_query(query)


@fuzz_settings(300)
@given(group=group_ids, attempt=any_id)
def test_any_text_id_round_trips_through_a_link(group: str, attempt: str) -> None:
    dup = str(DuplicateKey(group, attempt))
    state = ViewState(inv="inv_1", group=group, dup=dup, tab="verdict")
    back = _through_a_browser(state)
    assert back == state
    assert back.dup is not None and DuplicateKey.parse(back.dup) == DuplicateKey(group, attempt)


@fuzz_settings(300)
@given(value=any_id)
def test_encoding_is_one_to_one(value: str) -> None:
    encoded = encode_id(value)
    assert decode_id(encoded) == value
    assert encoded.isascii() and encoded.isprintable()


def test_ids_that_needed_no_encoding_keep_their_old_links() -> None:
    # a link written before ids were encoded opens the same view
    old = "http://host/app?inv=inv_1&dup=g_1%3Areq%232&tab=verdict"
    state = from_query(parse_qs(urlsplit(old).query))
    assert state == ViewState(inv="inv_1", group=None, dup="g_1:req#2", tab="verdict")
    assert link("http://host/app", state) == old


def test_ids_the_pattern_refused_now_keep_their_duplicate() -> None:
    for attempt in ("req 1", "req/1", "appel-é", "x" * 129, "<script>", "~raw", "a\nb"):
        dup = f"g_1:{attempt}"
        state = _through_a_browser(ViewState(inv="inv_1", dup=dup, tab="verdict"))
        assert state.dup == dup, attempt


def test_hand_edited_encodings_fall_back() -> None:
    for value in ("~", "~!!", "~Zw", "~Z2", "~" + "A" * 5):
        # not base64url, not UTF-8, or a second spelling of a plain id ("~Zw" is "g")
        assert decode_id(value) is None, value
    assert from_query({"inv": "~aW52XzE"}).inv is None  # investigation ids are always plain
