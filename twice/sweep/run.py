"""`twice sweep`: every duplicate in a month of evidence, chunk by chunk, resumable.

The timeline is cut into chunks of `chunk_s` (a day by default). Each chunk is analysed with
`overlap_s` of evidence on BOTH sides, and keeps only the groups whose first attempt falls
inside it (on the sources' raw clock). A duplicate whose attempts straddle a boundary is seen
whole by the chunk it starts in; the next chunk, which sees it too, does not claim it.

No fixed overlap is enough on its own: the beyond-retention band has no upper edge (a run
paused for a human and resumed 33 h later repeats its charge with the same tool_call_id and
key). So the overlap covers only what links attempts BY TIME: the fallback grouping window
(same customer + amount, 15 min) and the evidence around an attempt (its checkpoints, spans and
queue receives, minutes). 2 h is well past both. Attempts linked by a FINGERPRINT (tool_call_id,
idempotency key) are followed wherever they are: a fingerprint seen further apart than the
overlap ("long") brings its far rows and the evidence tied to them into every chunk that holds
one of its rows.

Consecutive chunks are analysed in BATCHES: one engine run over the batch's chunks plus the
overlap on both sides, each chunk then keeping the groups whose first attempt falls inside it
(the same ownership as one run per chunk). What the engine estimates from the window it is given
(the provider's clock offset: a median over the window's request/span pairs) then comes from a
wider window, closer to one analysis of everything. The engine's cost is mostly per call (a year
of daily chunks, one run each, took 699 s against 3.5 s for one analysis of the year), so
batches grow 1, 4, 16, ... chunks (the first results come fast; a kill early loses little), each
holding at most MAX_BATCH_ROWS rows with its overlap unless its one chunk holds more: the
engine's memory is bounded by that (+ far rows), not the window; the normalised timeline itself
is still loaded whole (connectors read whole files). A chunk whose own window holds no row an
attempt can come from (the provider's requests and events; tool spans and calls when the sources
have no provider record at all) cannot own a group: it is marked done without the engine.

Each batch is committed to the store in one transaction (its chunks' groups, each saved as an
investigation, and their "done" marks, twice.store.sweeps), so a killed sweep resumes where it
stopped. The sweep id is a hash of what was asked (sources with their sizes and mtimes, window,
chunk, options): rerunning the same command resumes the same sweep.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from twice.connectors import manifest, registry
from twice.connectors.base import SourceError, redact
from twice.engine import Group, Options, analyze
from twice.formats import TOOL_SHOWN, amount_text, one_line, utc
from twice.layers import Bands
from twice.store import Prepared, Store, prepare
from twice.store.sweeps import (
    ChunkDone,
    SweepGroup,
    SweepRecord,
    commit_chunks,
    done_chunks,
    finish_sweep,
    get_sweep,
    start_sweep,
)
from twice.sweep.evidence import far_rows, group_slices, long_fingerprints
from twice.timeline import Kind, SourceWarning
from twice.verdict import fmt_gap

Source = tuple[str, str | Path, dict[str, Any]]
Progress = Callable[[int, int, int], None]  # chunks done, chunks total, groups found so far

DEFAULT_CHUNK_S = 86400.0
DEFAULT_OVERLAP_S = 2 * 3600.0
# What a sweep accepts: a chunk of a second is already finer than any layer's timing needs; a
# plan of more chunks than MAX_CHUNKS is a mistake in --chunk (each chunk is a stored mark and
# a step of the progress bar), refused before anything is saved.
MIN_CHUNK_S = 1.0
MAX_CHUNK_S = 3660 * 86400.0
MAX_OVERLAP_S = 31 * 86400.0
MAX_CHUNKS = 100_000
# rows in one engine run (a batch of chunks with its overlap): the engine's cost is mostly per
# call below this, so small batches pay it again and again; above it, memory grows for nothing
MAX_BATCH_ROWS = 50_000
BATCH_GROWTH = 4  # each batch of chunks this many times the last: 1, 4, 16, ...
PROVIDER_KINDS = [Kind.PROVIDER_REQUEST.value, Kind.PROVIDER_EVENT.value]
AGENT_KINDS = [Kind.TOOL_SPAN.value, Kind.TOOL_CALL.value]


@dataclass(frozen=True)
class Plan:
    """What a sweep covers: chunk i is [since + i*chunk, since + (i+1)*chunk) clipped to until."""

    since: pd.Timestamp
    until: pd.Timestamp
    chunk_s: float
    overlap_s: float

    @property
    def total(self) -> int:
        span = (self.until - self.since).total_seconds()
        return max(1, int(np.ceil(span / self.chunk_s)))

    def chunk(self, i: int) -> tuple[pd.Timestamp, pd.Timestamp]:
        start = self.since + pd.Timedelta(seconds=i * self.chunk_s)
        return start, min(start + pd.Timedelta(seconds=self.chunk_s), self.until)


@dataclass
class SweepResult:
    record: SweepRecord
    resumed: bool
    chunks_skipped: int  # finished by an earlier run


def _source_identity(name: str, target: str | Path, options: dict[str, Any]) -> list[Any]:
    path = Path(target) if not str(target).startswith(("postgresql://", "postgres://")) else None
    if path is not None and path.exists():
        st = path.stat()
        return [name, str(path.resolve()), options, st.st_size, st.st_mtime_ns]
    # a DSN: its data can change under us; the stored plan keeps a resumed sweep's chunks fixed
    return [name, redact(str(target)), options]


def sweep_id_for(sources: Sequence[Source], since: Any, until: Any, chunk_s: float,
                 overlap_s: float, options: Options) -> str:
    """Same sources (unchanged files), window, chunking and options: same sweep."""
    b = options.bands
    ident = {"sources": sorted(_source_identity(*s) for s in sources),
             "since": None if since is None else utc(since).isoformat(),
             "until": None if until is None else utc(until).isoformat(),
             "chunk_s": chunk_s, "overlap_s": overlap_s,
             "options": [b.seconds, b.tens_of_seconds, b.retention, options.window_s,
                         options.tolerance_s]}
    digest = hashlib.sha256(orjson.dumps(ident, option=orjson.OPT_SORT_KEYS, default=str))
    return "sw-" + digest.hexdigest()[:16]


def plan_for(at: pd.Series, since: Any, until: Any, chunk_s: float, overlap_s: float) -> Plan:
    """Chunk edges fall on multiples of the chunk from the epoch (midnight UTC for 1d), so the
    same data always gives the same chunks."""
    step = pd.Timedelta(seconds=chunk_s)
    if at.empty and (since is None or until is None):
        raise SourceError("sweep", "the sources hold no timed record: nothing to sweep")
    if since is None:
        epoch = pd.Timestamp(0, tz="UTC")
        since = epoch + ((at.min() - epoch) // step) * step
    if until is None:
        # exclusive, on a whole microsecond (what the store keeps)
        until = at.max().floor("us") + pd.Timedelta(1, "us")
    since, until = utc(since), utc(until)
    if until <= since:
        raise SourceError("command line", "--until must be later than --since")
    return Plan(since=since, until=until, chunk_s=chunk_s, overlap_s=overlap_s)


def load(sources: Sequence[Source]) -> tuple[pd.DataFrame, list[SourceWarning]]:
    """The timeline sorted by raw time; rows without a time cannot be placed in a chunk."""
    loaded = registry.load_all(sources)
    rows = loaded.rows
    warnings = list(loaded.warnings)
    untimed = rows["at"].isna()
    if untimed.any():
        warnings.append(SourceWarning(source="sweep", detail=f"{int(untimed.sum())} records "
                                      "without a time cannot be placed in a chunk; skipped"))
        rows = rows[~untimed]
    return rows.sort_values("at", kind="stable", ignore_index=True), warnings


def _first_raw(group: Group) -> pd.Timestamp:
    return min(utc(r["at_raw"]) for r in group.records)


def _investigation_id(sweep_id: str, group_id: str) -> str:
    return f"{sweep_id}-{group_id}"


def _sweep_group(group: Group, chunk: int, inv_id: str) -> SweepGroup:
    worst = group.worst_layer
    named = [d for d in group.duplicates if d.layer == worst]
    subjects = [str(r["subject"]) for r in group.records if isinstance(r["subject"], str)]
    # the store keeps microseconds (a raw clock shifted by a span's time can carry nanoseconds)
    times = [utc(r["at_raw"]).floor("us").to_pydatetime() for r in group.records]
    return SweepGroup(
        group_id=group.group_id, chunk=chunk, investigation_id=inv_id,
        first_at=min(times), last_at=max(times),
        layer=None if worst is None else worst.value,
        confidence=max((d.confidence for d in named), default=None),
        protected=all(d.protected for d in group.duplicates),
        money_at_risk=group.money_at_risk(),
        customer=max(set(subjects), key=subjects.count) if subjects else None,
        tool_name=group.tool_name, thread_id=group.thread_id, attempts=len(group.records))


def investigation_title(group: Group, found: SweepGroup) -> str:
    """The title of a group's investigation: the duplicate its worst layer names, in words
    (issue 20: customer · amount · tool · layer · gap), then when it started. A part the
    evidence does not give is left out, never written "unknown"; no hash or id names it (the
    sweep's id is among the investigation's tags)."""
    named = next((d for d in group.duplicates if d.layer == group.worst_layer), None)
    second = group.record(named.second) if named is not None else {}
    parts = [
        found.customer or "",
        _amount_words(second),
        one_line(str(group.tool_name or ""), TOOL_SHOWN),
        found.layer or "",
        f"gap {fmt_gap(named.gap_seconds)}" if named is not None else "",
        f"{found.first_at:%Y-%m-%d %H:%M} UTC",
    ]
    return "Sweep: " + " · ".join(p for p in parts if p)


def _amount_words(record: Mapping[str, Any]) -> str:
    """The amount with its currency; "" when either is not said."""
    currency = record.get("currency")
    if not isinstance(currency, str) or not currency:
        return ""
    return amount_text(record.get("amount"), currency) or ""


def _bearing_times(timeline: pd.DataFrame, at_ns: np.ndarray) -> np.ndarray:
    """Times (ns, sorted) of the rows an attempt can come from: the provider's requests and
    events; with none anywhere (agent-side evidence only) the engine counts tool spans and
    checkpointed tool calls instead. A chunk holding none of these in its own window cannot own
    a group (a group is owned by the chunk of its first attempt)."""
    kind = timeline["kind"].to_numpy()
    bearing = np.isin(kind, PROVIDER_KINDS)
    if not bearing.any():
        bearing = np.isin(kind, AGENT_KINDS)
    return at_ns[bearing]


def sweep_batch(store: Store, sweep_id: str, plan: Plan, chunks: Sequence[int],
                timeline: pd.DataFrame, at_ns: np.ndarray, bearing_ns: np.ndarray,
                long: dict[str, set[str]], options: Options, provider: str,
                source_names: Sequence[str], stats: dict[str, int]) -> list[SweepGroup]:
    """Consecutive chunks analysed at once (one engine run over their windows plus the overlap
    on both sides), each keeping the groups whose first attempt falls inside it, all committed in
    one transaction. A chunk without an attempt row in its own window is done without the
    engine; when no chunk of the batch has one, the engine does not run at all."""
    windows = [plan.chunk(i) for i in chunks]
    starts_ns = np.array([s.value for s, _ in windows], dtype=np.int64)
    lo_b = np.searchsorted(bearing_ns, starts_ns)
    hi_b = np.searchsorted(bearing_ns, np.array([e.value for _, e in windows], dtype=np.int64))
    live = [k for k in range(len(chunks)) if hi_b[k] > lo_b[k]]
    stats["analysed"] = stats.get("analysed", 0) + len(live)
    stats["skipped"] = stats.get("skipped", 0) + len(chunks) - len(live)
    owned_by: dict[int, list[SweepGroup]] = {i: [] for i in chunks}
    prepared: list[Prepared] = []
    if live:
        overlap = pd.Timedelta(seconds=plan.overlap_s)
        first, last = windows[live[0]][0], windows[live[-1]][1]
        lo, hi = np.searchsorted(at_ns, [(first - overlap).value, (last + overlap).value])
        extra = far_rows(timeline, at_ns, lo, hi, long)
        part = timeline.iloc[lo:hi]
        if len(extra):
            part = pd.concat([part, extra]).sort_values("at", kind="stable")
        part = part.reset_index(drop=True)
        start, end = windows[0][0], windows[-1][1]
        owned: list[Group] = []
        for g in analyze(part, options=options).groups:
            t = _first_raw(g)
            if start <= t < end:  # the others: a neighbouring batch's
                owned.append(g)
        slices = group_slices(part, owned, options)
        for g, (rows, sliced) in zip(owned, slices, strict=True):
            i = chunks[int(np.searchsorted(starts_ns, _first_raw(g).value, side="right")) - 1]
            f = _sweep_group(g, i, _investigation_id(sweep_id, g.group_id))
            owned_by[i].append(f)
            prepared.append(prepare(investigation_title(g, f), rows, provider=provider,
                                    sources=source_names, warnings=(),
                                    tags=["sweep", sweep_id, f.layer or "none"],
                                    inv_id=f.investigation_id, analysis=sliced,
                                    options=options))
    done = [ChunkDone(chunk=i, start=s.to_pydatetime(), end=e.to_pydatetime(),
                      groups=owned_by[i]) for i, (s, e) in zip(chunks, windows, strict=True)]
    commit_chunks(store, sweep_id, done, prepared)
    return [f for c in done for f in c.groups]


def batches(plan: Plan, todo: Sequence[int], at_ns: np.ndarray,
            max_rows: int | None = None) -> Iterator[list[int]]:
    """The chunks still to do, in runs of consecutive chunks analysed together: 1, 4, 16, ...
    chunks (the first results come fast, and a kill early loses little), each run's window
    (with the overlap) holding at most `max_rows` rows unless its one chunk holds more."""
    overlap = pd.Timedelta(seconds=plan.overlap_s)
    cap = MAX_BATCH_ROWS if max_rows is None else max_rows

    def rows(first: int, last: int) -> int:
        lo, hi = np.searchsorted(at_ns, [(plan.chunk(first)[0] - overlap).value,
                                         (plan.chunk(last)[1] + overlap).value])
        return int(hi - lo)

    size, pos = 1, 0
    while pos < len(todo):
        batch = [todo[pos]]
        while (len(batch) < size and pos + len(batch) < len(todo)
               and todo[pos + len(batch)] == batch[-1] + 1
               and rows(batch[0], batch[-1] + 1) <= cap):
            batch.append(batch[-1] + 1)
        yield batch
        pos += len(batch)
        size *= BATCH_GROWTH


def run_sweep(store: Store, sources: Sequence[Source], *, since: Any = None, until: Any = None,
              chunk_s: float = DEFAULT_CHUNK_S, overlap_s: float = DEFAULT_OVERLAP_S,
              options: Options | None = None, provider: str = "stripe",
              sweep_id: str | None = None, progress: Progress | None = None,
              stats: dict[str, int] | None = None) -> SweepResult:
    opts = options or Options()
    if not MIN_CHUNK_S <= chunk_s <= MAX_CHUNK_S:  # also false for NaN
        raise SourceError("command line", f"--chunk must be between {MIN_CHUNK_S:g} s and "
                          f"{MAX_CHUNK_S / 86400:g} days")
    if not opts.window_s <= overlap_s <= MAX_OVERLAP_S:
        raise SourceError("command line", "a sweep needs --overlap at least --window "
                          "(attempts linked only by time must fit in the overlap) and at most "
                          f"{MAX_OVERLAP_S / 86400:g} days")
    if since is not None and until is not None:  # refused before anything is read
        _check_chunk_count(utc(since), utc(until), chunk_s)
    computed = sweep_id_for(sources, since, until, chunk_s, overlap_s, opts)
    if sweep_id is not None and sweep_id != computed:
        raise SourceError("command line", f"sweep {sweep_id} was not made from these sources "
                          "and options (a source file changed, or other options were given)")
    sweep_id = computed
    timeline, warnings = load(sources)
    # a folder `twice investigate --out` (or the web export) saved says which sources failed
    manifests, unreadable = manifest.of_sources([t for _, t, _ in sources])
    warnings = [*unreadable, *warnings]
    existing = get_sweep(store, sweep_id)
    if existing is not None:  # a resume: the stored plan, even if a DSN's data grew since
        p = existing.params
        plan = Plan(since=utc(p["since"]), until=utc(p["until"]), chunk_s=chunk_s,
                    overlap_s=overlap_s)
    else:
        plan = plan_for(timeline["at"], since, until, chunk_s, overlap_s)
        _check_chunk_count(plan.since, plan.until, chunk_s)
    params = {"sources": [[n, redact(str(t)), o] for n, t, o in sources],
              "since": plan.since.isoformat(), "until": plan.until.isoformat(),
              # what was asked (None: from the data), so `--resume ID` recomputes the same id
              "since_asked": None if since is None else utc(since).isoformat(),
              "until_asked": None if until is None else utc(until).isoformat(),
              "chunk_s": chunk_s, "overlap_s": overlap_s, "provider": provider,
              "window_s": opts.window_s, "tolerance_s": opts.tolerance_s,
              "bands": [opts.bands.seconds, opts.bands.tens_of_seconds, opts.bands.retention],
              "partial": any(m.partial for m in manifests) or bool(unreadable),
              "errors": [e for m in manifests for e in m.errors]}
    start_sweep(store, sweep_id, params, plan.total,
                [{"source": w.source, "detail": w.detail} for w in warnings])
    done = done_chunks(store, sweep_id)
    record = get_sweep(store, sweep_id)
    found = record.group_count if record else 0
    at_ns = timeline["at"].dt.as_unit("ns").astype("int64").to_numpy()
    bearing_ns = _bearing_times(timeline, at_ns)
    names = sorted({n for n, _, _ in sources})
    long = long_fingerprints(timeline, overlap_s)
    stats = {} if stats is None else stats
    if progress:
        progress(len(done), plan.total, found)
    todo = [i for i in range(plan.total) if i not in done]
    for batch in batches(plan, todo, at_ns):
        found += len(sweep_batch(store, sweep_id, plan, batch, timeline, at_ns, bearing_ns,
                                 long, opts, provider, names, stats))
        done.update(batch)
        if progress:
            progress(len(done), plan.total, found)
    finish_sweep(store, sweep_id)
    record = get_sweep(store, sweep_id)
    assert record is not None
    return SweepResult(record=record, resumed=existing is not None,
                       chunks_skipped=0 if existing is None else existing.chunks_done)


def _check_chunk_count(since: pd.Timestamp, until: pd.Timestamp, chunk_s: float) -> None:
    span = (until - since).total_seconds()
    chunks = int(np.ceil(span / chunk_s))
    if chunks > MAX_CHUNKS:
        raise SourceError("command line", f"--chunk {chunk_s:g}s cuts {since.isoformat()} .. "
                          f"{until.isoformat()} into {chunks:,} chunks; a sweep takes at most "
                          f"{MAX_CHUNKS:,}: choose a longer --chunk")


def options_from(params: dict[str, Any]) -> Options:
    seconds, tens, retention = params["bands"]
    return Options(bands=Bands(seconds=seconds, tens_of_seconds=tens, retention=retention),
                   window_s=params["window_s"], tolerance_s=params["tolerance_s"])
