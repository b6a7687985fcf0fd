"""The bundled sample incidents, imported into the store under stable ids (so the README's links
work everywhere) by a thread of their own: a new store's first visit shows the incidents list at
once, and each sample joins it as it is saved. No Streamlit here."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path

from twice.connectors import registry
from twice.store import InvestigationExists, Note, Store, StoreError, StoreReadOnly

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
_LOG = logging.getLogger("twice.web.samples")


def sample_folders() -> list[Path]:
    """The bundled samples (none when installed without the repository's sample_data/)."""
    if not SAMPLES.is_dir():
        return []
    return sorted(p for p in SAMPLES.iterdir() if (p / "truth.json").exists())


def sample_id(folder: Path) -> str:
    return "sample-" + folder.name.replace("_", "-")


def import_sample(store: Store, folder: Path) -> bool:
    """One sample saved, with the note that tells what really happened; False if the store
    had it already (or another process saved it first)."""
    inv_id = sample_id(folder)
    if store.get(inv_id, timeline=False) is not None:
        return False
    truth = json.loads((folder / "truth.json").read_text())
    found, _ = registry.scan_folder(folder)
    loaded = registry.load_all([(n, p, {}) for n, p in found])
    title = f"Sample: {folder.name.replace('_', ' ')}"
    try:
        store.create(title, loaded.rows, sources=sorted({n for n, _ in found}),
                     warnings=loaded.warnings, tags=["sample", truth["layer"]], id=inv_id)
    except InvestigationExists:
        return False
    store.add_note(inv_id, Note(author="twice lab", at=datetime.now(UTC),
                                text=f"What really happened: {truth['description']}"))
    return True


class SampleImport:
    """The samples a store lacks, imported one after the other in a daemon thread."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.folders = sample_folders()
        self.saved = 0  # samples done (saved now, or found saved)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="twice-samples", daemon=True)

    def start(self) -> SampleImport:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for folder in self.folders:
                import_sample(self.store, folder)
                self.saved += 1
        except StoreReadOnly:  # a read-only store still shows what it holds
            pass
        except (StoreError, OSError, ValueError, KeyError):  # the list shows what there is
            _LOG.exception("the bundled samples could not all be imported")
        finally:
            self._done.set()

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def is_pending(self, inv_id: str) -> bool:
        """Whether `inv_id` names a sample that may still be on its way into the store."""
        return self.running and inv_id in {sample_id(f) for f in self.folders}

    def wait(self, timeout: float | None = None) -> bool:
        """Until every sample is in (True), or `timeout` seconds (False)."""
        return self._done.wait(timeout)
