"""Reading a SqliteSaver file (langgraph-checkpoint-sqlite), read-only.

Schema, as `SqliteSaver.setup()` creates it:
  checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
              checkpoint BLOB, metadata BLOB)   -- the whole checkpoint is one `type` blob
                                                -- (msgpack); metadata is JSON text/bytes
  writes(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type,
         value BLOB)
"""

from __future__ import annotations

import os
import sqlite3
import stat
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from twice.connectors.base import SourceError, SourceWarning
from twice.connectors.checkpoints.blobs import REFUSED
from twice.connectors.checkpoints.parse import CheckpointRecord, WriteRecord
from twice.connectors.checkpoints.times import Window
from twice.connectors.jsonfile import MAX_FILE_BYTES, require_regular_file

if TYPE_CHECKING:
    from twice.connectors.checkpoints.blobs import Decoder

_CHECKPOINT_COLUMNS = {"thread_id", "checkpoint_ns", "checkpoint_id", "type", "checkpoint",
                       "metadata"}
_WRITES_COLUMNS = {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "channel", "type",
                   "value"}
_CHECKPOINT_SELECT = ("SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.type, "
                      "c.checkpoint, c.metadata FROM checkpoints c")


def read_sqlite(
    path: Path, window: Window, warnings: list[SourceWarning], *, raw: bool = False
) -> tuple[list[CheckpointRecord], list[WriteRecord]]:
    """The file's checkpoints and pending writes, blobs decoded by LangGraph's serializer or,
    `raw`, by `rawpack` (which raises `rawpack.Decline` for what it does not read exactly)."""
    source = str(path)
    _check_file(path)
    with open_evidence(path, warnings) as conn:
        # a damaged file can hold text that is not UTF-8: read it with U+FFFD, do not fail on it
        conn.text_factory = _text
        try:
            has_writes = _check_tables(conn, source, warnings)
            with _decoder(source, warnings, raw) as decoder:
                checkpoints = _read_checkpoints(conn, source, window, decoder)
                writes = _read_writes(conn, source, window, decoder) if has_writes else []
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_NOTADB:
                raise SourceError(source, _NOT_SQLITE.format(what="no SQLite header")) from None
            raise SourceError(source, f"cannot read SQLite database: {exc}") from None
        except UnicodeDecodeError:  # a damaged schema: names that are not UTF-8
            raise SourceError(source, "cannot read SQLite database: its schema is not UTF-8 "
                                      "text (a damaged file?)") from None
    return checkpoints, writes


def _decoder(source: str, warnings: list[SourceWarning], raw: bool) -> Any:
    if raw:
        from twice.connectors.checkpoints.rawpack import RawBlobs

        return RawBlobs(source, warnings)
    from twice.connectors.checkpoints.decode import BlobDecoder  # LangGraph's serializer

    return BlobDecoder(source, warnings)


@contextmanager
def open_evidence(path: Path, warnings: list[SourceWarning] | None = None
                  ) -> Iterator[sqlite3.Connection]:
    """A connection that reads an evidence file and writes nothing beside it.

    `mode=ro` is not enough: opening a WAL-mode database creates `-wal` and `-shm` files next to
    it (and fails in a read-only folder). With no `-wal` file beside it the database is complete
    in the one file, so it is opened `immutable` (SQLite then takes no locks and writes nothing).
    A `-wal` file holds committed transactions not yet copied into the database: then (unless
    it is empty) the file and its `-wal` are copied to a private temporary folder and the copy
    is read, so those transactions are seen and the evidence folder is still left as it was.
    Only a `-wal` that is a regular file, and only files within twice's size cap, are copied (a
    `-wal` linking to /dev/zero, or a sparse 20 GiB file, would fill the disk): otherwise the
    database is read without its `-wal`, and `warnings` says so. A `-shm` is never read (SQLite
    rebuilds it).
    """
    source = str(path)
    wal = path.with_name(path.name + "-wal")
    with tempfile.TemporaryDirectory(prefix="twice-sqlite-") as tmp:
        try:
            copy = Path(tmp) / "evidence.sqlite"
            if os.path.lexists(wal) and not _empty(wal) \
                    and _copy_wal(path, wal, copy, source, warnings):
                conn = sqlite3.connect(str(copy))
            else:
                conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1",
                                       uri=True)
        except (OSError, sqlite3.Error) as exc:
            raise SourceError(source, f"cannot open SQLite database: "
                                      f"{getattr(exc, 'strerror', None) or exc}") from None
        try:
            yield conn
        finally:
            conn.close()


def _empty(wal: Path) -> bool:
    """An empty `-wal` (a reader left it, or the log was checkpointed) holds no transaction:
    the database is complete without it, and is not copied."""
    try:
        info = os.stat(wal)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == 0


def _copy_wal(path: Path, wal: Path, copy: Path, source: str,
              warnings: list[SourceWarning] | None) -> bool:
    """Copy the database and its `-wal` beside `copy`; False (and a warning) when the `-wal`
    is not a regular file or either file is past the size cap."""
    why = _not_copied(wal)
    if why is None:
        # O_NONBLOCK: a FIFO put there between the check and the open does not block it
        with os.fdopen(os.open(wal, os.O_RDONLY | os.O_NONBLOCK), "rb") as wal_in:
            why = _not_copied(wal, os.fstat(wal_in.fileno()))  # what was opened
            if why is None:
                with open(path, "rb") as db_in:
                    if os.fstat(db_in.fileno()).st_size > MAX_FILE_BYTES:
                        raise SourceError(source, "file is more than the "
                                                  f"{MAX_FILE_BYTES / 2**30:g} GiB twice reads")
                    _copy_within(db_in, copy, MAX_FILE_BYTES)
                _copy_within(wal_in, copy.with_name(copy.name + "-wal"), MAX_FILE_BYTES)
                return True
    if warnings is not None:
        warnings.append(SourceWarning(source, f"its -wal file {why}; read without it (the "
                                              "transactions only in the -wal are not seen)"))
    return False


def _not_copied(wal: Path, info: os.stat_result | None = None) -> str | None:
    """Why a `-wal` is not copied (None: it is copied)."""
    try:
        info = info or os.stat(wal)
    except OSError as exc:  # a link pointing nowhere, no permission
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_size > MAX_FILE_BYTES:
        return f"is {info.st_size / 2**30:.1f} GiB, past the {MAX_FILE_BYTES / 2**30:g} GiB cap"
    return None


def _copy_within(src: BinaryIO, dst: Path, cap: int) -> None:
    """Copy at most `cap` bytes (a file that grows while it is copied stops there)."""
    with open(dst, "wb") as out:
        left = cap
        while left > 0 and (chunk := src.read(min(left, 2**20))):
            out.write(chunk)
            left -= len(chunk)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _check_file(path: Path) -> None:
    """Missing, a folder, a FIFO or empty: said before SQLite sees the file. The file itself is
    not opened here: closing any descriptor of a SQLite file drops every POSIX lock this process
    holds on it (a lab run's checkpointer may have it open), so whether it is SQLite at all is
    left to SQLite (`_NOT_SQLITE`)."""
    source = str(path)
    require_regular_file(path)  # a FIFO would block SQLite's open
    try:
        info = path.stat()
    except FileNotFoundError:
        raise SourceError(source, "file not found") from None
    except OSError as exc:
        raise SourceError(source, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise SourceError(source, "is a folder, expected a SqliteSaver file")
    if not info.st_size:
        raise SourceError(source, _NOT_SQLITE.format(what="file is empty"))


_NOT_SQLITE = ("not a SQLite database ({what}); expected a LangGraph SqliteSaver file or a "
               "postgresql:// DSN")


def _check_tables(conn: sqlite3.Connection, source: str, warnings: list[SourceWarning]) -> bool:
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    if "checkpoints" not in tables:
        found = ", ".join(tables) if tables else "no tables"
        raise SourceError(source, "not a LangGraph SqliteSaver database: no `checkpoints` table "
                                  f"(found: {found})")
    columns = {r[1] for r in conn.execute("PRAGMA table_info(checkpoints)")}
    if missing := _CHECKPOINT_COLUMNS - columns:
        raise SourceError(source, "table `checkpoints` is not LangGraph's: missing columns "
                                  f"{', '.join(sorted(missing))}")
    if "writes" not in tables:
        warnings.append(SourceWarning(source, "no `writes` table: pending writes not read"))
        return False
    columns = {r[1] for r in conn.execute("PRAGMA table_info(writes)")}
    if missing := _WRITES_COLUMNS - columns:
        warnings.append(SourceWarning(source, "table `writes` is not LangGraph's (missing "
                                              f"{', '.join(sorted(missing))}); not read"))
        return False
    return True


def _filters(window: Window, alias: str = "") -> tuple[list[str], list[Any]]:
    prefix = f"{alias}." if alias else ""
    where: list[str] = []
    params: list[Any] = []
    if window.thread_ids is not None:
        where.append(f"{prefix}thread_id IN (SELECT value FROM json_each(?))")
        params.append(orjson.dumps(list(window.thread_ids)).decode())
    if (low := window.id_low()) is not None:
        where.append(f"{prefix}checkpoint_id >= ?")
        params.append(low)
    if (high := window.id_high()) is not None:
        where.append(f"{prefix}checkpoint_id <= ?")
        params.append(high)
    return where, params


def _read_checkpoints(
    conn: sqlite3.Connection, source: str, window: Window, decoder: Decoder
) -> list[CheckpointRecord]:
    where, params = _filters(window, "c")
    sql = _CHECKPOINT_SELECT + (" WHERE " + " AND ".join(where) if where else "")
    records = [_record(row, source, decoder, False) for row in conn.execute(sql, params)]
    if (low := window.id_low()) is not None:
        # The last checkpoint before the window, per thread: what the agent already had then,
        # so a tool call from before the window is not reported as new inside it.
        inner = ["checkpoint_id < ?"]
        inner_params: list[Any] = [low]
        if window.thread_ids is not None:
            inner.append("thread_id IN (SELECT value FROM json_each(?))")
            inner_params.append(orjson.dumps(list(window.thread_ids)).decode())
        sql = (_CHECKPOINT_SELECT + " JOIN (SELECT thread_id, checkpoint_ns, "
               "MAX(checkpoint_id) AS cid FROM checkpoints WHERE " + " AND ".join(inner)
               + " GROUP BY thread_id, checkpoint_ns) b ON c.thread_id = b.thread_id "
               "AND c.checkpoint_ns = b.checkpoint_ns AND c.checkpoint_id = b.cid")
        records += [_record(row, source, decoder, True) for row in conn.execute(sql, inner_params)]
    return records


def _record(row: tuple[Any, ...], source: str, decoder: Decoder,
            context_only: bool) -> CheckpointRecord:
    thread_id, ns, checkpoint_id, type_, blob, raw_meta = row
    where = f"{source}#{thread_id}/{checkpoint_id}"
    value = decoder.decode(type_, blob, where)
    ts: Any = None
    values: Mapping[str, Any] = {}
    if isinstance(value, Mapping):
        ts = value.get("ts")
        channel_values = value.get("channel_values")
        values = channel_values if isinstance(channel_values, Mapping) else {}
    return CheckpointRecord(str(thread_id), str(ns or ""), str(checkpoint_id), ts,
                            _metadata(raw_meta, where, decoder.warnings), values, context_only)


def _metadata(raw: Any, where: str, warnings: list[SourceWarning]) -> Mapping[str, Any]:
    if raw is None:
        return {}
    try:
        meta = orjson.loads(raw)
    except (orjson.JSONDecodeError, TypeError):
        warnings.append(SourceWarning(where, "checkpoint metadata is not JSON; ignored"))
        return {}
    return meta if isinstance(meta, dict) else {}


def _read_writes(
    conn: sqlite3.Connection, source: str, window: Window, decoder: Decoder
) -> list[WriteRecord]:
    where, params = _filters(window)
    where.append("type IS NOT NULL AND type NOT IN ('null', 'empty')")
    sql = ("SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value "
           "FROM writes WHERE " + " AND ".join(where))
    records = []
    for thread_id, ns, checkpoint_id, task_id, idx, channel, type_, blob in conn.execute(
            sql, params):
        where_ = f"{source}#{thread_id}/{checkpoint_id}/writes/{task_id}/{idx}"
        value = decoder.decode(type_, blob, where_)
        if value is REFUSED:
            continue
        records.append(WriteRecord(str(thread_id), str(ns or ""), str(checkpoint_id),
                                   str(task_id), str(channel), value))
    return records
