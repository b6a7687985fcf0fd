"""A self-contained HTML report of an investigation, for a postmortem.

Everything that came from the evidence (ids, arguments, notes) is escaped: the report shows it,
never runs it; control and bidi characters are shown as `<U+202E>`, not obeyed. plotly.js is
inlined so the file opens offline, and a Content-Security-Policy lets only the report's own
scripts run (by hash), so text that ever slipped past the escaping still could not execute.

plotly.js is inlined once, as its cartesian bundle (scatter and heatmap: all the report draws;
1.5 MB against the full bundle's 4.8 MB), shipped in `assets/` at the version plotly.py ships.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from html import escape as _escape
from importlib.resources import files

from twice.clocks import THIN_LABEL, THIN_WHY, ClockOffset
from twice.engine import Analysis
from twice.formats import visible
from twice.layers import LAYERS
from twice.store import Snapshot
from twice.verdict import fmt_gap
from twice.web.figures import SVG_MAX_POINTS, duplicates_frame, gaps_figure, timeline_figure

# Evidence text can be one unbroken 5,000-character id: every text wraps anywhere rather than
# widen the page, and a table never grows past it.
STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;
overflow-wrap:anywhere}
h1{font-size:1.6em} .dup{border-left:4px solid #c33;padding:.2em 1em;margin:1em 0}
.protected{border-color:#c90} code{background:#f3f3f3;padding:0 .2em}
pre{white-space:pre-wrap} .alt{color:#8a5a00} .thin{background:#fff3cd;color:#8a5a00;
padding:0 .3em;border-radius:.2em;font-weight:bold}
table{border-collapse:collapse;max-width:100%}
td,th{border:1px solid #ddd;padding:.2em .5em;font-size:.9em;overflow-wrap:anywhere}
"""

_SCRIPT = re.compile(r"<script[^>]*>(.*?)</script>", re.S)


@cache
def plotly_js() -> str:
    """plotly.js's cartesian bundle, as shipped in `assets/`."""
    return files("twice.web").joinpath("assets", "plotly-cartesian.min.js").read_text("utf-8")


def escape(text: str) -> str:
    """Evidence or user text as HTML text: markup escaped, controls and bidi shown (`visible`)."""
    return _escape(visible(text))


def _csp(body: str) -> str:
    """A policy that runs exactly the inline scripts plotly wrote, nothing else."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(m.encode()).digest()).decode() + "'"
        for m in dict.fromkeys(_SCRIPT.findall(body))) or "'none'"
    return (f"default-src 'none'; script-src {hashes}; "
            "style-src 'unsafe-inline'; img-src data:; font-src data:")


def _clock(offset: ClockOffset) -> str:
    """One clock offset: how far, against what, its range and support; a thin one flagged."""
    flag = (f" <span class='thin'>{escape(THIN_LABEL)}</span> {escape(THIN_WHY)}"
            if offset.thin else "")
    return escape(offset.describe()) + flag


def build_report(snap: Snapshot, analysis: Analysis) -> str:
    s = snap.summary
    parts = [f"<h1>{escape(s.title)}</h1>",
             f"<p>Investigation <code>{escape(s.id)}</code>, saved "
             f"{s.created_at:%Y-%m-%d %H:%M} UTC; sources: {escape(', '.join(s.sources))}; "
             f"{len(analysis.groups)} logical calls executed more than once.</p>"]
    if analysis.warnings:  # what loading and analysis skipped or doubted, as the CLI says
        parts.append(f"<h2>Warnings ({len(analysis.warnings)})</h2><ul class='warnings'>"
                     + "".join(f"<li><code>{escape(w.source)}</code>: {escape(w.detail)}</li>"
                               for w in analysis.warnings) + "</ul>")
    if analysis.offsets:
        parts.append("<h2>Clocks</h2><ul>" + "".join(
            f"<li>{_clock(o)}</li>" for o in analysis.offsets) + "</ul>")
    dups = duplicates_frame(analysis)
    if len(dups):
        parts.append("<h2>Gaps against the bands</h2>")
        parts.append(gaps_figure(dups, bands=snap.options.bands).to_html(
            full_html=False, include_plotlyjs=False))
    parts.append("<h2>Timeline</h2>")
    # SVG only: the policy below runs no eval, which plotly's WebGL traces need (they would show
    # "WebGL is not supported"); past SVG_MAX_POINTS rows the other rows are counted per bucket
    parts.append(timeline_figure(analysis, max_points=SVG_MAX_POINTS, webgl=False).to_html(
        full_html=False, include_plotlyjs=False))
    for group in analysis.groups:
        parts.append(f"<h2>Group <code>{escape(group.group_id)}</code>: tool "
                     f"{escape(str(group.tool_name))}, thread {escape(str(group.thread_id))}"
                     "</h2>")
        for d in group.duplicates:
            cls = "dup protected" if d.protected else "dup"
            items = "".join(f"<li>{escape(e)}</li>" for e in d.evidence)
            alternatives = "".join(f"<p class='alt'>{escape(a.describe())}</p>"
                                   for a in d.alternatives)
            parts.append(
                f"<div class='{cls}'><h3>{escape(d.layer.value)}: "
                f"{escape(LAYERS[d.layer].plain)}</h3><p>{escape(d.first)} → "
                f"{escape(d.second)}, gap {fmt_gap(d.gap_seconds)} ({escape(d.band.value)}), "
                f"confidence {d.confidence:.2f}{', protected' if d.protected else ''}</p>"
                f"{alternatives}<ul>{items}</ul><p><b>Fix:</b> {escape(d.fix)}</p></div>")
        if group.findings:
            parts.append("<ul>" + "".join(
                f"<li><b>{escape(f.code)}</b>: {escape(f.detail)}</li>"
                for f in group.findings) + "</ul>")
    if snap.notes:
        parts.append("<h2>Notes</h2>")
        for n in snap.notes:
            parts.append(f"<p><b>{escape(n.author)}</b> ({n.at:%Y-%m-%d %H:%M} UTC)</p>"
                         f"<pre>{escape(n.text)}</pre>")
    # plotly.js once, before the charts that use it
    body = f"<script>{plotly_js()}</script>\n" + "\n".join(parts)
    return (f"<!doctype html><html><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{_csp(body)}\">"
            f"<title>twice: {escape(s.title)}</title><style>{STYLE}</style></head><body>\n"
            f"{body}\n</body></html>")
