"""Drills: `?drill=<id>` (a drill), `?drill=new` (pick a level), `?drill=lead` (cohorts).

A drill's link carries its id only, and the id names the level and the seed, never the answer.
The trainee is the signed-in user where the app has sign-in, otherwise a name entered once per
session and normalised (`trainee_name`); a link never names them. A drill starts from the page:
each source is shown when asked for, the score counts whether the ones the answer needs were
opened. After the answer: the feedback on it, the explanation from the evidence shown, the
debrief (sources opened, confidence, time, the response, the expert's path) and the timeline.
The lead's view assigns a drill set to a cohort and shows its results per layer and per drill,
with a CSV download.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from twice import drills
from twice.drills.store import DrillStore, results_csv, trainee_name
from twice.extras import MissingExtra
from twice.layers import Band, Bands
from twice.store import StoreError
from twice.web.figures import timeline_figure
from twice.web.nav import DRILLS, base_url, open_view
from twice.web.problems import store_problem
from twice.web.text import md_text, shown_frame

LEAD = "lead"
_NAME = "drill_trainee_name"  # session_state: the name entered (normalised)


@st.cache_resource
def get_drill_store() -> DrillStore:
    return DrillStore()


def _open(drill_id: str, **more: str) -> None:
    open_view(DRILLS, {"drill": drill_id, **more})


def signed_in_user() -> str | None:
    """The signed-in user's e-mail (or name) when the app has sign-in, else None."""
    try:
        user: Any = st.user
        if user.get("is_logged_in", False):
            return str(user.get("email") or user.get("name") or "") or None
    except Exception:  # noqa: BLE001 - no sign-in configured: Streamlit has no user
        return None
    return None


def _trainee() -> str | None:
    """Who answers: the signed-in user, else the name this session gave (asked for once)."""
    user = signed_in_user()
    if user:
        return trainee_name(user)
    name = st.session_state.get(_NAME)
    if isinstance(name, str) and name:
        st.caption(f"Answering as {name}")
        return name
    with st.form("drill_name"):
        given = st.text_input("Your name (your answers are kept under it)",
                              key="drill_name_input")
        if st.form_submit_button("Use this name", key="drill_name_submit"):
            try:
                st.session_state[_NAME] = trainee_name(given or "")
                st.rerun()
            except ValueError as exc:
                st.error(str(exc))
    return None


def band_edges(bands: Bands, top: float) -> list[tuple[Band, float, float]]:
    floor = 0.01
    edges = [floor, bands.seconds, bands.tens_of_seconds, bands.retention,
             max(bands.retention * 10, top * 3)]
    return [(band, edges[i], edges[i + 1]) for i, band in enumerate(Band)]


def drill_gaps_figure(q: drills.Question) -> go.Figure:
    """The gaps between the customer's requests on a log axis over the bands, each band named
    by its time only (a layer's name there would prime the answer)."""
    bands = Bands()
    top = max([g.gap_seconds for g in q.gaps] + [1.0])
    fig = go.Figure()
    fills = ("#e8f1fa", "#fdf3e1", "#fbe9e2", "#eeeeee")
    for (band, x0, x1), fill in zip(band_edges(bands, top), fills, strict=True):
        fig.add_vrect(x0=x0, x1=x1, fillcolor=fill, line_width=0, layer="below",
                      label={"text": drills.band_text(band), "textposition": "top center",
                             "font": {"size": 11}})
    fig.add_trace(go.Scatter(
        x=[max(g.gap_seconds, 0.011) for g in q.gaps], y=[f"gap {i + 1}" for i in
                                                           range(len(q.gaps))],
        mode="markers", marker={"size": 12, "color": "#333333"}, name="gap",
        text=[f"{g.text}<br>{g.first} → {g.second}" for g in q.gaps],
        hovertemplate="%{text}<extra></extra>"))
    fig.update_xaxes(type="log", title="seconds between the requests")
    fig.update_layout(title="Gaps between the customer's requests", showlegend=False,
                      height=260, margin={"t": 60})
    return fig


def render() -> None:
    """`?drill=<id>`, `?drill=new` or none (pick a level), `?drill=lead&cohort=<name>`."""
    wanted = st.query_params.get("drill", "").strip()
    try:
        store: DrillStore | None = get_drill_store()
    except StoreError as exc:
        st.warning(store_problem(exc, "Answers cannot be kept", "the scores file"))
        store = None
    if wanted == LEAD:
        _lead(store)
        return
    if wanted in ("", "new"):
        _home(store)
        return
    try:
        drill = drills.parse_id(wanted)
    except ValueError as exc:
        st.error(str(exc))
        _home(store)
        return
    _drill(drill, store)


def _history_ids(store: DrillStore | None, trainee: str | None) -> list[str]:
    return [t.drill_id for t in store.history(trainee)] if store and trainee else []


def _home(store: DrillStore | None) -> None:
    st.title("Drills")
    st.markdown("A drill is a lab incident with the verdict hidden. Start from the page, ask "
                "for the sources you need, say how sure you are, pick the layer, the fix and "
                "the response, and get the answer explained from the evidence you were shown. "
                "Its link reproduces the same evidence.")
    trainee = _trainee()
    seen = _history_ids(store, trainee)
    for level, lv in drills.CURRICULUM.items():
        left, right = st.columns([4, 1])
        left.markdown(f"**Level {level}: {lv.title}**  \n{lv.about}")
        if right.button("New drill", key=f"new_drill_{level}"):
            _open(drills.new_drill(level, seen=seen).id)
    st.markdown("[Team lead: cohorts and results](?drill=lead)")
    if store is None or trainee is None:
        return
    review = store.review_drill(trainee) if store.due(trainee) else None
    if review is not None and st.button("Review: a drill like one you missed",
                                        key="review_drill"):
        _open(review.id)
    for cohort, ids in store.assigned(trainee):
        done = set(seen)
        st.markdown(f"**Assigned in {md_text(cohort)}:** " + ", ".join(
            f"[{d}](?drill={d})" + (" ✓" if d in done else "") for d in ids))
    _progress(store, trainee)


def _progress(store: DrillStore, trainee: str) -> None:
    progress = store.progress(trainee)
    st.subheader("Progress")
    st.dataframe(shown_frame(pd.DataFrame([{
        "level": level, "title": lv.title,
        "drills": progress[level].drills if level in progress else 0,
        "tries": progress[level].tries if level in progress else 0,
        "first tries": f"{progress[level].first_points}/{progress[level].first_possible}"
        if level in progress else "—",
        "right layer": f"{progress[level].right_layer}/{progress[level].tries}"
        if level in progress else "—"} for level, lv in drills.CURRICULUM.items()])),
        hide_index=True, width="stretch", key="drill_progress")
    confusion = store.confusion(trainee)
    if confusion:
        st.markdown("**Per layer: what you answered**")
        st.dataframe(shown_frame(pd.DataFrame([
            {"it was": layer, "you answered": ", ".join(f"{k} ({n})"
                                                        for k, n in said.most_common())}
            for layer, said in sorted(confusion.items())])), hide_index=True, width="stretch")
    history = store.history(trainee)
    if history:
        st.markdown("**Every try, newest first**")
        st.dataframe(shown_frame(pd.DataFrame([{
            "when": f"{a.at:%Y-%m-%d %H:%M}", "drill": a.drill_id, "it was": a.true_layer,
            "you said": a.layer_answer, "fix": a.fix_answer,
            "score": f"{a.score}/{drills.MAX_SCORE}", "sources": ",".join(a.opened),
            "sure": drills.CONFIDENCE.get(a.confidence or 0, "—"),
            "seconds": f"{a.decide_s:.0f}" if a.decide_s else "—"} for a in history])),
            hide_index=True, width="stretch", key="drill_history")


def _source(q: drills.Question, source: str) -> None:
    title = drills.SOURCE_WORDS[source]
    st.markdown(f"**{title[0].upper()}{title[1:]}**")
    frame = q.shown[source]
    if frame is None:
        st.info("Not exported for this incident.")
        return
    if frame.empty:
        st.info("No records for these threads.")
        return
    st.dataframe(shown_frame(frame), hide_index=True, width="stretch", key=f"src_{source}")
    if source == "provider":
        if q.gaps:
            st.plotly_chart(drill_gaps_figure(q), width="stretch", key="drill_gaps")
        st.text("\n".join([f"Gaps between the customer's requests of {q.amount}:"]
                          + [f"  {g.first} → {g.second}: {g.text} ({g.band_text})"
                             for g in q.gaps] + ["Clocks:"] + [f"  {c}" for c in q.clocks]))


def _drill(drill: drills.Drill, store: DrillStore | None) -> None:
    st.title(f"Drill {drill.id}")
    lv = drills.CURRICULUM[drill.level]
    st.caption(f"Level {drill.level}: {lv.title}. {lv.about}")
    try:
        with st.spinner("Preparing the incident (the lab runs it once per drill)…"):
            folder = drills.generate(drill)
            q = drills.question(drill, folder)
    except MissingExtra as exc:  # the lab is an extra: say which one to install
        st.info(str(exc))
        return
    except RuntimeError as exc:  # the lab could not run the drill's scenario
        st.error("This drill could not be prepared:")
        st.code(str(exc), language=None)
        return
    trainee = _trainee()
    st.text(q.page.split(". ", 1)[1])  # evidence in it (ids) is shown as text
    opened_key, started_key = f"drill_opened_{drill.id}", f"drill_started_{drill.id}"
    opened: list[str] = st.session_state.setdefault(opened_key, [])
    st.session_state.setdefault(started_key, time.monotonic())
    cols = st.columns(len(drills.SOURCES))
    for col, source in zip(cols, drills.SOURCES, strict=True):
        # opened in the click's own run (a callback), not by a rerun: Streamlit merges a rerun
        # asked for in the body with a click waiting for the server, which could lose it
        col.button(f"Show {drills.SOURCE_WORDS[source]}", key=f"open_{source}",
                   disabled=source in opened, on_click=_reveal, args=(opened, source))
    for source in opened:
        _source(q, source)
    done_key = f"drill_result_{drill.id}"
    if done_key not in st.session_state:
        _answer_form(drill, folder, store, trainee, opened, started_key, done_key)
    if done_key in st.session_state:
        _result(drill, folder, q, st.session_state[done_key])
        if store is not None and trainee:
            _progress(store, trainee)
    st.divider()
    st.markdown("**Link to this drill** (it carries no answer):")
    st.code(f"{base_url()}?{urlencode({'drill': drill.id})}", language=None)
    seen = _history_ids(store, trainee)
    cols = st.columns(len(drills.CURRICULUM))
    for col, level in zip(cols, drills.CURRICULUM, strict=True):
        if col.button(f"New drill, level {level}", key=f"next_drill_{level}"):
            _open(drills.new_drill(level, seen=seen).id)


def _reveal(opened: list[str], source: str) -> None:
    if source not in opened:
        opened.append(source)


def _radio(label: str, choices: dict[str, str], key: str) -> str | None:
    value: str | None = st.radio(label, list(choices), index=None, key=key,
                                 format_func=lambda k: choices[k])
    return value


def _answer_form(drill: drills.Drill, folder: Any, store: DrillStore | None,
                 trainee: str | None, opened: Sequence[str], started_key: str,
                 done_key: str) -> None:
    with st.form("drill_answer"):
        confidence = st.radio("How sure are you, before answering?", list(drills.CONFIDENCE),
                              index=None, key="drill_confidence", horizontal=True,
                              format_func=lambda k: drills.CONFIDENCE[k])
        layer = _radio("Which layer repeated the call?", drills.LAYER_CHOICES, "drill_layer")
        fix = _radio("What is the fix?", drills.FIX_CHOICES, "drill_fix")
        mitigation = _radio("What do you do for the customer now?", drills.MITIGATION_CHOICES,
                            "drill_mitigation")
        owner = _radio("Who owns the change?", drills.OWNER_CHOICES, "drill_owner")
        status = _radio("Which status update do you post?", drills.STATUS_CHOICES,
                        "drill_status")
        submitted = st.form_submit_button("Check my answer", key="drill_submit")
    if not submitted:
        return
    if layer is None or fix is None:
        st.warning("Pick a layer and a fix.")
        return
    decide = round(time.monotonic() - st.session_state[started_key], 1)
    answer = drills.Answer(layer, fix, tuple(opened), confidence, decide, mitigation, owner,
                           status)
    g = drills.grade(drill, folder, answer)
    if store is not None and trainee:
        assigned = [name for name, ids in store.assigned(trainee) if drill.id in ids]
        try:
            store.record(trainee, drill, g, cohort=assigned[0] if assigned else None)
        except StoreError as exc:  # the answer is still graded, only not kept
            st.warning(store_problem(exc, "Your answer was not kept", "the scores file"))
    elif not trainee:
        st.info("Give your name above to keep your answers.")
    st.session_state[done_key] = g


def _result(drill: drills.Drill, folder: Any, q: drills.Question, g: drills.Grade) -> None:
    e = drills.explain(drill, folder)
    text = (f"Score {g.score}/{drills.MAX_SCORE}: layer {'right' if g.layer_ok else 'wrong'}, "
            f"fix {'right' if g.fix_ok else 'wrong'}, sources "
            f"{'as needed' if g.evidence_ok else 'not as needed'}.")
    if g.response:
        text += f" Response {g.response_score}/{len(g.response)}."
    (st.success if g.score == drills.MAX_SCORE else st.info if g.score else st.error)(text)
    said = drills.feedback(drill, folder, g)
    if said:
        st.subheader("On your answer")
        for item in said:
            st.text(f"• {item}")
    st.header(e.headline, anchor="drill-answer")
    st.text(e.what_happened)
    st.subheader("What gave it away")
    for p in e.gave_away:
        st.text(f"• {p.text}")
    st.subheader("What could mislead")
    for p in e.misled or (drills.Point("", "nothing: the fingerprints agree with the timing"),):
        st.text(f"• {p.text}")
    st.subheader("Fix")
    st.text(e.fix)
    st.subheader("Debrief")
    a = g.answer
    st.text("\n".join([
        "You opened: " + (", ".join(a.opened) or "nothing") + "; the answer needs: "
        + ", ".join(g.key.needs) + ".",
        (f"You were {drills.CONFIDENCE[a.confidence]} before answering" if a.confidence
         else "You did not say how sure you were")
        + (f", and decided in {a.decide_s:.0f} s." if a.decide_s is not None else "."),
        "For the customer: " + drills.MITIGATION_CHOICES[g.key.mitigation],
        "Who owns it: " + " / ".join(drills.OWNER_CHOICES[k] for k in sorted(g.key.owners)),
        "Status update: " + drills.STATUS_CHOICES[g.key.status]]))
    st.markdown("**The expert's path through the evidence**")
    st.text("\n".join(e.path))
    st.plotly_chart(timeline_figure(q.analysis, window=q.window), width="stretch",
                    key="drill_timeline")


# --------------------------------------------------------------------------- the lead's view


def _lead(store: DrillStore | None) -> None:
    st.title("Drills: cohorts")
    if store is None:
        return
    with st.form("cohort_new"):
        st.markdown("**Assign a drill set to a cohort**")
        name = st.text_input("Cohort", key="cohort_name")
        members = st.text_area("Trainees (one a line, or comma-separated)",
                               key="cohort_members")
        levels = st.multiselect("One new drill of every case of these levels",
                                list(drills.CURRICULUM), key="cohort_levels")
        typed = st.text_input("… and/or these drill ids (comma-separated)", key="cohort_ids")
        if st.form_submit_button("Assign", key="cohort_submit"):
            drill_ids = [d.strip() for d in typed.split(",") if d.strip()]
            drill_ids += [d.id for d in drills.drill_set(levels)]
            people = [m for part in members.splitlines() for m in part.split(",") if m.strip()]
            try:
                store.create_cohort(name, people, drill_ids)
                open_view(DRILLS, {"drill": LEAD, "cohort": " ".join(name.split())})
            except ValueError as exc:
                st.error(str(exc))
    names = store.cohorts()
    if not names:
        st.info("No cohort yet.")
        return
    wanted = st.query_params.get("cohort", "")
    chosen = st.selectbox("Cohort", names, index=names.index(wanted) if wanted in names else 0,
                          key="cohort_pick")
    if chosen is None:
        return
    trainees, assigned = store.cohort(chosen)
    st.text(f"{len(trainees)} trainees: {', '.join(trainees)}\n{len(assigned)} drills: "
            + ", ".join(assigned))
    rows = store.cohort_results(chosen)
    st.subheader("Per layer (first tries)")
    st.dataframe(shown_frame(pd.DataFrame(store.cohort_by_layer(chosen),
                                          columns=["layer", "first_tries", "right_first",
                                                   "answered_instead"])),
                 hide_index=True, width="stretch", key="cohort_layers")
    st.subheader("Per drill")
    frame = pd.DataFrame(rows)
    per_drill = frame.pivot(index="trainee", columns="drill", values="first_score") \
        .reindex(columns=assigned) \
        .map(lambda v: "—" if pd.isna(v) else f"{int(v)}/{drills.MAX_SCORE}")
    st.dataframe(shown_frame(per_drill.reset_index()), hide_index=True, width="stretch",
                 key="cohort_drills")
    st.download_button("Download the results (CSV)", results_csv(rows),
                       file_name=f"cohort-{re.sub(r'[^A-Za-z0-9_-]+', '-', chosen)}.csv",
                       mime="text/csv", key="cohort_csv")
