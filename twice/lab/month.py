"""A "month" of evidence, made of the bundled lab incidents: what the sweep's tests and its
benchmark (benchmarks/sweep_bench.py) sweep.

Each day gets a copy of one sample incident (real LangGraph checkpoints, real stripe SDK requests
against the lab server, real OTel spans), shifted in time, with every id suffixed so the copies
never link to one another. One extra redelivery copy is placed so its two attempts straddle a
midnight (a chunk boundary), and the human-pause sample's two attempts are 33 h apart anyway.

Every copy shares ONE provider clock, as a real month of evidence does (the agent's hosts run
one clock, the provider another): each lab incident was recorded with its own skew (1.4 to
3.3 s), so the engine's offset estimate, a median over the window it is given, would depend on
which incidents a window mixes. Each sample's agent-side rows are moved so that its provider
offset is CLOCK_SKEW_S: the rows keep their relative timing after alignment (same verdicts), and
the provider's raw times, which place a group in a chunk, do not move.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd

from twice.connectors import registry
from twice.engine import analyze
from twice.timeline import concat

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"  # the repository's
ID_COLUMNS = ("thread_id", "checkpoint_id", "tool_call_id", "subject", "idempotency_key",
              "request_id", "object_id", "event_id", "trace_id", "span_id", "parent_span_id",
              "message_id")
TIME_COLUMNS = ("at", "at_aligned", "end")
START = pd.Timestamp("2025-04-01", tz="UTC")
CLOCK_SKEW_S = 2.5  # the provider's clock ahead of the agent's, the same in every copy
PROVIDER_KINDS = ("provider_request", "provider_event")


def sample_names() -> list[str]:
    return sorted(p.name for p in SAMPLES.iterdir() if (p / "truth.json").exists())


@cache
def sample(name: str) -> pd.DataFrame:
    """The sample's timeline, its agent-side clock moved so the provider runs CLOCK_SKEW_S
    ahead of it (see the module's docstring)."""
    found, _ = registry.scan_folder(SAMPLES / name)
    frame = registry.load_all([(n, p, {}) for n, p in found]).rows
    own = [o.seconds for o in analyze(frame).offsets if o.source == "provider"]
    if not own:
        return frame
    agent = ~frame["kind"].isin(PROVIDER_KINDS)
    move = pd.Timedelta(seconds=own[0] - CLOCK_SKEW_S)
    out = frame.copy()
    for col in TIME_COLUMNS:
        out.loc[agent, col] = out.loc[agent, col] + move
    return out


def first_attempt(name: str) -> pd.Timestamp:
    """When the sample's first duplicated attempt happened (raw clock)."""
    groups = analyze(sample(name)).groups
    return min(pd.Timestamp(r["at_raw"]) for g in groups for r in g.records)


def copy_at(frame: pd.DataFrame, shift: pd.Timedelta, tag: str) -> pd.DataFrame:
    out = frame.copy()
    for col in TIME_COLUMNS:
        out[col] = out[col] + shift
    for col in ID_COLUMNS:
        out[col] = (out[col] + f"-{tag}").astype(out[col].dtype)
    return out


def straddling_copy(boundary: pd.Timestamp, before: pd.Timedelta) -> pd.DataFrame:
    """The redelivery incident placed so its first attempt is `before` ahead of `boundary`."""
    shift = boundary - before - first_attempt("redelivery")
    return copy_at(sample("redelivery"), shift, "straddle")


def month(days: int = 30) -> pd.DataFrame:
    # the renewal control spans a month by itself (two charges a month apart, not a duplicate):
    # one copy of it, from the first day
    names = [n for n in sample_names() if n != "control_renewal"]
    copies = []
    if "control_renewal" in sample_names():
        renewal = sample("control_renewal")
        copies.append(copy_at(renewal, START + pd.Timedelta(hours=6) - renewal["at"].min(),
                              "renewal"))
    for day in range(days):
        name = names[day % len(names)]
        frame = sample(name)
        at_six = START + pd.Timedelta(days=day, hours=6)
        copies.append(copy_at(frame, at_six - frame["at"].min(), f"d{day}"))
    # two minutes before the 10th midnight: the 6 min redelivery gap crosses into the next day
    copies.append(straddling_copy(START + pd.Timedelta(days=10), pd.Timedelta(minutes=2)))
    return concat(copies)


def write_month(path: Path, days: int = 30) -> Path:
    month(days).to_parquet(path, index=False)
    return path
