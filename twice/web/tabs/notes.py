"""Notes: notes and confirmed / overridden verdicts, saved with the investigation."""

from __future__ import annotations

from datetime import UTC, datetime

import streamlit as st

from twice.layers import Layer
from twice.store import Note, Override
from twice.web.nav import go
from twice.web.report_html import visible
from twice.web.tabs.context import Investigation
from twice.web.text import md_text


def render(inv: Investigation) -> None:
    group, dup = inv.group, inv.duplicate
    for note in sorted(inv.snap.notes, key=lambda n: n.at):
        st.markdown(f"**{md_text(note.author)}** · {note.at:%Y-%m-%d %H:%M} UTC")
        st.text(visible(note.text))  # plain text: notes never render as markup
    with st.form("note", clear_on_submit=True):
        author = st.text_input("Your name")
        text = st.text_area("Note")
        if st.form_submit_button("Add note") and text.strip():
            inv.store.add_note(inv.inv_id, Note(author=author or "anonymous", text=text,
                                                at=datetime.now(UTC),
                                                group_id=group.group_id if group else None))
            go(inv.state)
    if group is None or dup is None:
        return
    with st.form("override"):
        st.markdown(f"Confirm or override the verdict on {md_text(dup.second)} "
                    f"(twice says **{dup.layer.value}**)")
        layers = [x.value for x in Layer]
        layer = st.selectbox("Layer", layers, index=layers.index(dup.layer.value))
        reason = st.text_input("Reason")
        author = st.text_input("Your name", key="override_author")
        if st.form_submit_button("Save verdict") and reason.strip():
            inv.store.add_override(inv.inv_id, Override(
                group_id=group.group_id, duplicate=f"{dup.first}>{dup.second}", layer=layer,
                reason=reason, author=author or "anonymous", at=datetime.now(UTC),
                confirmed=layer == dup.layer.value))
            go(inv.state)
