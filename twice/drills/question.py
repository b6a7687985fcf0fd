"""The question a trainee sees: the page, and the evidence of each source, revealed on request.

A drill starts from the page ("cus_... may have been charged twice around 14:21 UTC"). The
trainee asks for a source and gets it: the provider's payment requests (the customer's, or the
whole window's on a busy level), the agent's checkpoints, the traces, the queue's receive log of
the threads behind them. A source the team did not export says so.

Every value is shown as text (times to the millisecond, every fingerprint column), and the same
text is what the explanation cites (`twice.drills.explain`), so what an explanation names can be
checked against what was shown. twice's grouping, verdicts, evidence and findings are withheld:
their wording names layers, and their mere presence or absence would give a control away.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from twice.connectors import registry
from twice.drills.curriculum import CURRICULUM, SOURCE_WORDS, SOURCES, Drill
from twice.engine import Analysis, analyze
from twice.formats import money
from twice.layers import Band, Bands, Layer
from twice.timeline import Kind

EFFECT_PATH = "/v1/payment_intents"
NEAR_S = 120.0  # a busy level shows the provider's requests this close to the customer's
DETAIL_CHARS = 120
BANDS = Bands()


def band_text(band: Band, bands: Bands = BANDS) -> str:
    """A band named by its time only (a layer's name would prime the answer)."""
    low, mid, high = (gap_text(x) for x in (bands.seconds, bands.tens_of_seconds,
                                            bands.retention))
    edges = {Band.SECONDS: f"under {low}", Band.TENS_OF_SECONDS: f"{low} to {mid}",
             Band.MINUTES: f"{mid} to {high}", Band.BEYOND_RETENTION: f"over {high}"}
    return edges[band]


def gap_text(seconds: float) -> str:
    """`0.412 s`, `31.007 s`, `6 min 12.481 s`, `30 h 4 min`; whole edges as `10 s`, `2 min`."""
    if seconds == int(seconds) and seconds >= 10:  # a band's edge
        whole = int(seconds)
        if whole % 3600 == 0:
            return f"{whole // 3600} h"
        return f"{whole // 60} min" if whole % 60 == 0 else f"{whole} s"
    if seconds < 120:
        return f"{seconds:.3f} s"
    if seconds < 7200:
        minutes, rest = divmod(seconds, 60)
        return f"{int(minutes)} min {rest:06.3f} s"
    hours, rest = divmod(int(round(seconds)), 3600)
    return f"{hours} h {rest // 60} min"


def time_text(at: Any) -> str:
    """A UTC time to the millisecond: `2025-05-18 12:43:57.219`."""
    if at is None or pd.isna(at):
        return "-"
    return pd.Timestamp(at).tz_convert("UTC").strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def cell(value: Any) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "-"
    if isinstance(value, pd.Timestamp):
        return time_text(value)
    return str(value)


def short(text: Any) -> str:
    """Evidence text cut to DETAIL_CHARS on one line (the cut is marked)."""
    value = cell(text)
    one_line = " ".join(value.split())
    return one_line if len(one_line) <= DETAIL_CHARS else one_line[:DETAIL_CHARS - 1] + "…"


@dataclass(frozen=True)
class Gap:
    first: str  # request ids
    second: str
    gap_seconds: float
    band: Band

    @property
    def text(self) -> str:
        return gap_text(self.gap_seconds)

    @property
    def band_text(self) -> str:
        return band_text(self.band)


@dataclass
class Question:
    drill: Drill
    customer: str
    amount: str  # the alert's amount, as shown ("49.00 USD")
    page: str  # what the alert says
    rows: dict[str, pd.DataFrame | None]  # per source, timeline rows (None: not exported)
    shown: dict[str, pd.DataFrame | None]  # the same as display text, columns in plain words
    gaps: list[Gap]  # between the customer's requests of the alert's amount
    clocks: list[str]  # how far each source's clock runs from the reference clock
    analysis: Analysis  # for the charts: every duplicate's layer unknown, no evidence
    window: tuple[pd.Timestamp, pd.Timestamp]

    @property
    def level_title(self) -> str:
        return CURRICULUM[self.drill.level].title

    def source_text(self, source: str) -> str:
        """One source as the trainee sees it once asked for."""
        frame = self.shown[source]
        title = SOURCE_WORDS[source][0].upper() + SOURCE_WORDS[source][1:]
        if frame is None:
            return f"{title}: not exported for this incident."
        if frame.empty:
            return f"{title}: no records for these threads."
        parts = [f"{title}:", frame.to_string(index=False)]
        if source == "provider":
            parts += ["", "Gaps between the customer's requests of " + self.amount + ":"]
            parts += [f"  {g.first} -> {g.second}: {g.text} ({g.band_text})"
                      for g in self.gaps] or ["  (one request)"]
            parts += ["", "Clocks:"] + [f"  {c}" for c in self.clocks]
        return "\n".join(parts)

    def text(self, opened: Iterable[str] = SOURCES) -> str:
        """Everything the trainee was shown: the page and the sources opened."""
        return "\n\n".join([self.page, *(self.source_text(s) for s in opened)])


def load(folder: Path) -> tuple[dict[str, Any], Analysis]:
    """The drill's truth and twice's analysis (cached: a generated folder never changes)."""
    return _load(str(Path(folder).resolve()))


@functools.lru_cache(maxsize=16)
def _load(folder_text: str) -> tuple[dict[str, Any], Analysis]:
    folder = Path(folder_text)
    truth = json.loads((folder / "truth.json").read_text())
    found, _ = registry.scan_folder(folder)
    loaded = registry.load_all([(n, p, {}) for n, p in found])
    return truth, analyze(loaded.rows, loaded.warnings)


def _blind(analysis: Analysis) -> Analysis:
    """The analysis with every verdict made unknown and its evidence, findings and fix removed
    (the charts colour by layer)."""
    groups = [replace(g, findings=[], duplicates=[
        replace(d, layer=Layer.UNKNOWN, confidence=0.0, evidence=(), fix="")
        for d in g.duplicates]) for g in analysis.groups]
    return replace(analysis, groups=groups)


def _text(series: pd.Series) -> pd.Series:
    return series.astype("string")


def payment_requests(analysis: Analysis) -> pd.DataFrame:
    """The provider's payment requests (creates of a payment), oldest first."""
    a = analysis.attempts
    mine = a[a["path"].fillna(EFFECT_PATH) == EFFECT_PATH]
    return mine.sort_values(["at", "attempt_id"]).reset_index(drop=True)


def _amount(row: pd.Series) -> str:
    if pd.isna(row["amount"]) or not isinstance(row["currency"], str):
        return "-"
    return money({row["currency"]: int(row["amount"])})


def _provider_shown(rows: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "time (provider's clock)": rows["at_raw"].map(time_text),
        "time (aligned)": rows["at"].map(time_text),
        "request id": rows["request_id"].map(cell),
        "customer": rows["subject"].map(cell),
        "amount": [_amount(r) for _, r in rows.iterrows()],
        "idempotency key": rows["idempotency_key"].map(cell),
        "effect": rows["effect"].map(cell),
        "payment": rows["object_id"].map(cell),
        "thread (metadata)": rows["thread_id"].map(cell),
    })


_RECORDS = {Kind.CHECKPOINT.value: "checkpoint", Kind.TOOL_CALL.value: "tool call",
            Kind.TOOL_RESULT.value: "tool result"}


def _checkpoints_shown(rows: pd.DataFrame) -> pd.DataFrame:
    record = [f"checkpoint ({r['name']})" if r["kind"] == Kind.CHECKPOINT.value and
              isinstance(r["name"], str) else _RECORDS[r["kind"]] for _, r in rows.iterrows()]
    result = [short(r["detail"]) if r["kind"] == Kind.TOOL_RESULT.value else
              (short(r["args"]) if r["kind"] == Kind.TOOL_CALL.value else "-")
              for _, r in rows.iterrows()]
    return pd.DataFrame({
        "time": rows["at_aligned"].map(time_text),
        "thread": rows["thread_id"].map(cell),
        "step": rows["step"].map(cell),
        "record": record,
        "tool call id": rows["tool_call_id"].map(cell),
        "worker": rows["worker"].map(cell),
        "arguments / result": result,
    })


def _spans_shown(rows: pd.DataFrame) -> pd.DataFrame:
    duration = [gap_text((e - a).total_seconds()) if not (pd.isna(a) or pd.isna(e)) else "-"
                for a, e in zip(rows["at"], rows["end"], strict=True)]
    return pd.DataFrame({
        "start": rows["at_aligned"].map(time_text),
        "duration": duration,
        "span": ["tool" if k == Kind.TOOL_SPAN.value else "HTTP client" for k in rows["kind"]],
        "span id": rows["span_id"].map(cell),
        "parent span": rows["parent_span_id"].map(cell),
        "trace id": rows["trace_id"].map(cell),
        "worker": rows["worker"].map(cell),
        "tool call id": rows["tool_call_id"].map(cell),
        "resend count": rows["resend_count"].map(cell),
        "key sent": rows["idempotency_key"].map(cell),
        "request id": rows["request_id"].map(cell),
        "status": rows["outcome"].map(cell),
        "detail": rows["detail"].map(short),
    })


def _queue_shown(rows: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "received": rows["at_aligned"].map(time_text),
        "worker": rows["worker"].map(cell),
        "queue": rows["name"].map(cell),
        "message id": rows["message_id"].map(cell),
        "receive count": rows["delivery_count"].map(cell),
        "thread": rows["thread_id"].map(cell),
    })


def _near(times: pd.Series, anchors: pd.Series, seconds: float) -> pd.Series:
    near = pd.Series(False, index=times.index)
    for anchor in anchors.dropna():
        near |= (times - anchor).abs() <= pd.Timedelta(seconds=seconds)
    return near


def _clocks(analysis: Analysis, spans_shown: bool) -> list[str]:
    out = []
    for offset in analysis.offsets:
        if offset.source.startswith("spans") and not spans_shown:
            continue
        who = "the provider's clock" if offset.source == "provider" else f"the {offset.source}"
        way = "ahead of" if offset.seconds >= 0 else "behind"
        out.append(f"{who} runs {abs(offset.seconds):.3f} s {way} the {offset.reference}: "
                   f"aligned = raw {'-' if offset.seconds >= 0 else '+'} "
                   f"{abs(offset.seconds):.3f} s")
    return out or ["every source's clock agrees with the agent's (no offset found)"]


def _incident_request(truth: dict[str, Any], mine: pd.DataFrame) -> pd.Series:
    ids = [r for r in truth.get("request_ids", []) if r in set(mine["request_id"])]
    first = mine[mine["request_id"] == ids[0]] if ids else mine
    return first.iloc[0]


def question(drill: Drill, folder: Path) -> Question:
    truth, analysis = load(folder)
    missing = set(json.loads((folder / "drill.json").read_text()).get("missing", []))
    customer = str(truth["customer"])
    requests = payment_requests(analysis)
    mine = requests[requests["subject"] == customer].reset_index(drop=True)
    incident = _incident_request(truth, mine)
    same = mine[(mine["amount"] == incident["amount"]) &
                (mine["currency"] == incident["currency"])].reset_index(drop=True)
    gaps = [Gap(str(a["request_id"]), str(b["request_id"]),
                round(max((b["at"] - a["at"]).total_seconds(), 0.0), 3),
                BANDS.classify(max((b["at"] - a["at"]).total_seconds(), 0.0)))
            for (_, a), (_, b) in zip(same.iterrows(), same.iloc[1:].iterrows(), strict=False)]

    busy = CURRICULUM[drill.level].busy
    provider = requests[_near(requests["at"], mine["at"], NEAR_S)] if busy else mine
    provider = provider.reset_index(drop=True)

    tl = analysis.timeline
    threads = set(mine["thread_id"].dropna().astype(str))
    calls = tl[(tl["kind"] == Kind.TOOL_CALL.value) & (tl["subject"] == customer)]
    threads |= set(calls["thread_id"].dropna().astype(str))
    in_threads = tl["thread_id"].isin(threads)
    kinds = tl["kind"]
    checkpoints = tl[in_threads & kinds.isin(list(_RECORDS))]
    tool_spans = tl[in_threads & (kinds == Kind.TOOL_SPAN.value)]
    traces = set(tool_spans["trace_id"].dropna().astype(str))
    spans = tl[kinds.isin([Kind.TOOL_SPAN.value, Kind.HTTP_SPAN.value]) & (
        in_threads | tl["trace_id"].isin(traces) | tl["request_id"].isin(set(mine["request_id"])))]
    queue = tl[in_threads & (kinds == Kind.QUEUE_RECEIVE.value)]

    def ordered(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.sort_values(["at_aligned", "step"], kind="stable").reset_index(drop=True)

    rows: dict[str, pd.DataFrame | None] = {
        "provider": provider,
        "checkpoints": ordered(checkpoints),
        "spans": None if "spans" in missing else ordered(spans),
        "queue": None if "queue" in missing else ordered(queue),
    }
    makers = {"provider": _provider_shown, "checkpoints": _checkpoints_shown,
              "spans": _spans_shown, "queue": _queue_shown}
    shown = {s: (None if f is None else makers[s](f)) for s, f in rows.items()}
    amount = _amount(incident)
    page = (f"Drill {drill.id} (level {drill.level}: {CURRICULUM[drill.level].title}). "
            f"Support writes: customer {customer} may have been charged {amount} twice around "
            f"{pd.Timestamp(incident['at']):%Y-%m-%d %H:%M} UTC. Was one intended call "
            "executed twice, and if so which layer repeated it? What is the fix?")
    times = pd.concat([f["at_aligned"] for f in rows.values()
                       if f is not None and "at_aligned" in f] + [mine["at"]]).dropna()
    lo, hi = (times.min(), times.max()) if len(times) else (incident["at"], incident["at"])
    return Question(drill, customer, amount, page, rows, shown, gaps,
                    _clocks(analysis, rows["spans"] is not None), _blind(analysis),
                    (lo - pd.Timedelta(seconds=30), hi + pd.Timedelta(seconds=30)))
