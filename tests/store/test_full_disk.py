"""A full disk under the SQLite store: nothing saved is lost, reading still works (a fresh
connection cannot grow the `-shm` index a WAL database needs, so the file is read as it is when
its `-wal` holds nothing), writing says the disk is full, and reopening the store works.

The store lives on a small tmpfs of its own (mounted for the test: root, which the tests run
as); a filler file then takes every byte left. Skipped where mounting is not allowed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.hostile import load_sample
from twice.store import Note, StoreFull, open_store


@contextmanager
def small_disk_in(folder: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted in `folder` for the block (skips the test where that fails)."""
    mount = folder / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk_in(tmp_path) as mount:
        yield mount


@contextmanager
def full(disk: Path) -> Iterator[None]:
    filler = disk / "filler"
    try:  # closing the file flushes what the last write left buffered: it may fail too
        with open(filler, "wb") as out:
            while True:
                out.write(bytes(2**16))
                out.flush()
    except OSError:
        pass
    assert shutil.disk_usage(disk).free < 2**16
    try:
        yield
    finally:
        filler.unlink()


def test_a_full_disk_keeps_everything_saved_readable_and_says_so(small_disk: Path) -> None:
    path = small_disk / "investigations.sqlite3"
    store = open_store(str(path))
    inv = store.create("Saved before the disk filled", load_sample("sdk_retry"))
    store.add_note(inv, Note(author="ana", text="before", at=datetime.now(UTC)))
    with full(small_disk):
        for reader in (store, open_store(str(path))):  # this store, and one opened now
            assert [s.id for s in reader.list()] == [inv]
            snap = reader.get(inv)
            assert snap is not None and [n.text for n in snap.notes] == ["before"]
            assert len(snap.timeline) == len(load_sample("sdk_retry"))
        with pytest.raises(StoreFull, match="the disk is full"):
            store.add_note(inv, Note(author="ana", text="during " * 5000, at=datetime.now(UTC)))
        with pytest.raises(StoreFull):
            store.create("Not saved", load_sample("sdk_retry"))
    store.add_note(inv, Note(author="ana", text="after", at=datetime.now(UTC)))
    snap = open_store(str(path)).get(inv)
    assert snap is not None and [n.text for n in snap.notes] == ["before", "after"]
    assert [s.title for s in store.list()] == ["Saved before the disk filled"]
