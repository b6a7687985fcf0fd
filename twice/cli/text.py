"""Text from the evidence on a terminal: shown, never obeyed.

A terminal obeys what it is sent: ESC sequences (an OSC 52 clipboard write, a screen clear, a
colour), C1 controls and bidi overrides. Evidence text goes out with those characters named
(`twice.formats.visible`: `<U+001B>`), and to rich only as `Text`, so a `[link=...]` or an
`:emoji:` in an id is not read as rich markup either.
"""

from __future__ import annotations

from rich.text import Text

from twice.formats import visible


def shown(value: object) -> str:
    """Evidence (or anything that quotes it) as a string safe to print."""
    return visible(str(value))


def plain(value: object, style: str = "") -> Text:
    """Evidence as rich Text: no markup, no emoji codes, no highlighting, controls named."""
    return Text(shown(value), style=style)
