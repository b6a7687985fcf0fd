"""The views of the web app. Each takes the URL state and the core's results and renders them;
moving elsewhere goes through `go(state)`, which rewrites the URL."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import streamlit as st

from twice.connectors import registry
from twice.connectors.base import SourceError
from twice.connectors.provider import timeline_file
from twice.engine import Analysis, Group
from twice.formats import money
from twice.layers import LAYERS, Layer
from twice.report import to_contract
from twice.store import Note, Override, Snapshot, Store, effective_overrides
from twice.store.links import ViewState, link
from twice.verdict import fmt_gap
from twice.web.figures import attempt_comparison, duplicates_frame, gaps_figure, timeline_figure
from twice.web.report_html import build_report, visible

Go = Callable[[ViewState], None]
TAB_LABELS = {"timeline": "Timeline", "gaps": "Gaps against the bands", "verdict": "Verdict",
              "notes": "Notes", "export": "Export"}


def sidebar(store: Store, state: ViewState, go: Go) -> None:
    st.markdown("## twice")
    st.caption("Where did one intended call become two?")
    if st.button("All incidents", width="stretch"):
        go(ViewState())
    if st.button("Drills", width="stretch"):  # the drills page (twice/web/drills.py)
        st.query_params.from_dict({"drill": "new"})
        st.rerun()
    with st.expander("New investigation from files"):
        _upload_form(store, go)
    with st.expander("New investigation from live sources"):
        _live_form(store, go)


def incidents(store: Store, state: ViewState, go: Go) -> None:
    st.title("Incidents")
    left, right = st.columns([3, 1])
    search = left.text_input("Search", placeholder="title, customer, thread, request id, tag")
    layer = right.selectbox("Worst layer", ["any", *[x.value for x in Layer]])
    rows = store.list(search=search, layer=None if layer == "any" else layer)
    if not rows:
        st.info("No investigation matches.")
        return
    table = pd.DataFrame([{
        "title": s.title, "when": s.created_at, "provider": s.provider, "groups": s.groups,
        "worst layer": s.worst_layer or "—", "money at risk": money(s.money_at_risk),
        "open": link("", ViewState(inv=s.id, tab="verdict")),
    } for s in rows])
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        "open": st.column_config.LinkColumn("open", display_text="open")})
    for s in rows:
        layer = f" · worst layer **{s.worst_layer}**" if s.worst_layer else " · no duplicate"
        st.markdown(f"- [{md_text(s.title)}]({link('', ViewState(inv=s.id, tab='verdict'))})"
                    f"{layer} · {s.groups} groups · money at risk "
                    f"{md_text(money(s.money_at_risk))}")


# Markdown's punctuation and `$` (Streamlit renders $...$ as math): escaped, so evidence text
# is shown as typed (`:red[...]` directives need the escaped `[`).
_MARKUP = frozenset("\\`*_{}[]()<>#+-.!|~$")


def md_text(text: str) -> str:
    """Text from evidence or users shown inside markdown: no markup, no links, no math, one line
    (a newline would end the list item or link it sits in)."""
    flat = visible(text.replace("\r\n", " ").replace("\n", " ").replace("\t", " "))
    return "".join("\\" + c if c in _MARKUP else c for c in flat)


def _pick(analysis: Analysis, state: ViewState) -> tuple[pd.DataFrame, str | None]:
    """The duplicates, and the selected one's key (the URL's, else the first)."""
    dups = duplicates_frame(analysis)
    keys = list(dups["key"]) if len(dups) else []
    key = state.dup if state.dup in keys else (keys[0] if keys else None)
    return dups, key


def investigation(store: Store, snap: Snapshot, analysis: Analysis, state: ViewState,
                  go: Go) -> None:
    s = snap.summary
    st.title(md_text(s.title))
    st.caption(f"{md_text(s.provider)} · {len(analysis.groups)} duplicate groups · worst "
               f"layer {s.worst_layer or '—'} · money at risk "
               f"{md_text(money(s.money_at_risk))} · saved "
               f"{s.created_at:%Y-%m-%d %H:%M} UTC · id `{s.id}`")
    for warning in snap.warnings:
        if warning.get("source") == LIVE_ERRORS:
            st.warning(md_text(str(warning.get("detail", ""))))
    dups, key = _pick(analysis, state)
    if key and len(dups):
        labels = {k: f"{layer} · gap {fmt_gap(gap)} · {second}"
                  for k, layer, gap, second in zip(dups["key"], dups["layer"],
                                                   dups["gap_seconds"].astype(float),
                                                   dups["second"], strict=True)}
        chosen = st.selectbox("Duplicate", list(labels), index=list(labels).index(key),
                              format_func=labels.__getitem__)
        if chosen != key:
            go(dataclasses.replace(state, dup=chosen, group=chosen.split(":")[0]))
    tabs = list(TAB_LABELS)
    tab = state.tab if state.tab in tabs else "verdict"
    picked = st.radio("View", tabs, index=tabs.index(tab), horizontal=True,
                      format_func=TAB_LABELS.__getitem__, label_visibility="collapsed")
    if picked != tab:
        go(dataclasses.replace(state, tab=picked))
    group = next((g for g in analysis.groups if key and g.group_id == key.split(":")[0]), None)
    {"timeline": _timeline, "gaps": _gaps, "verdict": _verdict, "notes": _notes,
     "export": _export}[tab](store, snap, analysis, state, go, dups, key, group)
    st.divider()
    here = dataclasses.replace(state, tab=tab, dup=key,
                               group=key.split(":")[0] if key else None)
    st.markdown("**Link to this view** (no secrets in it):")
    st.code(link(_base_url(), here), language=None)


def _base_url() -> str:
    try:
        return str(st.context.url).split("?")[0]
    except AttributeError:  # older Streamlit
        return ""


def _timeline(store: Store, snap: Snapshot, analysis: Analysis, state: ViewState, go: Go,
              dups: pd.DataFrame, key: str | None, group: Group | None) -> None:
    raw = st.toggle("Raw source clocks (off: clock-aligned)", value=state.clock == "raw")
    if raw != (state.clock == "raw"):
        go(dataclasses.replace(state, clock="raw" if raw else "aligned"))
    window = (state.t0, state.t1) if state.t0 is not None and state.t1 is not None else None
    fig = _timeline_figure(snap.summary.id, analysis, group.group_id if group else None,
                           not raw, window)
    st.plotly_chart(fig, width="stretch", key="timeline")
    st.caption(f"{len(analysis.timeline):,} rows; past {TIMELINE_POINTS:,} points the lanes that "
               "do not fit are drawn as counts per time bucket (attempts are always points). "
               "Narrow the window with t0/t1 in the URL to see every row.")
    for o in analysis.offsets:
        st.caption(f"Clock: {md_text(o.source)} runs {o.seconds:+.3f} s off the spans "
                   f"({o.pairs} pairs: {o.basis}).")


TIMELINE_POINTS = 5_000  # individual WebGL points per view; the rest is aggregated


@st.cache_resource(max_entries=64)
def _timeline_figure(inv_id: str, _analysis: Analysis, group: str | None, aligned: bool,
                     window: tuple[pd.Timestamp, pd.Timestamp] | None) -> object:
    # a snapshot never changes, so its figures are cached by id and view
    return timeline_figure(_analysis, selected_group=group, aligned=aligned, window=window,
                           max_points=TIMELINE_POINTS)


def _gaps(store: Store, snap: Snapshot, analysis: Analysis, state: ViewState, go: Go,
          dups: pd.DataFrame, key: str | None, group: Group | None) -> None:
    if dups.empty:
        st.info("No logical call executed more than once.")
        return
    event = st.plotly_chart(gaps_figure(dups, selected=key), width="stretch",
                            key="gaps", on_select="rerun", selection_mode="points")
    selection: dict[str, Any] = dict(event or {}).get("selection") or {}  # type: ignore[call-overload]
    points = selection.get("points", [])
    for point in points:
        picked = point.get("customdata")
        picked = picked[0] if isinstance(picked, list) else picked
        if isinstance(picked, str) and picked != key:
            go(dataclasses.replace(state, dup=picked, group=picked.split(":")[0],
                                   tab="verdict"))
    st.caption("Click a point to open its verdict.")
    _verdict_summary(dups, key)


def _verdict_summary(dups: pd.DataFrame, key: str | None) -> None:
    if key is None:
        return
    row = dups[dups["key"] == key].iloc[0]
    st.markdown(f"**Selected:** {md_text(str(row['second']))} — **{row['layer']}** "
                f"(confidence {row['confidence']:.2f}, gap {fmt_gap(row['gap_seconds'])})")


def _verdict(store: Store, snap: Snapshot, analysis: Analysis, state: ViewState, go: Go,
             dups: pd.DataFrame, key: str | None, group: Group | None) -> None:
    if group is None or key is None:
        st.success("No logical call executed more than once: nothing to explain.")
        return
    second = key.split(":", 1)[1]
    dup = next(d for d in group.duplicates if d.second == second)
    override = _override_for(snap, group.group_id, f"{dup.first}>{dup.second}")
    st.header(f"{dup.layer.value}: {LAYERS[dup.layer].plain}", anchor="verdict")
    cols = st.columns(4)
    cols[0].metric("Confidence", f"{dup.confidence:.2f}")
    cols[1].metric("Gap", fmt_gap(dup.gap_seconds))
    cols[2].metric("Band", dup.band.value.replace("_", " "))
    cols[3].metric("Second effect", "no (protected)" if dup.protected else "yes")
    if override is not None:
        verb = "confirmed" if override.confirmed else f"overridden to **{override.layer}**"
        st.info(f"Investigator {md_text(override.author)} {verb}: "
                f"{md_text(override.reason)}")
    st.subheader("Evidence")
    for item in dup.evidence:
        st.markdown(f"- {md_text(item)}")
    st.caption(md_text(f"Attempts: {dup.first} then {dup.second} in group {group.group_id} "
                       f"(thread {group.thread_id}, tool {group.tool_name})."))
    if group.findings:
        st.subheader("Findings")
        for f in group.findings:
            st.markdown(f"- **{f.code}** — {md_text(f.detail)}  \n  *Fix:* {md_text(f.fix)}")
    st.subheader("Fix")
    st.markdown(md_text(dup.fix))
    if LAYERS[dup.layer].code:
        st.code(LAYERS[dup.layer].code, language="python")
    st.subheader("The two attempts side by side")
    st.dataframe(attempt_comparison(analysis, group.group_id, dup.first, dup.second),
                 width="stretch")


def _override_for(snap: Snapshot, group_id: str, duplicate: str) -> Override | None:
    return effective_overrides(snap.overrides).get((group_id, duplicate))


def _notes(store: Store, snap: Snapshot, analysis: Analysis, state: ViewState, go: Go,
           dups: pd.DataFrame, key: str | None, group: Group | None) -> None:
    for note in sorted(snap.notes, key=lambda n: n.at):
        st.markdown(f"**{md_text(note.author)}** · {note.at:%Y-%m-%d %H:%M} UTC")
        st.text(visible(note.text))  # plain text: notes never render as markup
    with st.form("note", clear_on_submit=True):
        author = st.text_input("Your name")
        text = st.text_area("Note")
        if st.form_submit_button("Add note") and text.strip():
            store.add_note(snap.summary.id, Note(author=author or "anonymous", text=text,
                                                 at=datetime.now(UTC),
                                                 group_id=group.group_id if group else None))
            go(state)
    if group is None or key is None:
        return
    second = key.split(":", 1)[1]
    dup = next(d for d in group.duplicates if d.second == second)
    with st.form("override"):
        st.markdown(f"Confirm or override the verdict on {md_text(dup.second)} "
                    f"(twice says **{dup.layer.value}**)")
        layers = [x.value for x in Layer]
        layer = st.selectbox("Layer", layers, index=layers.index(dup.layer.value))
        reason = st.text_input("Reason")
        author = st.text_input("Your name", key="override_author")
        if st.form_submit_button("Save verdict") and reason.strip():
            store.add_override(snap.summary.id, Override(
                group_id=group.group_id, duplicate=f"{dup.first}>{dup.second}", layer=layer,
                reason=reason, author=author or "anonymous", at=datetime.now(UTC),
                confirmed=layer == dup.layer.value))
            go(state)


def _export(store: Store, snap: Snapshot, analysis: Analysis, state: ViewState, go: Go,
            dups: pd.DataFrame, key: str | None, group: Group | None) -> None:
    inv = snap.summary.id
    st.download_button("Analysis JSON (the `twice analyze --format json` contract)",
                       orjson.dumps(to_contract(analysis), option=orjson.OPT_INDENT_2),
                       file_name=f"twice-{inv}.json", mime="application/json")
    # the page's snapshot may come without its timeline (the app keeps it analysed in memory):
    # the folder holds the timeline as saved
    full = snap if len(snap.timeline) else store.get(inv) or snap
    st.download_button("Incident folder (zip: `twice analyze` reads it back)",
                       incident_zip(full, analysis), file_name=f"twice-{inv}.zip",
                       mime="application/zip")
    st.download_button("Self-contained HTML report", build_report(snap, analysis),
                       file_name=f"twice-{inv}.html", mime="text/html")


def incident_zip(snap: Snapshot, analysis: Analysis) -> bytes:
    """The investigation as a re-loadable incident folder: the normalised timeline (twice's own
    Parquet format, which outlives the provider's 30-day event retention), the analysis, the
    notes and a README."""
    import io
    import zipfile

    s = snap.summary
    folder = f"twice-{s.id}"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{folder}/timeline.parquet", timeline_file.to_bytes(snap.timeline))
        z.writestr(f"{folder}/analysis.json",
                   orjson.dumps(to_contract(analysis), option=orjson.OPT_INDENT_2))
        z.writestr(f"{folder}/notes.json", orjson.dumps(
            {"notes": [dataclasses.asdict(n) for n in snap.notes],
             "overrides": [dataclasses.asdict(o) for o in snap.overrides]},
            option=orjson.OPT_INDENT_2))
        z.writestr(f"{folder}/README.md",
                   f"# {s.title}\n\nExported from twice (investigation `{s.id}`). Re-run with "
                   f"`twice analyze {folder}/`: it reads timeline.parquet.\n")
    return buf.getvalue()


def _upload_form(store: Store, go: Go) -> None:
    files = st.file_uploader("Evidence files", accept_multiple_files=True,
                             help="Stripe events, stripe logs tail, request logs, SqliteSaver "
                                  "files, OTLP/Jaeger spans, SQS messages, twice timelines")
    title = st.text_input("Title", key="upload_title")
    if not st.button("Analyse files", disabled=not files):
        return
    with tempfile.TemporaryDirectory() as tmp, st.spinner("Loading evidence…"):
        for f in files or []:
            (Path(tmp) / Path(f.name).name).write_bytes(f.getvalue())
        found, skipped = registry.scan_folder(Path(tmp))
        try:
            if not found:
                raise SourceError("upload", "none of these files is a format twice reads")
            loaded = registry.load_all([(n, p, {}) for n, p in found])
        except SourceError as exc:
            st.error(md_text(str(exc).replace(tmp + "/", "")))
            return
    inv = store.create(title or "Uploaded evidence", loaded.rows,
                       sources=sorted({n for n, _ in found}),
                       warnings=[{"source": w.source.replace(tmp + "/", ""), "detail": w.detail}
                                 for w in loaded.warnings])
    go(ViewState(inv=inv, tab="verdict"))


# The live form's secrets (the Stripe key, a DSN with a password) are taken out of their fields
# when the form is sent, so they live for one request in this process and are never echoed back
# to the page, kept in the session, saved or put in a link.
_SECRET_FIELDS = {"live_stripe_key": "_live_stripe_key", "live_checkpoints": "_live_checkpoints"}
LIVE_ERRORS = "live investigation"  # the source named by a saved partial run's errors
STRIPE_BASE_URL_ENV = "TWICE_STRIPE_BASE_URL"  # a Stripe-compatible server (the lab, a proxy)


def _take_secrets() -> None:
    for field, once in _SECRET_FIELDS.items():
        st.session_state[once] = st.session_state.get(field, "")
        st.session_state[field] = ""


def _live_form(store: Store, go: Go) -> None:
    import os

    from twice.connectors.live.investigate import Request, investigate

    with st.form("live"):
        subject = st.text_input("Customer, payment intent or charge id", placeholder="cus_...")
        around = st.text_input("Around (UTC)", placeholder="2024-06-03T14:21Z")
        hours = st.number_input("Window (hours)", min_value=0.25, max_value=48.0, value=2.0)
        st.text_input("Stripe restricted key (used for this request only, never saved)",
                      type="password", key="live_stripe_key")
        st.text_input("Checkpoints DSN or SqliteSaver path (optional)", type="password",
                      key="live_checkpoints")
        traces = st.text_input("Trace backend (optional)",
                               placeholder="jaeger+http://host:16686")
        sent = st.form_submit_button("Investigate", on_click=_take_secrets)
    key = str(st.session_state.pop(_SECRET_FIELDS["live_stripe_key"], "") or "")
    checkpoints = str(st.session_state.pop(_SECRET_FIELDS["live_checkpoints"], "") or "")
    if not sent:
        return
    try:
        when = pd.Timestamp(around)
        when = when.tz_localize("UTC") if when.tzinfo is None else when.tz_convert("UTC")
    except ValueError:
        st.error("Around: an ISO-8601 time like 2024-06-03T14:21Z")
        return
    req = Request(subject=subject.strip(), around=when.to_pydatetime(),
                  window=timedelta(hours=float(hours)), stripe_key=key,
                  checkpoints=checkpoints or None, traces=traces or None,
                  stripe_base_url=os.environ.get(STRIPE_BASE_URL_ENV) or None)
    with st.status("Pulling evidence…") as status:
        result = investigate(req, progress=lambda message: status.write(md_text(message)))
    for error in result.errors:
        st.error(f"Partial: {md_text(error)}")
    if result.rows.empty:
        return
    # the failed sources are saved with it: the page moves on, and a shared link must say so too
    failed = [{"source": LIVE_ERRORS, "detail": f"Partial: {e}"} for e in result.errors]
    inv = store.create(f"Live: {req.subject} around {when:%Y-%m-%d %H:%M}", result.rows,
                       sources=sorted(set(result.rows["source"].dropna())),
                       warnings=[*result.warnings, *failed],
                       tags=["live", *(["partial"] if result.partial else [])])
    go(ViewState(inv=inv, tab="verdict"))
