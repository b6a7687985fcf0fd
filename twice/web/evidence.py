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
import re
from ipaddress import ip_address
from pathlib import Path
from urllib.parse import quote, urlencode

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import Conninfo

from twice.connectors.checkpoints import is_dsn

EVIDENCE_DIR_ENV = "TWICE_EVIDENCE_DIR"
# What a remote read needs, and nothing else: every other libpq parameter (files of the server
# such as passfile, sslkey, sslkeylogfile, service; and each one a newer libpq adds) is refused
# by name. An allow-list, so a new libpq parameter is not a new hole.
_ALLOWED = ("host", "hostaddr", "port", "dbname", "user", "password", "sslmode",
            "connect_timeout", "application_name", "options")
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-full")
# `options` may only set the schema search path: `-c search_path=a,b` (or `-csearch_path=`)
_SEARCH_PATH = re.compile(r"\s*(?:-c\s*|--)search_path=[A-Za-z0-9_$,\"]+\s*")
# Added to every web DSN: the connection authenticates with the password it names (a server
# that trusts or peer-authenticates the client is refused), the server's own client
# certificate (~/.postgresql/postgresql.crt, PGSSLCERT) is never sent, nor its Kerberos ticket.
_HARDENING = {"require_auth": "scram-sha-256,md5,password", "sslcertmode": "disable",
              "gssencmode": "disable"}
_PARSE_FAILED = "Checkpoints: that is not a valid postgresql:// DSN."


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
    """The DSN the form may use: read by libpq's own parser, only the parameters of a remote
    read (each other one refused by name), every host a network address, its own user and
    password; given back as a `postgresql://` URI with the hardening parameters added."""
    try:
        params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    except ProgrammingError:
        raise Refused(_PARSE_FAILED) from None
    named = sorted(set(params) - set(_ALLOWED))
    if named:
        raise Refused("Checkpoints: a DSN given in the web app takes only "
                      f"{', '.join(_ALLOWED)}; leave out {', '.join(named)}.")
    hosts = _network_hosts(params)
    if not params.get("user") or not params.get("password"):
        raise Refused("Checkpoints: a DSN given in the web app names its user and password "
                      "(postgresql://user:password@host/db): the server's own saved "
                      "passwords are not lent to it.")
    _check_values(params)
    ports = params.get("port", "").split(",") if params.get("port") else []
    if len(ports) == 1:
        ports *= len(hosts)
    in_netloc = len(ports) == len(hosts)  # each host with its port, as the DSN was written
    query = {k: params[k] for k in ("hostaddr", "port", "sslmode", "connect_timeout",
                                    "application_name", "options")
             if params.get(k) and not (k == "port" and in_netloc)}
    if query.get("sslmode") == "verify-full":
        query["sslrootcert"] = "system"  # the system's CAs, not a file in the server's home
    known = {o.keyword.decode() for o in Conninfo.get_defaults()}
    query.update({k: v for k, v in _HARDENING.items() if k in known})
    userinfo = f"{quote(params['user'], safe='')}:{quote(params['password'], safe='')}"
    netloc = ",".join((f"[{h}]" if ":" in h else quote(h, safe=""))
                      + (f":{ports[i]}" if in_netloc and ports[i] else "")
                      for i, h in enumerate(hosts))
    return (f"postgresql://{userinfo}@{netloc}/{quote(params.get('dbname', ''), safe='')}"
            f"?{urlencode(query, quote_via=quote, safe=',')}")


def _network_hosts(params: dict[str, str]) -> list[str]:
    """The host entries, each a network name or address (an empty entry, a path or an abstract
    socket is the server's own local socket, lent with peer authentication)."""
    hosts = params.get("host", "").split(",") if params.get("host") else []
    addrs = params.get("hostaddr", "").split(",") if params.get("hostaddr") else []
    local = "names the database's host (host:port, not a socket on the server running twice)"
    if not hosts and not addrs:
        raise Refused(f"Checkpoints: a DSN given in the web app {local}.")
    if any(not h.strip() or h.startswith(("/", "@")) for h in hosts):
        raise Refused(f"Checkpoints: a DSN given in the web app {local}; every host entry "
                      "is a network name or address (an empty one means the local socket).")
    for addr in addrs:
        try:
            ip_address(addr)
        except ValueError:
            raise Refused("Checkpoints: hostaddr takes IP addresses only.") from None
    if hosts and addrs and len(hosts) != len(addrs):
        raise Refused("Checkpoints: host and hostaddr list as many entries each.")
    return hosts or addrs


def _check_values(params: dict[str, str]) -> None:
    if params.get("sslmode", "prefer") not in _SSLMODES:
        raise Refused(f"Checkpoints: sslmode is one of {', '.join(_SSLMODES)} (verify-full "
                      "checks the server against the system's CAs).")
    if params.get("options") and not _SEARCH_PATH.fullmatch(params["options"]):
        raise Refused("Checkpoints: options may only set the schema: "
                      "options=-csearch_path%3Dmy_schema.")
    # an empty port entry is the default port (5432) of its host
    if any(p and not p.isdigit() for p in params.get("port", "").split(",")):
        raise Refused("Checkpoints: port takes numbers only.")
    if not params.get("connect_timeout", "0").isdigit():
        raise Refused("Checkpoints: connect_timeout takes a number of seconds.")
    if "=" in params.get("dbname", "") or "://" in params.get("dbname", ""):
        raise Refused("Checkpoints: dbname is a database name, not a connection string.")


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
