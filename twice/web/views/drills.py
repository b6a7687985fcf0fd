"""Drills: `?drill=<id>` (a drill), `?drill=new` (pick a level). `&trainee=` is optional.

A drill's link carries its id only, and the id names the level and the seed, never the answer.
The charts are twice's own (`timeline_figure`, `gaps_figure`) fed a blind analysis: every
duplicate's layer is "unknown", so nothing is coloured or labelled by verdict.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from twice import drills
from twice.drills.store import DrillStore
from twice.layers import Layer
from twice.store import StoreError
from twice.store.links import DuplicateKey
from twice.verdict import fmt_gap
from twice.web.figures import DUPLICATE_COLUMNS, gaps_figure, timeline_figure
from twice.web.nav import DRILLS, base_url, open_view
from twice.web.problems import store_problem
from twice.web.text import shown_frame


@st.cache_resource
def get_drill_store() -> DrillStore:
    return DrillStore()


def _open(drill_id: str, trainee: str) -> None:
    open_view(DRILLS, {"drill": drill_id, **({"trainee": trainee} if trainee else {})})


def blind_gaps_figure(q: drills.Question) -> go.Figure:
    """The gap chart over the bands for the customer's requests, without verdicts."""
    frame = pd.DataFrame([{
        "key": str(DuplicateKey(q.customer, g.second)), "group_id": q.customer, "first": g.first,
        "second": g.second, "gap_seconds": g.gap_seconds, "band": g.band.value,
        "layer": Layer.UNKNOWN.value, "confidence": 0.0, "protected": False,
        "tool_name": None, "thread_id": None, "at": pd.NaT} for g in q.gaps],
        columns=DUPLICATE_COLUMNS)
    fig = gaps_figure(frame)
    # the stock hover says "second effect" and shows a confidence: neither is the trainee's yet
    fig.update_traces(text=[f"gap {fmt_gap(g.gap_seconds)}<br>{g.first} → {g.second}"
                            for g in q.gaps], selector={"type": "scatter"})
    fig.update_layout(legend_title_text="", title="Gaps between the customer's requests")
    return fig


def render() -> None:
    """`?drill=<id>` (a drill), `?drill=new` or none (pick a level); `&trainee=` optional."""
    trainee = st.query_params.get("trainee", "").strip()[:64]
    wanted = st.query_params.get("drill", "").strip()
    try:
        store: DrillStore | None = get_drill_store()
    except StoreError as exc:
        st.warning(store_problem(exc, "Scores cannot be saved", "the scores file"))
        store = None
    if wanted in ("", "new"):
        _home(store, trainee)
        return
    try:
        drill = drills.parse_id(wanted)
    except ValueError as exc:
        st.error(str(exc))
        _home(store, trainee)
        return
    _drill(drill, store, trainee)


def _home(store: DrillStore | None, trainee: str) -> None:
    st.title("Drills")
    st.markdown("A drill is a lab incident with the verdict hidden: read the timeline and the "
                "gaps, pick the layer and the fix, and get the answer explained from the "
                "evidence. Every drill is new (generated from a seed); its link reproduces it.")
    name = st.text_input("Your name (for your scores)", value=trainee, key="drill_home_trainee")
    for level, lv in drills.CURRICULUM.items():
        left, right = st.columns([4, 1])
        left.markdown(f"**Level {level}: {lv.title}**  \n{lv.about}")
        if right.button("New drill", key=f"new_drill_{level}"):
            _open(drills.new_drill(level).id, name)
    if store is not None and name:
        _progress(store, name)


def _progress(store: DrillStore, trainee: str) -> None:
    progress = store.progress(trainee)
    st.subheader("Progress")
    st.text(f"Trainee: {trainee}")  # plain text: a name never renders as markup
    st.dataframe(shown_frame(pd.DataFrame([{
        "level": level, "title": lv.title,
        "drills": progress[level].attempted if level in progress else 0,
        "best score": f"{progress[level].best}/{progress[level].possible}"
        if level in progress else "—"} for level, lv in drills.CURRICULUM.items()])),
        hide_index=True, width="stretch")


def _drill(drill: drills.Drill, store: DrillStore | None, trainee: str) -> None:
    st.title(f"Drill {drill.id}")
    lv = drills.CURRICULUM[drill.level]
    st.caption(f"Level {drill.level}: {lv.title}. {lv.about}")
    try:
        with st.spinner("Preparing the incident (the lab runs it once per drill)…"):
            folder = drills.generate(drill)
            q = drills.question(drill, folder)
    except RuntimeError as exc:  # the lab could not run the drill's scenario
        st.error("This drill could not be prepared:")
        st.code(str(exc), language=None)
        return
    st.markdown(q.prompt.split(". ", 1)[1])
    st.plotly_chart(timeline_figure(q.analysis, window=q.window), width="stretch",
                    key="drill_timeline")
    if q.gaps:
        st.plotly_chart(blind_gaps_figure(q), width="stretch", key="drill_gaps")
    st.markdown("**The customer's payment requests** (provider, clock-aligned UTC)")
    st.dataframe(shown_frame(q.attempts), hide_index=True, width="stretch")
    st.markdown("**The agent's records of the threads behind them**")
    st.dataframe(shown_frame(q.agent_side), hide_index=True, width="stretch")

    done_key = f"drill_result_{drill.id}"
    with st.form("drill_answer"):
        name = st.text_input("Your name", value=trainee, key="drill_trainee")
        layers, fixes = list(drills.LAYER_CHOICES), list(drills.FIX_CHOICES)
        layer = st.radio("Which layer repeated the call?", layers, index=None,
                         format_func=lambda k: f"{k} — {drills.LAYER_CHOICES[k]}",
                         key="drill_layer")
        fix = st.radio("What is the fix?", fixes, index=None,
                       format_func=lambda k: drills.FIX_CHOICES[k], key="drill_fix")
        submitted = st.form_submit_button("Check my answer", key="drill_submit")
    if submitted:
        if layer is None or fix is None:
            st.warning("Pick a layer and a fix.")
        else:
            result = drills.grade(drill, folder, layer, fix)
            who = name.strip() or "anonymous"
            if store is not None:
                try:
                    store.record(who, drill.id, layer, fix, result.score, datetime.now(UTC))
                except StoreError as exc:  # the answer is still graded, only not kept
                    st.warning(store_problem(exc, "Your score was not saved", "the scores file"))
            st.session_state[done_key] = (result, who)
    if done_key in st.session_state:
        result, who = st.session_state[done_key]
        _result(result, drills.explain(drill, folder))
        if store is not None:
            _progress(store, who)
    st.divider()
    st.markdown("**Link to this drill** (it carries no answer):")
    st.code(f"{base_url()}?{urlencode({'drill': drill.id})}", language=None)
    cols = st.columns(len(drills.CURRICULUM))
    for col, level in zip(cols, drills.CURRICULUM, strict=True):
        if col.button(f"New drill, level {level}", key=f"next_drill_{level}"):
            _open(drills.new_drill(level).id, name)


def _result(g: drills.Grade, e: drills.Explanation) -> None:
    mark = {True: "right", False: "wrong"}
    text = (f"Score {g.score}/2 — layer {mark[g.layer_ok]} (you said {g.layer_answer}), fix "
            f"{mark[g.fix_ok]} (you said {g.fix_answer}).")
    (st.success if g.score == 2 else st.info if g.score == 1 else st.error)(text)
    st.header(e.headline, anchor="drill-answer")
    st.markdown(e.what_happened)
    st.subheader("What gave it away")
    for item in e.gave_away:
        st.text(f"• {item}")
    st.subheader("What would have misled")
    for item in e.misled or ("nothing in particular: the fingerprints agree with the timing",):
        st.text(f"• {item}")
    st.subheader("Fix")
    st.text(e.fix)
    st.caption(e.twice_said)
