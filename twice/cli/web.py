"""`twice web`: the web app (`streamlit run twice/web/main.py`) with twice's own options;
streamlit's options pass through, e.g. `twice web --server.address 0.0.0.0`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click

ENTRY = Path(__file__).resolve().parents[1] / "web" / "main.py"
# the environment the app reads (twice.store.location, twice.web.auth, twice.web.evidence):
# named here, not imported, so `twice web --help` starts without streamlit
STORE_ENV, TOKEN_ENV, EVIDENCE_DIR_ENV = "TWICE_STORE", "TWICE_ACCESS_TOKEN", "TWICE_EVIDENCE_DIR"

WEB_HELP = f"""The web app on the bundled samples and saved investigations.

\b
Environment (read by the app; the token only from there, never a command line):
  {STORE_ENV}           the investigation store (a SQLite file or postgresql://…; default
                        the app's SQLite file in your data dir)
  {TOKEN_ENV}    a shared secret every page asks for (unset: no token asked)
  {EVIDENCE_DIR_ENV}    the one folder the live form may read evidence from

Any other option is streamlit's and passes through (`--server.address 0.0.0.0`,
`--server.headless true`, ...): `python3 -m streamlit run --help` lists them.
"""


@click.command("web", help=WEB_HELP,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--store", default=None, metavar="URL",
              help=f"investigation store for this run (sets {STORE_ENV})")
@click.option("--evidence-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR", help=f"the folder the live form reads (sets {EVIDENCE_DIR_ENV})")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="port to serve on (streamlit's --server.port; default 8501)")
@click.argument("streamlit_args", nargs=-1, type=click.UNPROCESSED)
def web_command(store: str | None, evidence_dir: Path | None, port: int | None,
                streamlit_args: Sequence[str]) -> None:
    env = dict(os.environ)
    if store is not None:
        env[STORE_ENV] = store
    if evidence_dir is not None:
        env[EVIDENCE_DIR_ENV] = str(evidence_dir)
    extra = [f"--server.port={port}"] if port is not None else []
    os.execvpe(sys.executable, [sys.executable, "-m", "streamlit", "run", str(ENTRY),
                                "--browser.gatherUsageStats=false", *extra, *streamlit_args],
               env)
