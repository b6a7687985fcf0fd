"""Clock alignment: how far each source's clock runs from the reference clock.

The reference is the spans' clock when spans were loaded, else the checkpoints'. A provider
stamps `created` in whole seconds on its own clock, often seconds off the agents' hosts, and the
checkpoints' host may differ from the spans' too. Production spans rarely carry the provider's
request id (capturing response headers is off by default), so the offset cannot come from
identified pairs alone: it is the offset under which the most provider requests fall inside
an agent-side window that asked for the same effect (the tool span or checkpointed tool call
with the same customer, amount and currency), refined with the HTTP client spans when there are
any. Each offset is reported with its basis, how many records support it, the range of offsets
they allow, and a `thin` flag when too little supports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from twice.matching import NS, agree, best_offset, ns, stab, whole_seconds
from twice.timeline import Kind, positions
from twice.windows import frame, http_spans, provider_content, span_end, tool_windows

MAX_OFFSET_S = 300.0  # clocks further apart than this are not searched
SAMPLE = 400  # provider requests the offset is voted on (evenly spread over the evidence)
THIN = 3  # fewer supporting records than this: the offset is flagged as thin
THIN_LABEL = "thin evidence"  # how every view flags a thin offset
THIN_WHY = "too few records support this offset, so a verdict that leans on it is less sure"
_SLACK_S = 0.05  # timing noise allowed at each window's edges


@dataclass(frozen=True)
class ClockOffset:
    source: str  # "provider" or "checkpoints"
    seconds: float  # the source's clock minus the reference clock
    pairs: int  # records that support it
    basis: str  # what the records were
    reference: str = "spans"  # the clock it is measured against: spans or checkpoints
    low: float | None = None  # the range of offsets the supporting records allow
    high: float | None = None
    thin: bool = False  # too little supports it: verdicts that depend on it are less sure

    def describe(self) -> str:
        """The offset in words, as every view shows it: how far, against which clock, the
        range its evidence allows, and what voted for it (without the thin flag: views mark
        that themselves, with THIN_LABEL and THIN_WHY)."""
        allows = "" if self.low is None or self.high is None else \
            f" (its evidence allows {self.low:+.3f} … {self.high:+.3f} s)"
        return (f"{self.source} runs {self.seconds:+.3f} s against {self.reference}{allows}; "
                f"{self.pairs} records support it: {self.basis}")


def checkpoint_offset(timeline: pd.DataFrame) -> ClockOffset | None:
    """Checkpoints vs spans: the checkpoint holding a tool result is written just after the tool
    span that produced it ended; without tool call ids on the spans, the checkpoint holding a
    tool call is written just before the first tool span of that thread, tool and arguments
    starts. Only corrected when the disagreement is clear (> 0.5 s). Spans are read on the
    reference clock (`at_aligned`), checkpoints on their own (`at`)."""
    results = frame(timeline, Kind.TOOL_RESULT, ["tool_call_id", "at"]
                     ).drop_duplicates("tool_call_id")
    spans = frame(timeline, Kind.TOOL_SPAN, ["tool_call_id", "at", "at_aligned", "end",
                                              "thread_id", "tool_name", "args_fingerprint"])
    spans = spans.assign(end=span_end(spans).where(spans["end"].notna()),
                         at=spans["at_aligned"])
    diffs = np.empty(0)
    basis = ""
    ended = spans[spans["end"].notna() & spans["tool_call_id"].notna()]
    if not results.empty and not ended.empty:
        last = ended.sort_values("end").drop_duplicates("tool_call_id", keep="last")
        # each result with the last-ended span of its call (an inner join by position)
        span_of = positions(last["tool_call_id"], results["tool_call_id"])
        found = span_of >= 0
        diffs = (ns(results["at"])[found] - ns(last["end"])[span_of[found]]) / NS
        basis = "checkpoint with a tool result vs. the end of that tool's span"
    if not len(diffs):
        intent = ["thread_id", "tool_name", "args_fingerprint"]
        calls = frame(timeline, Kind.TOOL_CALL, ["at", *intent]).dropna(subset=intent)
        firsts = spans.dropna(subset=intent).sort_values("at")
        if not calls.empty and not firsts.empty:
            calls = calls.sort_values("at").rename(columns={"at": "call_at"})
            firsts = firsts.rename(columns={"at": "span_at"})[["span_at", *intent]]
            # each call with the first span of that intent starting after it (on either
            # clock: search a minute around); each span once
            pairs = pd.merge_asof(calls, firsts.sort_values("span_at"), left_on="call_at",
                                  right_on="span_at", by=intent, direction="nearest",
                                  tolerance=pd.Timedelta(seconds=60)).dropna(
                subset=["span_at"]).drop_duplicates("span_at")
            diffs = (ns(pairs["call_at"]) - ns(pairs["span_at"])) / NS
            basis = ("checkpoint with a tool call vs. the start of the tool span with that "
                     "thread, tool and arguments")
    if not len(diffs):
        return None
    offset = float(np.median(diffs))
    if abs(offset) <= 0.5:
        return None
    return ClockOffset("checkpoints", round(offset, 3), len(diffs), basis,
                       low=round(float(np.min(diffs)), 3), high=round(float(np.max(diffs)), 3),
                       thin=len(diffs) < THIN)


_SPANS = (Kind.TOOL_SPAN.value, Kind.HTTP_SPAN.value)
MIN_HOST_SUPPORT = 3  # a span host's clock is corrected only when this many records place it
MAX_HOSTS = 64  # hosts beyond these (by span count) share the reference's clock


def align(timeline: pd.DataFrame, attempts: pd.DataFrame, strong: pd.DataFrame
          ) -> tuple[pd.DataFrame, list[ClockOffset], float]:
    """(timeline with `at_aligned`, the offsets found, the provider's offset in seconds).

    Every span host (`worker`: host.name / service.instance.id) has a clock of its own. The
    provider's offset is measured against each host's spans; the host the most records place
    is the reference, the other hosts' spans are moved onto its clock, then the checkpoints are
    measured against the aligned spans. Without spans the checkpoints are the reference.

    `attempts` are the provider attempts on the provider's clock (`at_raw`); `strong` their
    pairs with the HTTP spans that carried their request id or key (`span_at`, `worker`)."""
    kind = timeline["kind"]
    span_rows = kind.isin(_SPANS)
    has_spans = bool(span_rows.any())
    has_checkpoints = bool((timeline["source"] == "checkpoints").any())
    offsets: list[ClockOffset] = []
    aligned = timeline.copy(deep=False)
    # a column of its own, edited below: without copy-on-write (pandas 2) the shallow copy
    # shares its arrays, and the caller's timeline would be moved with it
    aligned["at_aligned"] = timeline["at_aligned"].copy()
    provider: ClockOffset | None = None
    if has_spans:
        provider, hosts = _span_hosts(timeline, attempts, strong)
        for host, shift in hosts:
            offsets.append(shift)
            rows = span_rows & (timeline["worker"].fillna("") == host)
            aligned.loc[rows, "at_aligned"] = (
                aligned.loc[rows, "at"] - pd.to_timedelta(shift.seconds, unit="s"))
    if has_spans and has_checkpoints:
        ck = checkpoint_offset(aligned)
        if ck is not None:
            offsets.append(ck)
            rows = aligned["source"] == "checkpoints"
            aligned.loc[rows, "at_aligned"] = (
                aligned.loc[rows, "at"] - pd.to_timedelta(ck.seconds, unit="s"))
    if provider is None and (has_spans or has_checkpoints):
        provider = _provider_offset(attempts, strong.iloc[:0], aligned,
                                    "spans" if has_spans else "checkpoints")
    seconds = 0.0
    if provider is not None:
        offsets.insert(0, provider)
        seconds = provider.seconds
        rows = kind.isin([Kind.PROVIDER_EVENT.value, Kind.PROVIDER_REQUEST.value])
        aligned.loc[rows, "at_aligned"] = (
            aligned.loc[rows, "at"] - pd.to_timedelta(seconds, unit="s"))
    return aligned, offsets, seconds


def _span_hosts(timeline: pd.DataFrame, attempts: pd.DataFrame, strong: pd.DataFrame
                ) -> tuple[ClockOffset | None, list[tuple[str, ClockOffset]]]:
    """The provider's offset against the reference span host, and each other host's clock
    against the reference (only those the evidence places clearly)."""
    # the span rows by position, and their hosts: a timeline has 38 columns, and taking all
    # of them for 100,000 rows costs more than the estimate itself
    span_at = np.flatnonzero(timeline["kind"].isin(_SPANS).to_numpy())
    worker = timeline["worker"].iloc[span_at].fillna("")
    hosts = worker.value_counts().index[:MAX_HOSTS]
    worker_of = worker.astype(object).to_numpy()
    paired = strong["worker"].fillna("").astype(object).to_numpy() if len(strong) else None
    found: dict[str, ClockOffset] = {}
    votes: _HostWindows | None = None
    for host in hosts:
        pairs = strong[paired == host] if paired is not None else strong
        # a host's own spans are read only to vote, when no pair places its clock
        if len(pairs):
            est = _paired_offset(attempts, pairs, "spans")
        else:
            if votes is None and not attempts.empty:  # every host's span windows, made once
                votes = _HostWindows(timeline.iloc[span_at])
            est = _provider_offset(attempts, pairs, timeline.iloc[span_at[worker_of == host]],
                                   "spans", made=votes.of(host) if votes else None)
        if est is not None and est.pairs:
            found[host] = est
    if not found:
        return None, []
    order = {host: i for i, host in enumerate(hosts)}  # ties: the host with the most spans
    reference = max(found, key=lambda h: (found[h].pairs, -order[h]))
    base = found[reference]
    provider = ClockOffset("provider", base.seconds, base.pairs, base.basis,
                           "spans" + (f" of {reference}" if reference else ""),
                           base.low, base.high, base.thin)
    shifts = []
    for host, est in found.items():
        seconds = round(base.seconds - est.seconds, 3)
        if host == reference or est.pairs < MIN_HOST_SUPPORT or abs(seconds) < 0.05:
            continue
        shifts.append((host, ClockOffset(
            f"spans of {host}" if host else "spans without a host", seconds, est.pairs,
            "the provider's requests placed in this host's spans, against the reference "
            "host's", provider.reference, None, None, est.thin)))
    return provider, shifts


def _provider_offset(attempts: pd.DataFrame, strong: pd.DataFrame, aligned: pd.DataFrame,
                     reference: str,
                     made: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame] | None = None
                     ) -> ClockOffset | None:
    if attempts.empty:
        return None
    if len(strong):
        return _paired_offset(attempts, strong, reference)
    half = 0.5 * NS if whole_seconds(attempts["at_raw"]) else 0.0
    return _voted_offset(attempts, aligned, reference, 2 * half / NS, made)


def _paired_offset(attempts: pd.DataFrame, strong: pd.DataFrame, reference: str
                   ) -> ClockOffset | None:
    """The provider's offset from the client spans that carried its requests' ids (`strong`):
    the provider logged the request while the span was open, just after it began."""
    if attempts.empty or not len(strong):
        return None
    half = 0.5 * NS if whole_seconds(attempts["at_raw"]) else 0.0
    span_start = pd.to_datetime(strong["span_at"], utc=True)
    prov = attempts.loc[strong.index, "at_raw"]
    diffs = (ns(prov) + half - ns(span_start)) / NS
    return ClockOffset("provider", round(float(np.median(diffs)), 3), len(diffs),
                       "provider request time vs. the HTTP client span that sent it "
                       "(its request id or key)", reference,
                       round(float(np.min(diffs)), 3), round(float(np.max(diffs)), 3),
                       thin=len(diffs) < THIN)


def _sample(attempts: pd.DataFrame) -> pd.DataFrame:
    usable = attempts[attempts["initiator"].ne("automatic").fillna(True)]
    if len(usable) <= SAMPLE:
        return usable
    picks = np.linspace(0, len(usable) - 1, SAMPLE).round().astype(int)
    return usable.sort_values("at_raw").iloc[np.unique(picks)]


def _intervals(att: pd.DataFrame, windows: pd.DataFrame, resolution: float, *,
               around: tuple[float, float] = (-MAX_OFFSET_S, MAX_OFFSET_S),
               content: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(attempt position, lowest, highest offset) for which an attempt's provider time falls
    inside a window (provider time - offset within [start, end]), offsets within `around`."""
    t = ns(att["at_raw"]) / NS
    starts = windows["start"].to_numpy(dtype="float64") / NS
    ends = windows["end"].to_numpy(dtype="float64") / NS
    lo_off, hi_off = around
    q, w = stab(t, starts + lo_off, ends + hi_off + resolution, _SLACK_S)
    if content and len(q):
        # only attempts that say something of their effect can agree with a window
        said = att[["subject", "amount", "currency"]].notna().any(axis=1).to_numpy()[q]
        ok = agree(att.iloc[q].reset_index(drop=True), windows.iloc[w].reset_index(drop=True))
        q, w = q[ok & said], w[ok & said]
    low = np.maximum(t[q] - ends[w] - _SLACK_S, lo_off)
    high = np.minimum(t[q] + resolution - starts[w] + _SLACK_S, hi_off)
    keep = low <= high
    return q[keep], low[keep], high[keep]


class _HostWindows:
    """The tool span and HTTP client span windows of span rows (no checkpoints among them),
    made once and taken host by host: what `tool_windows` and `http_spans` give for one host's
    rows alone (an HTTP span takes its tool span's fields only from a tool span of its own
    host)."""

    def __init__(self, spans: pd.DataFrame) -> None:
        self.tools, self.calls = tool_windows(spans)
        self.tool_host = self.tools["worker"].fillna("").astype(object).to_numpy()
        self.http = http_spans(spans, same_worker=True)
        self.http_host = self.http["worker"].fillna("").astype(object).to_numpy()

    def of(self, host: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        return (self.tools[self.tool_host == host].reset_index(drop=True), self.calls,
                self.http[self.http_host == host].reset_index(drop=True))


def _voted_offset(attempts: pd.DataFrame, aligned: pd.DataFrame, reference: str,
                  resolution: float,
                  made: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame] | None = None
                  ) -> ClockOffset | None:
    """The provider's offset voted from the windows of `aligned` (or the windows already
    `made` of it: tool spans, tool calls, HTTP spans)."""
    att = provider_content(_sample(attempts)).reset_index(drop=True)
    if att.empty:
        return None
    if made is None:
        spans, calls = tool_windows(aligned)
        http = http_spans(aligned)
    else:
        spans, calls, http = made
    http = http[http["end"].notna()]
    http_windows = pd.DataFrame({
        "start": ns(http["at"]),
        "end": ns(http["end"]), "subject": http["subject"].to_numpy(),
        "amount": http["amount"].to_numpy(), "currency": http["currency"].to_numpy()})
    told = [f[f["subject"].notna() & np.isfinite(f["end"])] for f in (spans, calls)]
    told.append(http_windows[http_windows["subject"].notna()])
    windows = pd.concat([f[["start", "end", "subject", "amount", "currency"]] for f in told
                         if not f.empty], ignore_index=True) if any(len(f) for f in told) \
        else pd.DataFrame()
    basis = "provider requests inside the tool spans / tool calls that asked for the same " \
            "customer, amount and currency"
    found = None
    if not windows.empty:
        found = best_offset(*_intervals(att, windows, resolution))
    blind = http_windows[http_windows["subject"].isna()]
    if not blind.empty:
        # the client spans, inside the range the tool windows allow (or anywhere, without
        # them): short windows, so a precise offset when most requests have theirs
        around = (-MAX_OFFSET_S, MAX_OFFSET_S) if found is None else \
            (found[0] - 1.0, found[1] + 1.0)
        refined = best_offset(*_intervals(att, blind, resolution, around=around,
                                          content=False))
        if refined is not None and (found is None or refined[2] * 2 >= found[2]):
            found = refined
            basis = "provider requests inside HTTP client spans (POST), " + (
                "within the offsets the tool windows allow" if not windows.empty else
                "by time alone: no tool window said what it charged")
    if found is None:
        return ClockOffset("provider", 0.0, 0, "no agent-side window to compare the "
                           "provider's times with: not corrected", reference, thin=True)
    low, high, support, tie = found
    seconds = (low + high) / 2
    return ClockOffset("provider", round(seconds, 3), support, basis, reference,
                       round(low, 3), round(high, 3),
                       thin=support < THIN or tie)
