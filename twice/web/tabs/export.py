"""Export: the analysis JSON, the incident folder (zip) and a self-contained HTML report."""

from __future__ import annotations

import orjson
import streamlit as st

from twice.report import to_contract
from twice.web.export import incident_zip
from twice.web.report_html import build_report
from twice.web.tabs.context import Investigation


def render(inv: Investigation) -> None:
    inv_id, snap, analysis = inv.inv_id, inv.snap, inv.analysis
    st.download_button("Analysis JSON (the `twice analyze --format json` contract)",
                       orjson.dumps(to_contract(analysis), option=orjson.OPT_INDENT_2),
                       file_name=f"twice-{inv_id}.json", mime="application/json")
    # the page's snapshot comes without its timeline (the app keeps it analysed in memory):
    # the folder holds the timeline as saved
    full = snap if len(snap.timeline) else inv.store.get(inv_id) or snap
    st.download_button("Incident folder (zip: `twice analyze` reads it back)",
                       incident_zip(full, analysis), file_name=f"twice-{inv_id}.zip",
                       mime="application/zip")
    st.download_button("Self-contained HTML report", build_report(snap, analysis),
                       file_name=f"twice-{inv_id}.html", mime="text/html")
