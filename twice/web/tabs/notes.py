"""Notes: notes and confirmed / overridden verdicts, saved with the investigation.

A note is saved by the form's button callback, before the page is drawn again: saved, its text
is cleared; not saved (the store is read-only or unreachable), the text stays in the box with a
plain message, so the user can try again.
"""

from __future__ import annotations

from datetime import UTC, datetime

import streamlit as st

from twice.layers import Layer
from twice.store import Note, Override, Store, StoreError
from twice.web.problems import store_problem
from twice.web.report_html import visible
from twice.web.tabs.context import Investigation
from twice.web.text import md_text

_PROBLEM = "note_problem"  # session_state: why the last note was not saved


def _keys(inv_id: str) -> tuple[str, str]:
    """The note form's fields, per investigation (a draft stays with its investigation)."""
    return f"note_text:{inv_id}", f"note_author:{inv_id}"


def _save_note(store: Store, inv_id: str, group_id: str | None) -> None:
    text_key, author_key = _keys(inv_id)
    text = str(st.session_state.get(text_key) or "")
    if not text.strip():
        return
    author = str(st.session_state.get(author_key) or "") or "anonymous"
    try:
        store.add_note(inv_id, Note(author=author, text=text, at=datetime.now(UTC),
                                    group_id=group_id))
    except StoreError as exc:
        st.session_state[_PROBLEM] = (store_problem(exc, "The note was not saved")
                                      + " It is still in the box: try again later.")
        return
    st.session_state[text_key] = ""


def render(inv: Investigation) -> None:
    group, dup = inv.group, inv.duplicate
    for note in sorted(inv.snap.notes, key=lambda n: n.at):
        st.markdown(f"**{md_text(note.author)}** · {note.at:%Y-%m-%d %H:%M} UTC")
        st.text(visible(note.text))  # plain text: notes never render as markup
    text_key, author_key = _keys(inv.inv_id)
    with st.form("note"):
        st.text_input("Your name", key=author_key)
        st.text_area("Note", key=text_key)
        st.form_submit_button("Add note", on_click=_save_note,
                              args=(inv.store, inv.inv_id, group.group_id if group else None))
    problem = st.session_state.pop(_PROBLEM, None)
    if isinstance(problem, str):
        st.error(problem)
    if group is None or dup is None:
        return
    layers = [x.value for x in Layer]
    layer_key, reason_key, author_key = _override_keys(inv.inv_id, inv.key)
    with st.form("override"):
        st.markdown(f"Confirm or override the verdict on {md_text(dup.second)} "
                    f"(twice says **{dup.layer.value}**)")
        st.selectbox("Layer", layers, index=layers.index(dup.layer.value), key=layer_key)
        st.text_input("Reason", key=reason_key)
        st.text_input("Your name", key=author_key)
        st.form_submit_button("Save verdict", on_click=_save_override,
                              args=(inv.store, inv.inv_id, group.group_id,
                                    f"{dup.first}>{dup.second}", dup.layer.value,
                                    (layer_key, reason_key, author_key)))
    said = st.session_state.pop(_OVERRIDE_SAID, None)
    if isinstance(said, tuple) and len(said) == 2:
        (st.success if said[0] == "saved" else st.error)(said[1])


_OVERRIDE_SAID = "override_said"  # session_state: ("saved" | "problem", what to say)


def _override_keys(inv_id: str, dup_key: str | None) -> tuple[str, str, str]:
    """The verdict form's fields, per duplicate (a half-filled form stays with its duplicate)."""
    return (f"override_layer:{inv_id}:{dup_key}", f"override_reason:{inv_id}:{dup_key}",
            f"override_author:{inv_id}")


def _save_override(store: Store, inv_id: str, group_id: str, duplicate: str, said: str,
                   keys: tuple[str, str, str]) -> None:
    """The verdict form's button: saved, the form is emptied and says so; not saved (no
    reason, or the store refused), the form keeps what was entered and says why."""
    layer_key, reason_key, author_key = keys
    layer = str(st.session_state.get(layer_key) or said)
    if layer not in {x.value for x in Layer}:  # only the selectbox's options are a layer
        layer = said
    reason = str(st.session_state.get(reason_key) or "")
    author = str(st.session_state.get(author_key) or "") or "anonymous"
    if not reason.strip():
        st.session_state[_OVERRIDE_SAID] = (
            "problem", "The verdict was not saved: give a reason (what you saw that twice "
                       "did not).")
        return
    confirmed = layer == said
    try:
        store.add_override(inv_id, Override(
            group_id=group_id, duplicate=duplicate, layer=layer, reason=reason, author=author,
            at=datetime.now(UTC), confirmed=confirmed))
    except StoreError as exc:
        st.session_state[_OVERRIDE_SAID] = (
            "problem", store_problem(exc, "The verdict was not saved")
            + " The form keeps what you entered: try again later.")
        return
    st.session_state[reason_key] = ""
    st.session_state.pop(layer_key, None)  # back to twice's layer
    verb = "confirmed" if confirmed else f"overridden to **{layer}**"
    st.session_state[_OVERRIDE_SAID] = (
        "saved", f"Saved: {md_text(author)} {verb} the verdict (shown on the Verdict tab, in "
                 "the export and the report).")
