"""`twice web`: the web app (`streamlit run twice/web/main.py`); streamlit's own options pass
through, e.g. `twice web --server.port 8601`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click

ENTRY = Path(__file__).resolve().parents[1] / "web" / "main.py"


@click.command("web", add_help_option=False, short_help="the web app on the bundled samples "
               "and saved investigations",
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("streamlit_args", nargs=-1, type=click.UNPROCESSED)
def web_command(streamlit_args: Sequence[str]) -> None:
    """The web app on the bundled samples and saved investigations (streamlit options pass
    through, e.g. --server.port 8601)."""
    os.execvp(sys.executable, [sys.executable, "-m", "streamlit", "run", str(ENTRY),
                               "--browser.gatherUsageStats=false", *streamlit_args])
