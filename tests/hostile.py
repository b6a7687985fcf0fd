"""Hostile evidence the rendering tests share: text that would act on a terminal, a page or a
chart if it were obeyed, and an honest analysis (a verdict with an alternative, a thin clock
offset) whose evidence carries it.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, quote_plus

import pandas as pd

from twice.connectors import registry
from twice.engine import Analysis, analyze
from twice.layers import Layer

SAMPLES = Path(__file__).resolve().parents[1] / "sample_data"

OSC52 = "\x1b]52;c;aGVsbG8=\x1b\\"  # write "hello" to the clipboard
CLEAR = "\x1b[2J"  # clear the screen
REQUEST = "\x1b[31m\x00\u202e\x9b2J"  # a colour, NUL, a right-to-left override, 8-bit CSI
RICH_LINK = "[link=https://evil.example/]click[/link]"  # rich markup for a terminal hyperlink
# plotly draws a live link and a 400px span from these
EVIL_TOOL = 'charge<a href="https://evil.example/">evil</a><span style="font-size:400px">'
# what must never reach a terminal from the evidence (twice's own styling is ESC [ ... m)
NEVER_ON_A_TERMINAL = ["\x1b]52", "\x1b[2J", "\x1b[31m", "\x00", "\u202e", "\x9b", "\x1b]8;"]


# Planted secrets with every character an encoder changes: HTML's `&<>"'`, a URL's `%+/ ?#@:`,
# JSON's `\\` and `"`, a character past the BMP (a JSON surrogate pair), one of Latin-1.
SPECIAL_SECRETS = ("Pw&<\"' X9q", "a%2F+b c&amp;#?@:/x7", "ü€😀\\\"/tok-9Z", "x<y>&z;'Q\t1")
# how servers echo a secret back: each is one of the forms `redact` must mask
ENCODINGS: dict[str, Callable[[str], str]] = {
    "plain": lambda s: s,
    "html": lambda s: html.escape(s, quote=True),  # &amp; &lt; &quot; &#x27;
    "html-39": lambda s: html.escape(s, quote=True).replace("&#x27;", "&#39;").replace(
        "&quot;", "&#34;"),  # as Go's html/template and markupsafe write them
    "percent": lambda s: quote(s, safe=""),
    "form": lambda s: quote_plus(s),  # application/x-www-form-urlencoded
    "json": lambda s: json.dumps(s)[1:-1],  # \uXXXX past ASCII
    "json-raw": lambda s: json.dumps(s, ensure_ascii=False)[1:-1],
    "python": lambda s: repr(s)[1:-1],
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "base64-url": lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("="),
}


def encoded_forms(secret: str) -> list[str]:
    """Every form of `secret` in ENCODINGS, as a scan looks for them."""
    return list(dict.fromkeys(encode(secret) for encode in ENCODINGS.values()))


def load_sample(name: str) -> pd.DataFrame:
    found, _ = registry.scan_folder(SAMPLES / name)
    return registry.load_all([(n, p, {}) for n, p in found]).rows


def honest_timeline(worker_suffix: str = CLEAR, tool_name: str | None = None) -> pd.DataFrame:
    """The SDK retry sample reduced to the duplicate's customer and thread, without its HTTP
    client spans: an SDK retry or a proxy's resend (both named), on a provider clock offset that
    two records support (thin), measured against a worker whose name ends in `worker_suffix`.
    `tool_name`, when given, replaces the tool's name everywhere."""
    rows = load_sample("sdk_retry")
    rows = rows[rows["kind"] != "http_span"]
    group = analyze(rows).groups[0]
    customer = group.attempts["subject"].iloc[0]
    rows = rows[(rows["subject"] == customer) | (rows["thread_id"] == group.thread_id)].copy()
    rows["worker"] = (rows["worker"] + worker_suffix).astype("string")
    if tool_name is not None:
        rows["tool_name"] = rows["tool_name"].where(rows["tool_name"].isna(),
                                                    tool_name).astype("string")
    return rows.reset_index(drop=True)


def honest_analysis(worker_suffix: str = CLEAR, tool_name: str | None = None) -> Analysis:
    analysis = analyze(honest_timeline(worker_suffix, tool_name))
    (dup,) = analysis.groups[0].duplicates
    assert dup.layer is Layer.SDK_RETRY
    assert [a.layer for a in dup.alternatives] == [Layer.GATEWAY_RETRY]
    (offset,) = analysis.offsets
    assert offset.thin and offset.reference == f"spans of worker-a{worker_suffix}"
    return analysis
