"""Text from the evidence on a terminal: shown, never obeyed.

A terminal obeys what it is sent: ESC sequences (an OSC 52 clipboard write, a screen clear, a
colour), C1 controls and bidi overrides. Evidence text goes out with those characters named
(`twice.formats.visible`: `<U+001B>`), and to rich only as `Text`, so a `[link=...]` or an
`:emoji:` in an id is not read as rich markup either.
"""

from __future__ import annotations

import orjson
from rich.text import Text

from twice.formats import INVISIBLE, visible


def shown(value: object) -> str:
    """Evidence (or anything that quotes it) as a string safe to print."""
    return visible(str(value))


def plain(value: object, style: str = "") -> Text:
    """Evidence as rich Text: no markup, no emoji codes, no highlighting, controls named."""
    return Text(shown(value), style=style)


_LINE_BREAKS = str.maketrans({"\n": "<U+000A>", "\r": "<U+000D>", "\t": "<U+0009>",
                              "\u2028": "<U+2028>", "\u2029": "<U+2029>"})


def line(value: object, style: str = "") -> Text:
    """Evidence in one line of a table or a list, as `plain`, with its line breaks and tabs
    named too: a newline in an id would draw a line of its own inside the table."""
    return Text(shown(value).translate(_LINE_BREAKS), style=style)


def json_out(doc: object) -> bytes:
    """A JSON document for stdout, newline-terminated. The text is kept exactly (the contract
    holds the evidence as it was), but C1 controls, DEL and bidi characters are written as `\\u`
    escapes: valid JSON either way, and a terminal shown the raw document obeys none of them
    (orjson already escapes C0; these characters occur only inside strings)."""
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
    return (INVISIBLE.sub(lambda m: f"\\u{ord(m[0]):04x}", text) + "\n").encode()
