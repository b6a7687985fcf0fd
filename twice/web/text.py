"""Text from evidence or users, shown inside the page's markdown."""

from __future__ import annotations

import re

import pandas as pd

from twice.formats import TOOL_SHOWN, amount_text, one_line, visible
from twice.store import DuplicateRow
from twice.verdict import fmt_gap

# Markdown's punctuation and `$` (Streamlit renders $...$ as math): escaped, so evidence text
# is shown as typed (`:red[...]` directives need the escaped `[`).
_MARKUP = frozenset("\\`*_{}[]()<>#+-.!|~$")


# Streamlit's markdown links `www.` names and `user@host` addresses, and turns `:skull:` and
# `:material/warning:` into an emoji or an icon, in the text it has already unescaped, so a
# backslash does not stop them. A word joiner (U+2060: invisible, no line break) inside each
# pattern does: after `www`, before `@`, after the `:` of a `://` or one that opens a code.
_JOINER = "\u2060"
_AUTOLINKED = re.compile(r"(?i:(?<=www)(?=\\?\.))|(?=@)|(?<=:)(?=//|[\w+/\\-]+:)")


def md_text(text: str) -> str:
    """Text from evidence or users shown inside markdown: no markup, no links (written or
    automatic), no emoji or icon codes, no math, one line (a newline would end the list item
    or link it sits in)."""
    flat = visible(text.replace("\r\n", " ").replace("\n", " ").replace("\t", " "))
    escaped = "".join("\\" + c if c in _MARKUP else c for c in flat)
    return _AUTOLINKED.sub(_JOINER, escaped)


def tool_words(name: object) -> str:
    """A tool call's name as a duplicate's label shows it: visible characters, one line, at most
    `TOOL_SHOWN` characters (longer ones end in an ellipsis); "" when the evidence names none
    (provider-only evidence), so the label leaves the part out rather than saying "unknown"."""
    if name is None or (isinstance(name, float) and pd.isna(name)) or name is pd.NA:
        return ""
    return one_line(visible(str(name)), TOOL_SHOWN)


def duplicate_words(d: DuplicateRow, *, layer: bool = True) -> str:
    """A saved duplicate named in words, as markdown: customer · amount · tool · layer (bold) ·
    gap (issue 20), never by its key. A tool the evidence names none of (or that was saved
    before twice kept it) is left out; `layer=False` where a heading says it already."""
    amount = amount_text(d.amount, d.currency) or "no amount"
    parts = [md_text(d.customer or "no customer"), md_text(amount)]
    if tool := tool_words(d.tool):
        parts.append(md_text(tool))
    if layer:
        parts.append(f"**{md_text(d.layer)}**")
    parts.append(f"gap {fmt_gap(d.gap_seconds)}")
    return " · ".join(parts)


def plural(n: int, noun: str) -> str:
    """`1 group`, `2 groups`, `0 groups`."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


# A cell a spreadsheet would run as a formula when the grid's "Download as CSV" is opened:
# shown (and so downloaded) with a leading `'`, the mark spreadsheets read as "this is text".
_FORMULA_START = tuple("=+-@\t\r\uff1d\uff0b\uff0d\uff20")


def shown_cell(value: str) -> str:
    """A text cell as a grid shows it: controls and bidi by name (a U+202E would reorder the
    cell), and a formula-like start (`=HYPERLINK(...)`, `+`, `-`, `@`) behind a `'`."""
    cell = visible(value)
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


def shown_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as displayed in a grid, and as its toolbar downloads it as CSV: every text cell
    through `shown_cell`. The frame given is not changed; numbers and times stay as they are."""
    shown = frame.copy()
    for col in frame.select_dtypes(include=["object", "string"]).columns:
        shown[col] = frame[col].map(lambda v: shown_cell(v) if isinstance(v, str) else v)
    return shown
