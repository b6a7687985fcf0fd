"""Links out of twice: a Stripe id to the Stripe dashboard, a trace id to the team's Jaeger or
Tempo (`TWICE_TRACE_URL`, a template such as `http://jaeger:16686/trace/{trace_id}`).

Evidence is hostile, so an id enters a URL only when it matches its strict pattern (`pi_`,
`ch_` and `req_` ids are letters and digits; a trace id is 32 or 16 hex digits); anything else
gets no link. The template is the server's setting, checked once: http(s), and `{trace_id}` in
it.

Stripe's dashboard keeps test data under `/test/`: an id whose records say `livemode` false
links there, true to the live dashboard (Stripe's events and `stripe logs tail` lines say it:
the timeline's `livemode` column). An id no record names takes the mode every record of the
evidence agrees on (one account's export is in one mode); where the evidence does not say, or
says both, the link is given twice, live and test, each said as such.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

TRACE_URL_ENV = "TWICE_TRACE_URL"
DASHBOARD = "https://dashboard.stripe.com"
# what a Stripe id may be to enter a URL, by prefix: the dashboard page it opens
_STRIPE_ID = re.compile(r"(pi|ch|req)_[A-Za-z0-9]{6,64}")
_PAGES = {"pi": "payments", "ch": "payments", "req": "logs"}
_TRACE_ID = re.compile(r"[0-9a-f]{32}|[0-9a-f]{16}")
_TEMPLATE = re.compile(r"https?://[A-Za-z0-9.:\[\]_~-]+(/[A-Za-z0-9._~/%?&=+:-]*)?\{trace_id\}"
                       r"[A-Za-z0-9._~/%?&=+:-]*")


@dataclass(frozen=True)
class LinkOut:
    label: str  # plain text: a fixed word and a checked id
    url: str


def stripe_links(value: object, livemode: bool | None = None) -> list[LinkOut]:
    """The dashboard page of a `pi_`, `ch_` or `req_` id (none for anything else); both modes'
    when the record does not say which."""
    if not isinstance(value, str) or not _STRIPE_ID.fullmatch(value):
        return []
    page = f"{_PAGES[value.split('_', 1)[0]]}/{value}"
    if livemode is True:
        return [LinkOut(f"{value} in the Stripe dashboard", f"{DASHBOARD}/{page}")]
    if livemode is False:
        return [LinkOut(f"{value} in the Stripe dashboard (test mode)",
                        f"{DASHBOARD}/test/{page}")]
    return [LinkOut(f"{value} in the Stripe dashboard (live)", f"{DASHBOARD}/{page}"),
            LinkOut("(test mode)", f"{DASHBOARD}/test/{page}")]


def trace_template(environ: dict[str, str] | None = None) -> str | None:
    """The server's trace URL template, or None when it is unset or not a plain http(s) URL
    with `{trace_id}` in it."""
    value = (os.environ if environ is None else environ).get(TRACE_URL_ENV, "").strip()
    return value if _TEMPLATE.fullmatch(value) else None


def trace_link(value: object, template: str | None) -> list[LinkOut]:
    if template is None or not isinstance(value, str) or not _TRACE_ID.fullmatch(value):
        return []
    return [LinkOut(f"trace {value}", template.replace("{trace_id}", value))]


def links_out(ids: Iterable[object], trace_ids: Iterable[object], *,
              template: str | None, livemode: bool | None = None,
              modes: Mapping[str, bool] | None = None) -> list[LinkOut]:
    """Every link out for these Stripe ids and trace ids, each once, in the order given; a
    Stripe id in the mode `modes` gives it, else `livemode` (None: not known)."""
    out: list[LinkOut] = []
    for value in ids:
        mode = (modes or {}).get(value, livemode) if isinstance(value, str) else livemode
        out += stripe_links(value, mode)
    for value in trace_ids:
        out += trace_link(value, template)
    return list(dict.fromkeys(out))


def record_ids(row: dict[str, object]) -> tuple[list[object], list[object]]:
    """A timeline row's Stripe ids (its object, the payment it belongs to, its request) and its
    trace id."""
    ids: list[object] = [row.get("object_id")]
    belongs = row.get("belongs_to")
    if isinstance(belongs, str):
        ids += belongs.split(",")
    ids.append(row.get("request_id"))
    return ids, [row.get("trace_id")]


def livemodes(timeline: pd.DataFrame, ids: Iterable[object]) -> dict[str, bool]:
    """The mode (True: live, False: test) the evidence gives each of these ids: that of the
    records whose object, request or parent payment it is, when they agree; for an id no
    record names, the mode every record agrees on. An id left out is not known."""
    wanted = {v for v in ids if isinstance(v, str) and _STRIPE_ID.fullmatch(v)}
    if not wanted or "livemode" not in timeline.columns:
        return {}
    said = timeline.loc[timeline["livemode"].notna().to_numpy(),
                        ["object_id", "request_id", "belongs_to", "livemode"]]
    if said.empty:
        return {}
    seen: dict[str, set[int]] = {}
    # a parent payment is named in `belongs_to` (comma-separated): only the rows that hold one
    # of the ids are split (a 200k-row timeline has ~50k of them)
    parents = said["belongs_to"]
    parents = parents[parents.str.contains("|".join(map(re.escape, wanted)), regex=True)
                      .fillna(False).astype(bool)].str.split(",").explode()
    for values in (said["object_id"], said["request_id"], parents):
        hit = values.isin(wanted).fillna(False).astype(bool).to_numpy()
        for value, mode in zip(values[hit], said.loc[values.index[hit], "livemode"],
                               strict=True):
            seen.setdefault(str(value), set()).add(int(mode))
    everywhere = set(said["livemode"].astype(int).unique())
    out: dict[str, bool] = {}
    for value in wanted:
        modes = seen.get(value, everywhere)
        if len(modes) == 1:
            out[value] = bool(next(iter(modes)))
    return out
