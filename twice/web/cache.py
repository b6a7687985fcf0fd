"""What the app keeps across reruns and sessions: the store (the bundled samples imported into
it once, in the background) and each investigation's analysis."""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import pandas as pd
import streamlit as st

from twice.engine import Analysis, Options
from twice.failure import AnalysisFailure, analyze_or_keep
from twice.store import InvestigationNotFound, Snapshot, Store, StoreError, open_store
from twice.store.model import source_warnings
from twice.web.samples import SampleImport, sample_id

WARM_UP = 4  # the newest saved investigations analysed when the server starts (`warm_up`)
WARM_UP_ENV = "TWICE_WARM_UP"  # how many, if the server sets it (0: none)
_LOG = logging.getLogger("twice.web.cache")


@st.cache_resource
def get_store() -> Store:
    """The store, opened once per process; the bundled samples it lacks are imported in the
    background (`sample_import`), so no page waits for them."""
    store = open_store()
    importing = _sample_import(store)
    threading.Thread(target=warm_up, args=(store, _analyses(), importing), daemon=True,
                     name="twice-warm-up").start()
    return store


@st.cache_resource
def _sample_import(_store: Store) -> SampleImport:
    return SampleImport(_store).start()


def sample_import() -> SampleImport:
    """The import of the bundled samples into this process's store (done, or under way)."""
    return _sample_import(get_store())


Analysed = tuple[Analysis, AnalysisFailure | None]


class Analyses:
    """Each investigation's analysis, kept by id for the process (the most recent `size`): a
    snapshot's timeline never changes. One investigation is analysed by one session at a time
    (another asking for it waits for that one), different ones side by side."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._kept: OrderedDict[str, Analysed] = OrderedDict()
        self._lock = threading.Lock()
        self._busy: dict[str, threading.Lock] = {}

    def get(self, inv_id: str, make: Callable[[], Analysed]) -> Analysed:
        with self._lock:
            key_lock = self._busy.setdefault(inv_id, threading.Lock())
        with key_lock:
            with self._lock:
                if inv_id in self._kept:
                    self._kept.move_to_end(inv_id)
                    return self._kept[inv_id]
            analysed = make()  # raises: nothing kept
            self.put(inv_id, analysed)
            return analysed

    def has(self, inv_id: str) -> bool:
        with self._lock:
            return inv_id in self._kept

    def put(self, inv_id: str, analysed: Analysed) -> None:
        with self._lock:
            self._kept[inv_id] = analysed
            self._kept.move_to_end(inv_id)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)


@st.cache_resource
def _analyses() -> Analyses:
    return Analyses()


def get_analysis(inv_id: str, store: Store) -> Analysed:
    """The investigation's analysis, kept by id: read from the store and analysed once, not on
    every click (its notes and overrides, which do change, are read on every run); an
    investigation this process saved is not analysed again (`save_analysed`). An analysis
    that fails gives the timeline without groups and the failure (`twice.failure`): the page
    says it and keeps what loaded."""

    return _analyses().get(inv_id, lambda: _read_and_analyse(store, inv_id))


def _read_and_analyse(store: Store, inv_id: str) -> Analysed:
    """The investigation's analysis as the store keeps it; else analysed, and kept there for
    the next server that opens it (a store this server cannot write to keeps nothing: the
    page is the same)."""
    snapshot = store.get(inv_id)
    if snapshot is None:  # deleted since the caller looked (nothing is kept)
        raise InvestigationNotFound(f"investigation {inv_id!r} not found")
    kept = store.analysis(snapshot)
    if kept is not None:
        return kept, None
    analysed = analysis_of(snapshot)
    if analysed[1] is None:
        try:
            store.keep_analysis(snapshot, analysed[0])
        except StoreError as exc:
            _LOG.warning("investigation %r: its analysis is not kept in the store (%s)",
                         inv_id, exc)
    return analysed


def warm_up_count(environ: Mapping[str, str] | None = None) -> int:
    """`TWICE_WARM_UP` (a whole number, 0 to 32), else WARM_UP."""
    value = (os.environ if environ is None else environ).get(WARM_UP_ENV, "").strip()
    return min(int(value), 32) if value.isdigit() else WARM_UP


def warm_up(store: Store, analyses: Analyses, importing: SampleImport) -> None:
    """Once the bundled samples are in, the newest saved investigations are analysed in the
    background (`warm_up_count` of them), so the first link to one of them after the server started
    opens as fast as a second visit. A page asking for one while it is analysed waits for
    that analysis (`Analyses.get`), not for a second one."""
    importing.wait()
    samples = {sample_id(f) for f in importing.folders}
    count = warm_up_count()
    if not count:
        return
    try:
        newest = [s.id for s in store.list(order="saved") if s.id not in samples][:count]
        for inv_id in newest:
            try:
                analyses.get(inv_id, partial(_read_and_analyse, store, inv_id))
            except InvestigationNotFound:  # deleted meanwhile
                continue
    except StoreError:  # the pages say what is wrong with the store when they read it
        _LOG.exception("the newest investigations could not be analysed ahead")


def is_analysed(inv_id: str) -> bool:
    """Whether this process holds the investigation's analysis (its page opens at once)."""
    return _analyses().has(inv_id)


def save_analysed(store: Store, title: str, timeline: pd.DataFrame, *,
                  sources: Sequence[str], warnings: Sequence[Mapping[str, str]],
                  tags: Sequence[str] = ()) -> str:
    """Save a new investigation, analysed once: the analysis the store's summary is made of is
    the one its page opens with (it would be the same analysed again)."""
    analysed = analyze_or_keep(timeline, source_warnings(warnings), Options())
    analysis, failure = analysed
    inv_id = store.create(title, timeline, sources=sources, warnings=warnings, tags=tags,
                          analysis=analysis if failure is None else None)
    if failure is None:
        _analyses().put(inv_id, analysed)
    return inv_id


def analysis_of(snapshot: Snapshot) -> tuple[Analysis, AnalysisFailure | None]:
    """A saved investigation analysed as it was saved: with its options (a sweep's link opens
    the verdict the sweep reported) and the warnings loading reported (the page, the JSON
    export and the HTML report show them)."""
    return analyze_or_keep(snapshot.timeline, snapshot.source_warnings(), snapshot.options)
