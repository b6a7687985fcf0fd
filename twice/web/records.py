"""Raw records: any record of the timeline as its source gave it (its file and line, the JSON,
a copy button, links out), and which records an evidence line stands on.

An evidence line names the records it stands on by their ids: a span id, a request id, a tool
call id, a trace or a thread (`twice.verdict` writes them into the line so an investigator can
find them). `cited_records` reads those ids back: a narrow id (one record, or a request's few)
is looked up in the whole timeline, so the queue consumer's span or a request outside the call
is found too; a broad id (a trace, a thread) only among the call's own records, so "one trace
(T)" does not list every span of T. A line that names no record (the gap, the keys, the
provider's replay) is about the two attempts, and links to their provider records.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd
import streamlit as st

from twice.engine import Analysis, Group
from twice.formats import visible
from twice.timeline import Kind
from twice.verdict import Duplicate
from twice.web.figures import call_records, record_labels, record_text
from twice.web.links_out import LinkOut, links_out, livemodes, record_ids, trace_template
from twice.web.text import md_text, plural

NARROW_IDS = ("span_id", "request_id", "event_id", "tool_call_id", "object_id",
              "checkpoint_id", "message_id")
BROAD_IDS = ("trace_id", "thread_id")
MIN_ID = 6  # shorter words of a line ("step", "1", "2.1") are never taken for an id
PROVIDER_KINDS = (Kind.PROVIDER_EVENT.value, Kind.PROVIDER_REQUEST.value)
RECORDS_PER_LINE = 8  # the nearest in time to the call's first attempt are shown
_WORD = re.compile(r"[\w.:/-]+")


def line_ids(line: str) -> set[str]:
    """The words of an evidence line that could be ids (a sentence's `.` or `:` after one is
    not part of it)."""
    words = (w.rstrip(".:") for w in _WORD.findall(line))
    return {w for w in words if len(w) >= MIN_ID}


def cited_records(analysis: Analysis, group: Group, dup: Duplicate,
                  lines: tuple[str, ...]) -> list[pd.DataFrame]:
    """For each evidence line, the timeline rows it stands on, oldest first and labelled as
    `call_records` labels them: the rows it names by a narrow id, else the call's agent-side
    rows it names by a broad one, else the two attempts' provider requests."""
    tl = analysis.timeline
    call = call_records(analysis, group)
    words = [line_ids(line) for line in lines]
    every = set().union(*words)
    narrow = tl[_any_id(tl, NARROW_IDS, every)]
    agent = call[~call["kind"].isin(PROVIDER_KINDS)]
    broad = agent[_any_id(agent, BROAD_IDS, every)]
    attempts = _attempt_rows(call, group, dup)
    out = []
    for ids in words:
        rows = narrow[_any_id(narrow, NARROW_IDS, ids)]
        if rows.empty:
            rows = broad[_any_id(broad, BROAD_IDS, ids)]
        out.append(_labelled(rows if len(rows) else attempts))
    return out


def _any_id(frame: pd.DataFrame, columns: tuple[str, ...], ids: set[str]) -> pd.Series:
    hit = pd.Series(False, index=frame.index)
    for col in columns:
        if ids:
            hit |= frame[col].isin(ids).fillna(False).astype(bool)
    return hit


def _attempt_rows(call: pd.DataFrame, group: Group, dup: Duplicate) -> pd.DataFrame:
    """The provider requests of the duplicate's two attempts, else their other provider
    records (an effect with no request: a renewal's events), among the call's records."""
    requests, objects = set(), set()
    for attempt in (dup.first, dup.second):
        record = group.record(attempt)
        if isinstance(record.get("request_id"), str):
            requests.add(record["request_id"])
        if isinstance(record.get("object_id"), str):
            objects.add(record["object_id"])
    provider = call[call["kind"].isin(PROVIDER_KINDS)]
    mine = provider[(provider["request_id"].isin(requests) | provider["object_id"].isin(objects))
                    .fillna(False).astype(bool)]
    asked = mine[mine["kind"] == Kind.PROVIDER_REQUEST.value]
    return asked if len(asked) else mine


def _labelled(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows from the whole timeline and from the call's records, labelled alike."""
    rows = rows.drop(columns="label", errors="ignore").sort_values("at", kind="stable")
    return rows.assign(label=record_labels(rows))


def show_record(analysis: Analysis, row: pd.Series) -> None:
    """One record: where its source wrote it, the JSON (with a copy button), links out."""
    origin = row["origin"] if isinstance(row["origin"], str) else row["source"]
    st.caption(f"From {md_text(str(origin))} "
               f"({md_text(str(row['source']))}); the copy button is at the block's corner.")
    st.code(record_text(row), language="json")
    ids, traces = record_ids({str(k): v for k, v in row.items()})
    show_links(links_out(ids, traces, template=trace_template(),
                         modes=livemodes(analysis.timeline, ids)))


def show_links(links: list[LinkOut]) -> None:
    if links:  # checked ids in fixed URLs (twice.web.links_out); labels escaped all the same
        st.markdown("Open: " + " · ".join(f"[{md_text(x.label)}]({x.url})" for x in links))


def evidence_lines(analysis: Analysis, group: Group, dup: Duplicate) -> None:
    """Each evidence line, and under it the records it stands on (a popover: the records as
    their sources wrote them)."""
    for i, (line, rows) in enumerate(zip(dup.evidence, cited_records(
            analysis, group, dup, dup.evidence), strict=True)):
        text, button = st.columns([6, 1], vertical_alignment="center", gap="small")
        text.markdown(f"- {md_text(line)}")
        if rows.empty:
            continue
        shown = rows.head(RECORDS_PER_LINE)
        with button.popover(plural(len(rows), "record"), type="tertiary",
                            key=f"evidence:{dup.second}:{i}"):
            if len(rows) > len(shown):
                st.caption(f"The first {len(shown)} of {len(rows)}, oldest first.")
            show_records(analysis, shown)


def show_records(analysis: Analysis, rows: pd.DataFrame) -> None:
    """Each record under its label (`record_labels`), as its source wrote it."""
    for _, row in rows.iterrows():
        st.markdown(f"**{md_text(visible(str(row['label'])))}**")
        show_record(analysis, row)


def point_records(analysis: Analysis, group: Group | None, points: Sequence[object]
                  ) -> pd.DataFrame:
    """The timeline rows of points clicked on the timeline, from their customdata: a row's
    index, or an attempt's id (its provider requests)."""
    tl = analysis.timeline
    rows, attempts = [], []
    for data in points:
        if isinstance(data, list):  # plotly sends a point's customdata as a list at times
            data = data[0] if data else None
        if isinstance(data, int) and not isinstance(data, bool) and data in tl.index:
            rows.append(data)
        elif isinstance(data, str):
            attempts.append(data)
    picked = tl.loc[rows]
    if group is not None and attempts:
        named = (group.record(a).get("request_id") for a in attempts)
        requests = {r for r in named if isinstance(r, str)}
        asked = tl[(tl["kind"] == Kind.PROVIDER_REQUEST.value)
                   & tl["request_id"].isin(requests).fillna(False).astype(bool)]
        picked = pd.concat([picked, asked])
    return _labelled(picked[~picked.index.duplicated()])
