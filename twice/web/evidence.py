"""What the web app's live form may read: a PostgreSQL DSN, an uploaded file, or a file under the
folder an administrator named with `TWICE_EVIDENCE_DIR`; nothing else on the server.

The form runs on the server with the server's rights, so a path typed into it would open any
SQLite file the server can read (its own investigation store lists its tables), and a DSN
left incomplete would be completed from the server's own settings (its ~/.pgpass, PGPASSWORD,
a local socket with peer authentication). The command line, run by the person who owns the
files, takes any path and any DSN.
"""

from __future__ import annotations

import os
from pathlib import Path

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from twice.connectors.checkpoints import is_dsn

EVIDENCE_DIR_ENV = "TWICE_EVIDENCE_DIR"
# libpq parameters that make the server read its own files or settings
_SERVER_SIDE = ("passfile", "service", "servicefile", "sslcert", "sslkey", "sslrootcert",
                "sslcrl", "sslcrldir", "sslpassword", "krbsrvname", "gsslib")


class Refused(ValueError):
    """What the form refuses, in words for the user (no server path, no password)."""


def checkpoints_target(typed: str) -> str | None:
    """The checkpoints source typed into the form, as the connector takes it; None if empty.
    Refused: a DSN that leans on the server's settings, a path outside the evidence folder."""
    typed = typed.strip()
    if not typed:
        return None
    if is_dsn(typed):
        return web_dsn(typed)
    return str(evidence_path(typed))


def web_dsn(dsn: str) -> str:
    """The DSN as given, if it names its own TCP host, user and password and no server file."""
    try:
        params = conninfo_to_dict(dsn)
    except ProgrammingError:
        raise Refused("Checkpoints: that is not a valid postgresql:// DSN.") from None
    named = sorted(p for p in _SERVER_SIDE if p in params)
    if named:
        raise Refused("Checkpoints: a DSN given in the web app may not name files or settings "
                      f"of the server ({', '.join(named)}); leave them out.")
    hosts = [h for h in str(params.get("host") or "").split(",") if h]
    if not hosts or any(h.startswith(("/", "@")) for h in hosts):
        raise Refused("Checkpoints: a DSN given in the web app names the database's host "
                      "(host:port, not a socket on the server running twice).")
    if not params.get("user") or not params.get("password"):
        raise Refused("Checkpoints: a DSN given in the web app names its user and password "
                      "(postgresql://user:password@host/db): the server's own saved "
                      "passwords are not lent to it.")
    return dsn


def evidence_path(typed: str) -> Path:
    """The file `typed` names inside the evidence folder (relative to it, or absolute inside
    it; links are followed before the check, so one pointing out is refused)."""
    folder = os.environ.get(EVIDENCE_DIR_ENV, "").strip()
    if not folder:
        raise Refused("Checkpoints: the web app reads no files on its server. Give a "
                      "postgresql:// DSN or upload the SqliteSaver file (an administrator can "
                      f"let it read files in one folder: {EVIDENCE_DIR_ENV}).")
    base = Path(folder).expanduser().resolve()
    path = Path(typed).expanduser()
    resolved = (path if path.is_absolute() else base / path).resolve()
    if not resolved.is_relative_to(base):
        raise Refused("Checkpoints: the web app reads files only in its evidence folder "
                      f"({EVIDENCE_DIR_ENV}); give a path inside it, a postgresql:// DSN, or "
                      "upload the file.")
    return resolved
