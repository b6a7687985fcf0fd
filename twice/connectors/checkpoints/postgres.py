"""Reading a PostgresSaver database (langgraph-checkpoint-postgres) in one read-only snapshot.

Schema, as the saver's MIGRATIONS create it (versions 0-9 in langgraph-checkpoint-postgres 3.x):
  checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
              checkpoint JSONB, metadata JSONB)     -- ts, channel_versions live in `checkpoint`
  checkpoint_blobs(thread_id, checkpoint_ns, channel, version, type, blob BYTEA)
                                                    -- one blob per (channel, version), e.g. the
                                                    -- whole message list after each step
  checkpoint_writes(thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type,
                    blob BYTEA, task_path)
  checkpoint_migrations(v)
Primitive channel values are inlined in `checkpoint->'channel_values'`; they never hold messages.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
from psycopg import IsolationLevel, errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads

from twice.connectors.base import SourceError, SourceWarning, redact
from twice.connectors.checkpoints.blobs import (
    REFUSED,
    Decoder,
    decode_grown_list,
    msgpack_array_head,
)
from twice.connectors.checkpoints.parse import CheckpointRecord, WriteRecord
from twice.connectors.checkpoints.times import Window
from twice.connectors.jsonfile import TooDeep, loads

KNOWN_MIGRATION = 9  # the last schema migration of PostgresSaver this reader was checked against
_REQUIRED = {
    "checkpoints": {"thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint", "metadata"},
    "checkpoint_blobs": {"thread_id", "checkpoint_ns", "channel", "version", "type", "blob"},
}
_WRITES_COLUMNS = {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel",
                   "type", "blob"}
_CHECKPOINT_COLUMNS = ("thread_id, checkpoint_ns, checkpoint_id, checkpoint->>'ts', "
                       "checkpoint->'channel_versions', metadata")
# Channels whose values are never message lists: routing markers and the raw graph input.
_SKIP_CHANNEL = re.compile(r"^(branch:|__start__$)")


def read_postgres(
    dsn: str, window: Window, warnings: list[SourceWarning], *, statement_timeout_s: float,
    raw: bool = False,
) -> tuple[list[CheckpointRecord], list[WriteRecord]]:
    """The database's checkpoints and pending writes in the window, blobs decoded by
    LangGraph's serializer or, `raw`, by `rawpack` (which raises `rawpack.Decline` for what it
    does not read exactly)."""
    source = redact(dsn)
    secret = _password(dsn)
    try:
        conn = psycopg.connect(dsn, connect_timeout=10)
    except psycopg.Error as exc:
        raise SourceError(source, _reason(exc, secret)) from None
    try:
        conn.read_only = True  # every transaction BEGINs READ ONLY
        conn.isolation_level = IsolationLevel.REPEATABLE_READ  # one snapshot for all queries
        set_json_loads(_jsonb, conn)
        with conn.cursor() as cur:
            cur.execute(
                "SELECT set_config('statement_timeout', %s, false), "
                "set_config('default_transaction_read_only', 'on', false)",
                (str(max(1, int(statement_timeout_s * 1000))),),
            )
            has_writes = _check_schema(cur, source, warnings)
            with _decoder(source, warnings, raw) as decoder:
                checkpoints = _read_checkpoints(cur, source, window, decoder)
                writes = _read_writes(cur, source, window, decoder) if has_writes else []
    except errors.QueryCanceled:
        raise SourceError(source, "a query ran longer than the statement timeout "
                                  f"({statement_timeout_s:g} s); narrow thread_ids or the "
                                  "time window") from None
    except psycopg.Error as exc:
        raise SourceError(source, _reason(exc, secret)) from None
    finally:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()  # nothing was written; end the snapshot
        conn.close()
    return checkpoints, writes


def _decoder(source: str, warnings: list[SourceWarning], raw: bool) -> Any:
    if raw:
        from twice.connectors.checkpoints.rawpack import RawBlobs

        return RawBlobs(source, warnings)
    from twice.connectors.checkpoints.decode import BlobDecoder  # LangGraph's serializer

    return BlobDecoder(source, warnings)


@dataclass(frozen=True)
class Unreadable:
    """A JSONB value orjson does not take (a number past a double, nested past the limit):
    a warning for its row, never a failure of the whole source."""

    reason: str


def _jsonb(data: bytes | bytearray | memoryview | str) -> Any:
    try:
        return loads(data)
    except orjson.JSONDecodeError as exc:
        return Unreadable(str(exc.msg if isinstance(exc, TooDeep) else exc).split(":")[0])


def _jsonb_field(value: Any, what: str, where: str, warnings: list[SourceWarning]) -> Any:
    if isinstance(value, Unreadable):
        warnings.append(SourceWarning(where, f"{what} is not readable JSON ({value.reason}); "
                                             "read without it"))
        return None
    return value


def _password(dsn: str) -> str | None:
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return None
    return str(password) if password else None


def _reason(exc: BaseException, secret: str | None) -> str:
    return redact(" ".join(str(exc).split()) or type(exc).__name__, [secret])


def _check_schema(cur: psycopg.Cursor[Any], source: str, warnings: list[SourceWarning]) -> bool:
    cur.execute(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = ANY(current_schemas(false)) AND table_name = ANY(%s)",
        ([*_REQUIRED, "checkpoint_writes", "checkpoint_migrations"],),
    )
    columns: dict[str, set[str]] = {}
    for table, column in cur.fetchall():
        columns.setdefault(table, set()).add(column)
    if "checkpoints" not in columns:
        cur.execute("SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = ANY(current_schemas(false)) ORDER BY 1 LIMIT 21")
        tables = [r[0] for r in cur.fetchall()]
        found = ", ".join(tables[:20]) + (", ..." if len(tables) > 20 else "") or "no tables"
        raise SourceError(source, "not a LangGraph PostgresSaver database: no `checkpoints` "
                                  f"table (found: {found})")
    for table, needed in _REQUIRED.items():
        if missing := needed - columns.get(table, set()):
            what = "missing" if table not in columns else "not LangGraph's: missing columns"
            detail = "" if table not in columns else " " + ", ".join(sorted(missing))
            raise SourceError(source, f"table `{table}` is {what}{detail}")
    if "checkpoint_migrations" in columns:
        cur.execute("SELECT max(v) FROM checkpoint_migrations")
        row = cur.fetchone()
        version = row[0] if row else None
        if version is None:
            warnings.append(SourceWarning(source, "checkpoint_migrations is empty; the tables "
                                                  "look like LangGraph's, reading them anyway"))
        elif version > KNOWN_MIGRATION:
            warnings.append(SourceWarning(
                source, f"checkpoint_migrations is at version {version}, newer than the last "
                        f"one this reader knows ({KNOWN_MIGRATION}); the tables have the "
                        "expected columns, reading them anyway"))
    else:
        warnings.append(SourceWarning(source, "no checkpoint_migrations table; the tables look "
                                              "like LangGraph's, reading them anyway"))
    if missing := _WRITES_COLUMNS - columns.get("checkpoint_writes", set()):
        warnings.append(SourceWarning(source, "checkpoint_writes missing or not LangGraph's "
                                              f"({', '.join(sorted(missing))}); not read"))
        return False
    return True


def _filters(window: Window) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if window.thread_ids is not None:
        where.append("thread_id = ANY(%s)")
        params.append(list(window.thread_ids))
    if (low := window.id_low()) is not None:
        where.append("checkpoint_id >= %s")
        params.append(low)
    if (high := window.id_high()) is not None:
        where.append("checkpoint_id <= %s")
        params.append(high)
    return where, params


def _read_checkpoints(
    cur: psycopg.Cursor[Any], source: str, window: Window, decoder: Decoder
) -> list[CheckpointRecord]:
    where, params = _filters(window)
    cur.execute(f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints"
                + (" WHERE " + " AND ".join(where) if where else ""), params)
    rows = [(*r, False) for r in cur.fetchall()]
    if (low := window.id_low()) is not None:
        # The last checkpoint before the window, per thread: what the agent already had then,
        # so a tool call from before the window is not reported as new inside it.
        inner: list[str] = ["checkpoint_id < %s"]
        inner_params: list[Any] = [low]
        if window.thread_ids is not None:
            inner.append("thread_id = ANY(%s)")
            inner_params.append(list(window.thread_ids))
        cur.execute(f"SELECT DISTINCT ON (thread_id, checkpoint_ns) {_CHECKPOINT_COLUMNS} "
                    "FROM checkpoints WHERE " + " AND ".join(inner)
                    + " ORDER BY thread_id, checkpoint_ns, checkpoint_id DESC", inner_params)
        rows += [(*r, True) for r in cur.fetchall()]

    # Each (channel, version) blob is fetched and decoded once, however many checkpoints
    # point at it (an unchanged message list is shared by every step until the next message).
    wanted: set[tuple[str, str, str, str]] = set()
    for thread_id, ns, _cid, _ts, versions, _meta, _ctx in rows:
        if isinstance(versions, Mapping):
            wanted.update((thread_id, ns, ch, str(v)) for ch, v in versions.items()
                          if not _SKIP_CHANNEL.match(ch))
    blobs = _read_blobs(cur, source, sorted(wanted), decoder)

    records = []
    for thread_id, ns, cid, ts, versions, meta, context_only in rows:
        row_at = f"{source}#{thread_id}/{cid}"
        versions = _jsonb_field(versions, "checkpoint.channel_versions", row_at,
                                decoder.warnings)
        meta = _jsonb_field(meta, "metadata", row_at, decoder.warnings)
        values: dict[str, Any] = {}
        if isinstance(versions, Mapping):
            for ch, v in versions.items():
                value = blobs.get((thread_id, ns, ch, str(v)))
                if value is not None:
                    values[ch] = value
        records.append(CheckpointRecord(thread_id, ns, cid, ts,
                                        meta if isinstance(meta, Mapping) else {}, values,
                                        context_only))
    return records


def _read_blobs(
    cur: psycopg.Cursor[Any], source: str, keys: list[tuple[str, str, str, str]],
    decoder: Decoder,
) -> dict[tuple[str, str, str, str], Any]:
    if not keys:
        return {}
    columns = [list(c) for c in zip(*keys, strict=True)]
    cur.execute(
        "SELECT b.thread_id, b.checkpoint_ns, b.channel, b.version, b.type, b.blob "
        "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) "
        "AS k(thread_id, checkpoint_ns, channel, version) "
        "JOIN checkpoint_blobs b ON b.thread_id = k.thread_id "
        "AND b.checkpoint_ns = k.checkpoint_ns AND b.channel = k.channel "
        "AND b.version = k.version WHERE b.type NOT IN ('empty', 'null') "
        "ORDER BY b.thread_id, b.checkpoint_ns, b.channel, b.version",
        columns,
    )
    out: dict[tuple[str, str, str, str], Any] = {}
    # consecutive versions of one channel, oldest first, so each list is decoded as a tail
    previous: tuple[bytes, list[Any]] | None = None
    previous_channel: tuple[str, str, str] | None = None
    for thread_id, ns, channel, version, type_, blob in cur:
        where = f"{source}#{thread_id}/blobs/{channel}/{version}"
        if (thread_id, ns, channel) != previous_channel:
            previous_channel, previous = (thread_id, ns, channel), None
        grown = None
        if type_ == "msgpack" and isinstance(blob, bytes):
            grown = decode_grown_list(decoder, previous, blob, where)
        if grown is not None:
            previous, value = grown, grown[1]
        else:
            value = decoder.decode(type_, blob, where)
            head = msgpack_array_head(blob) if isinstance(blob, bytes) else None
            previous = (blob[head[1]:], value) if (
                type_ == "msgpack" and head is not None and isinstance(value, list)) else None
        if value is not REFUSED and value is not None:
            out[(thread_id, ns, channel, version)] = value
    return out


def _read_writes(
    cur: psycopg.Cursor[Any], source: str, window: Window, decoder: Decoder
) -> list[WriteRecord]:
    where, params = _filters(window)
    where.append("type IS NOT NULL AND type NOT IN ('null', 'empty')")
    cur.execute("SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, "
                "blob FROM checkpoint_writes WHERE " + " AND ".join(where), params)
    records = []
    for thread_id, ns, cid, task_id, idx, channel, type_, blob in cur:
        value = decoder.decode(type_, blob, f"{source}#{thread_id}/{cid}/writes/{task_id}/{idx}")
        if value is not REFUSED:
            records.append(WriteRecord(thread_id, ns, cid, task_id, channel, value))
    return records
