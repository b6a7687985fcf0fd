"""Export: the analysis JSON, the incident folder (zip) and a self-contained HTML report.

Each file is made when its button is clicked, not when the tab is drawn (`data` is a
callable: Streamlit runs it on the click and serves the bytes once at a fresh /media URL).
Streamlit serves /media to anyone who has a URL, without the gate; so until a session that
passed the gate clicks, no export exists on the server to be fetched, the page carries no URL
of one, and a generated file is dropped by Streamlit's own cleanup of unused media (the next
script runs after the click, and the end of the session).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import streamlit as st

from twice.report import to_contract
from twice.web.export import incident_zip
from twice.web.report_html import build_report
from twice.web.tabs.context import Investigation


def render(inv: Investigation) -> None:
    inv_id = inv.inv_id
    for label, make, suffix, mime in _exports(inv):
        # on_click="ignore": the click only downloads (a rerun would race the file's making)
        st.download_button(label, make, file_name=f"twice-{inv_id}.{suffix}", mime=mime,
                           on_click="ignore")


def _exports(inv: Investigation) -> list[tuple[str, Callable[[], bytes], str, str]]:
    snap, analysis, store, inv_id = inv.snap, inv.analysis, inv.store, inv.inv_id

    def analysis_json() -> bytes:
        return orjson.dumps(to_contract(analysis), option=orjson.OPT_INDENT_2)

    def folder_zip() -> bytes:
        # the page's snapshot comes without its timeline (the app keeps it analysed in
        # memory): the folder holds the timeline as saved
        full = snap if len(snap.timeline) else store.get(inv_id) or snap
        return incident_zip(full, analysis)

    def report_html() -> bytes:
        return build_report(snap, analysis).encode()

    return [
        ("Analysis JSON (the `twice analyze --format json` contract)", analysis_json, "json",
         "application/json"),
        ("Incident folder (zip: `twice analyze` reads it back)", folder_zip, "zip",
         "application/zip"),
        ("Self-contained HTML report", report_html, "html", "text/html"),
    ]
