"""Evidence text in the figures, the duplicate picker, the verdict tab and the HTML report: shown
as the text it is, never drawn as markup nor obeyed as a control; and the engine's honesty
fields (the layers a verdict cannot rule out, the clock offsets with their reference, range,
support and thin flag) in each of those views.

The figures are checked as data (every string plotly would draw), the pages with Streamlit's
AppTest; tests/web/test_hostile_browser.py looks at the same evidence in chromium.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import streamlit as st

from tests.hostile import CLEAR, EVIL_TOOL, honest_timeline
from tests.web.conftest import run_app
from twice.clocks import THIN_LABEL, THIN_WHY
from twice.engine import Analysis, analyze
from twice.store import Snapshot, Summary, open_store
from twice.web.figures import duplicates_frame, gaps_figure, plot_text, timeline_figure
from twice.web.report_html import build_report
from twice.web.text import shown_frame

RLO = "\u202e"
TOOL = EVIL_TOOL + RLO
# what plotly is given for the tool name: entities it decodes back to the characters it shows
TOOL_IN_PLOTLY = ("charge&lt;a href=&#34;https://evil.example/&#34;&gt;evil&lt;/a&gt;"
                  "&lt;span style=&#34;font-size:400px&#34;&gt;&lt;U+202E&gt;")
INV = "hostile-render"


def hostile_timeline() -> pd.DataFrame:
    """An SDK retry that a proxy's resend would explain too, on a thin clock offset, whose tool
    is named with live markup, whose request ids end in a right-to-left override and whose
    worker's name clears the screen."""
    rows = honest_timeline(worker_suffix=CLEAR, tool_name=TOOL)
    rows["request_id"] = rows["request_id"].where(rows["request_id"].isna(),
                                                  rows["request_id"] + RLO).astype("string")
    return rows


@pytest.fixture(scope="module")
def analysis() -> Analysis:
    result = analyze(hostile_timeline())
    (group,) = result.groups
    assert group.tool_name == TOOL and group.duplicates[0].second.endswith(RLO)
    assert group.duplicates[0].alternatives and result.offsets[0].thin
    return result


def _drawn_strings(node: Any, key: str = "") -> Iterator[str]:
    """Every string in a figure that plotly draws as text (customdata only travels with
    selection events and is never drawn)."""
    if key == "customdata":
        return
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _drawn_strings(v, k)
    elif isinstance(node, list | tuple):
        for v in node:
            yield from _drawn_strings(v, key)
    elif hasattr(node, "tolist"):
        yield from _drawn_strings(node.tolist(), key)


def _assert_no_evidence_markup(fig: Any) -> str:
    drawn = list(_drawn_strings(fig.to_plotly_json()))
    for text in drawn:
        assert "<a " not in text and "<span" not in text, text
        assert RLO not in text and "\x1b" not in text, text
    return "\n".join(drawn)


def test_plot_text_escapes_markup_as_entities_plotly_decodes() -> None:
    assert plot_text(TOOL) == TOOL_IN_PLOTLY
    assert plot_text("a'b\"c&d") == "a&#39;b&#34;c&amp;d"  # plotly knows no &quot;
    assert plot_text("<extra>x</extra>%{y}") == "&lt;extra&gt;x&lt;/extra&gt;%{y}"


def test_gaps_figure_draws_evidence_as_text(analysis: Analysis) -> None:
    dups = duplicates_frame(analysis)
    drawn = _assert_no_evidence_markup(gaps_figure(dups, selected=dups["key"].iloc[0]))
    assert f"tool {TOOL_IN_PLOTLY}" in drawn
    assert "&lt;U+202E&gt;" in drawn  # the attempt ids' override, named


def test_timeline_figure_draws_evidence_as_text(analysis: Analysis) -> None:
    group = analysis.groups[0]
    for aligned in (True, False):
        fig = timeline_figure(analysis, selected_group=group.group_id, aligned=aligned)
        drawn = _assert_no_evidence_markup(fig)
        assert f"tool: {TOOL_IN_PLOTLY}" in drawn
        assert "worker: worker-a&lt;U+001B&gt;[2J" in drawn
        line = next(t for t in fig.data if t.name == "selected group: attempts")
        assert all(t.startswith("attempt req_") and t.endswith("&lt;U+202E&gt;")
                   for t in line.text)
        assert list(line.customdata) == list(group.attempts["attempt_id"])  # data stays exact


# --- the HTML report -------------------------------------------------------------------------

def _snapshot(timeline: pd.DataFrame, title: str) -> Snapshot:
    summary = Summary(id=INV, title=title, created_at=datetime(2025, 3, 3, tzinfo=UTC),
                      provider="stripe", groups=1, worst_layer="sdk_retry", money_at_risk={},
                      sources=["events.json"], tags=[])
    return Snapshot(summary, timeline, [], [], [])


def test_report_shows_alternatives_and_clocks(analysis: Analysis) -> None:
    html = build_report(_snapshot(analysis.timeline, "honest"), analysis)
    (dup,) = analysis.groups[0].duplicates
    (alternative,) = dup.alternatives
    assert f"<p class='alt'>{escape(alternative.describe())}</p>" in html
    assert "could also be: gateway_retry, a proxy or gateway" in html
    (offset,) = analysis.offsets
    assert "<h2>Clocks</h2>" in html
    assert (f"provider runs {offset.seconds:+.3f} s against spans of worker-a&lt;U+001B&gt;[2J "
            f"(its evidence allows {offset.low:+.3f} … {offset.high:+.3f} s); "
            f"{offset.pairs} records support it: ") in html
    assert f"<span class='thin'>{THIN_LABEL}</span> {escape(THIN_WHY)}" in html
    # outside the charts' data (a script's JSON, where an id stays exact), nothing is obeyed
    text = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)
    assert "\x1b" not in text and RLO not in text
    assert "evil.example/\">" not in html  # the tool's link is text, in the report and charts


# --- the pages (AppTest) ---------------------------------------------------------------------

@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "investigations.sqlite3"
    open_store(str(path)).create("hostile render", hostile_timeline(), id=INV)
    monkeypatch.setenv("TWICE_STORE", str(path))
    st.cache_resource.clear()  # the app caches its store and analyses per process
    yield path
    st.cache_resource.clear()


def _unescaped(markdown: str) -> str:
    """Markdown source as the reader sees it (md_text escapes punctuation with backslashes and
    puts an invisible word joiner inside what would be linked or drawn as an icon)."""
    return markdown.replace("\\", "").replace("\u2060", "")


def test_duplicate_picker_names_the_bidi_override(store_path: Path) -> None:
    at = run_app({"inv": INV, "tab": "verdict"})
    (picker,) = [s for s in at.selectbox if s.label == "Duplicate"]
    assert picker.options and all(RLO not in o and o.endswith("<U+202E>")
                                  for o in picker.options)


def test_verdict_tab_says_what_else_it_could_be_and_how_sure_the_clocks_are(
        store_path: Path, analysis: Analysis) -> None:
    at = run_app({"inv": INV, "tab": "verdict"})
    (dup,) = analysis.groups[0].duplicates
    (alternative,) = dup.alternatives
    warnings = [_unescaped(w.value) for w in at.warning]
    assert alternative.describe().startswith("could also be: gateway_retry, a proxy or gateway")
    assert any(alternative.describe() in w for w in warnings), warnings
    assert any(h.value == "Clocks" for h in at.subheader)
    clocks = [_unescaped(m.value) for m in at.markdown if "records support it" in m.value]
    (offset,) = analysis.offsets
    assert len(clocks) == 1
    assert f"provider runs {offset.seconds:+.3f} s against spans of worker-a<U+001B>[2J" \
        in clocks[0]
    assert f":orange-badge[{THIN_LABEL}]" in clocks[0] and THIN_WHY in clocks[0]
    page = "\n".join(m.value for m in [*at.markdown, *at.caption, *at.warning])
    assert RLO not in page and "\x1b" not in page


def test_timeline_tab_says_how_each_clock_was_read(store_path: Path,
                                                   analysis: Analysis) -> None:
    at = run_app({"inv": INV, "tab": "timeline"})
    captions = [_unescaped(c.value) for c in at.caption if c.value.startswith("Clock:")]
    (offset,) = analysis.offsets
    assert len(captions) == 1
    assert f"provider runs {offset.seconds:+.3f} s against spans of worker-a<U+001B>[2J" \
        in captions[0]
    assert f"{offset.pairs} records support it" in captions[0]
    assert THIN_LABEL in captions[0]
    assert not any("off the spans" in c.value for c in at.caption)


def test_grids_show_controls_and_bidi_by_name_and_keep_numbers() -> None:
    frame = pd.DataFrame({"title": [f"refund{RLO}", None], "source": [f"e{CLEAR}.json", "ok"],
                          "groups": [3, 4]})
    shown = shown_frame(frame)
    assert shown["title"].tolist()[0] == "refund<U+202E>" and pd.isna(shown["title"].iloc[1])
    assert shown["source"].tolist() == ["e<U+001B>[2J.json", "ok"]
    assert shown["groups"].tolist() == [3, 4] and frame["title"].iloc[0] == f"refund{RLO}"


def test_the_incidents_list_names_a_bidi_override_in_a_title(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    path = tmp_path / "investigations.sqlite3"
    open_store(str(path)).create(f"refund{RLO}gnp.exe", hostile_timeline(), id=INV)
    monkeypatch.setenv("TWICE_STORE", str(path))
    st.cache_resource.clear()
    try:
        at = run_app({})
        titles = [p.proto.label for p in at.get("page_link")]  # beside the bundled samples
        assert ":blue[**refund\\<U\\+202E\\>gnp\\.exe**]" in titles
        assert not any(RLO in t for t in titles)
    finally:
        st.cache_resource.clear()


def test_a_searched_duplicate_is_named_in_words_with_its_tool_escaped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, analysis: Analysis) -> None:
    """Issue 20: a search's hit is named customer · amount · tool · layer · gap; the tool, as
    hostile as the evidence makes it, is one line of text, not markup."""
    from twice.web.text import md_text, tool_words

    path = tmp_path / "investigations.sqlite3"
    open_store(str(path)).create("hostile tool", hostile_timeline(), id=INV)
    customer = str(analysis.groups[0].records[-1]["subject"])
    monkeypatch.setenv("TWICE_STORE", str(path))
    st.cache_resource.clear()
    try:
        at = run_app({})
        at.text_input[0].set_value(customer).run()
        assert not at.exception, at.exception
        labels = [p.proto.label for p in at.get("page_link")
                  if "dup=" in p.proto.query_string]
        tool = md_text(tool_words(TOOL))
        assert tool.startswith("charge\\<a href") and tool.endswith("…")
        assert any(f" · {tool} · **" in label for label in labels), labels
        # every `<` escaped: markdown shows it, never opens a tag with it
        assert not any(RLO in label or re.search(r"(?<!\\)<", label) for label in labels)
    finally:
        st.cache_resource.clear()
