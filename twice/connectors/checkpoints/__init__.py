"""The checkpoints connector: LangGraph checkpoints from a SqliteSaver file or a PostgresSaver
database (a `postgresql://` DSN).

`connector` is what the registry calls (`name`, `sniff`, `load`, `parse_checkpoints`); the parts:
`sqlite` and `postgres` read the savers' tables (`sqlite_raw` streams a whole SqliteSaver
file); `rawpack` reads their blobs as stored, without building LangChain objects, and `decode`
with langgraph's own serializer when `rawpack` declines; `parse` makes the timeline rows (with
`facts` and `times`, `blobs` the size caps); `export` writes chosen threads back as a
SqliteSaver file.
"""

from __future__ import annotations

from twice.connectors.checkpoints.connector import (
    is_dsn,
    load,
    make_window,
    name,
    parse_checkpoints,
    sniff,
)

__all__ = ["is_dsn", "load", "make_window", "name", "parse_checkpoints", "sniff"]
