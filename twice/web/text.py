"""Text from evidence or users, shown inside the page's markdown."""

from __future__ import annotations

import pandas as pd

from twice.formats import visible

# Markdown's punctuation and `$` (Streamlit renders $...$ as math): escaped, so evidence text
# is shown as typed (`:red[...]` directives need the escaped `[`).
_MARKUP = frozenset("\\`*_{}[]()<>#+-.!|~$")


def md_text(text: str) -> str:
    """Text from evidence or users shown inside markdown: no markup, no links, no math, one line
    (a newline would end the list item or link it sits in)."""
    flat = visible(text.replace("\r\n", " ").replace("\n", " ").replace("\t", " "))
    return "".join("\\" + c if c in _MARKUP else c for c in flat)


def shown_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as displayed in a grid: every text cell through `visible`, so a control or bidi
    character in an id, a title or a source is shown as its code point, never obeyed (a U+202E
    would reorder the cell). The frame given is not changed; numbers and times stay as they are."""
    shown = frame.copy()
    for col in frame.select_dtypes(include=["object", "string"]).columns:
        shown[col] = frame[col].map(lambda v: visible(v) if isinstance(v, str) else v)
    return shown
