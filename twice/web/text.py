"""Text from evidence or users, shown inside the page's markdown."""

from __future__ import annotations

from twice.formats import visible

# Markdown's punctuation and `$` (Streamlit renders $...$ as math): escaped, so evidence text
# is shown as typed (`:red[...]` directives need the escaped `[`).
_MARKUP = frozenset("\\`*_{}[]()<>#+-.!|~$")


def md_text(text: str) -> str:
    """Text from evidence or users shown inside markdown: no markup, no links, no math, one line
    (a newline would end the list item or link it sits in)."""
    flat = visible(text.replace("\r\n", " ").replace("\n", " ").replace("\t", " "))
    return "".join("\\" + c if c in _MARKUP else c for c in flat)
