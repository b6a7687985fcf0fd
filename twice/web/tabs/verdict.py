"""Verdict: the layer in plain words, its confidence, the layers the evidence cannot rule out,
evidence, findings, the fix, the two attempts side by side, and the clocks it was read on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd
import streamlit as st

from twice.clocks import THIN_LABEL, THIN_WHY, ClockOffset
from twice.controls import MAX_PAIRS, Dismissed, dismissed_pairs
from twice.engine import Analysis, Group, tools_by_call
from twice.formats import amount_text, visible
from twice.layers import LAYERS
from twice.store import effective_overrides
from twice.verdict import Duplicate, fmt_gap
from twice.web.figures import (
    attempt_comparison,
    call_records,
    comparison_html,
    disagreements,
)
from twice.web.links_out import links_out, livemodes, trace_template
from twice.web.nav import CUSTOMER, pages
from twice.web.records import evidence_lines, show_links, show_record
from twice.web.tabs.context import Investigation
from twice.web.text import md_text, shown_frame, tool_words

PAIRS_SHOWN = 10


def render(inv: Investigation) -> None:
    group, dup = inv.group, inv.duplicate
    if group is None or dup is None:
        if inv.failure is not None:  # said above the tabs: no verdict, not "no duplicate"
            st.info("No verdict: the analysis failed (see above).")
            return
        st.success("No logical call executed more than once.")
        _not_duplicates(inv)
        return
    override = effective_overrides(inv.snap.overrides).get(
        (group.group_id, f"{dup.first}>{dup.second}"))
    st.header(f"{dup.layer.value}: {LAYERS[dup.layer].plain}", anchor="verdict")
    cols = st.columns(4)
    cols[0].metric("Confidence", f"{dup.confidence:.2f}")
    cols[1].metric("Gap", fmt_gap(dup.gap_seconds))
    cols[2].metric("Band", dup.band.value.replace("_", " "))
    cols[3].metric("Second effect", "no (protected)" if dup.protected else "yes")
    differ = disagreements(group)
    if differ:  # one intended call charges one customer one amount: these attempts do not
        st.warning("The attempts of this call do not agree on "
                   + "; ".join(f"**{field}** ({', '.join(md_text(v) for v in values)})"
                               for field, values in differ.items())
                   + ": check that they are one intended call before acting on the verdict.")
    if dup.alternatives:
        # the other layers the evidence cannot rule out: said as loudly as the verdict's doubt
        st.warning("\n".join(f"- {md_text(a.describe())}" for a in dup.alternatives))
    if override is not None:
        verb = "confirmed" if override.confirmed else f"overridden to **{override.layer}**"
        st.info(f"Investigator {md_text(override.author)} {verb}: "
                f"{md_text(override.reason)}")
    st.subheader("Evidence")
    evidence_lines(inv.analysis, group, dup)
    st.caption(md_text(f"Attempts: {dup.first} then {dup.second} in group {group.group_id} "
                       f"(thread {group.thread_id}, tool {group.tool_name})."))
    _customer_link(group, dup)
    if group.findings:
        st.subheader("Findings")
        for f in group.findings:
            st.markdown(f"- **{f.code}** — {md_text(f.detail)}  \n  *Fix:* {md_text(f.fix)}")
    st.subheader("Fix")
    st.markdown(md_text(dup.fix))
    if LAYERS[dup.layer].code:
        st.code(LAYERS[dup.layer].code, language="python")
    st.subheader("The two attempts side by side", anchor="attempts")
    table = attempt_comparison(inv.analysis, group.group_id, dup.first, dup.second)
    st.caption("Cells that differ are marked ≠ (red: a field one intended call cannot change).")
    st.html(comparison_html(table))
    _attempt_links(inv)
    _raw_records(inv)
    if inv.analysis.offsets:
        st.subheader("Clocks")
        for offset in inv.analysis.offsets:
            st.markdown(clock_markdown(offset))


def _customer_link(group: Group, dup: Duplicate) -> None:
    """The customer this duplicate charged: a link to every duplicate of theirs."""
    customer = group.record(dup.second).get("subject")
    if isinstance(customer, str) and customer.strip():
        st.page_link(pages()[CUSTOMER], query_params={"customer": customer.strip()}, help="",
                     label=f"Every saved duplicate of {md_text(customer.strip())}")


def _raw_records(inv: Investigation) -> None:
    """Any record of the call as its source gave it, with the file and line it came from."""
    if inv.group is None:
        return
    records = call_records(inv.analysis, inv.group)
    if records.empty:
        return
    st.subheader("Raw records", anchor="raw-records")
    labels = dict(zip(records.index, records["label"], strict=True))
    picked = st.selectbox("Record", list(labels), format_func=lambda i: visible(labels[i]),
                          key=f"raw_record:{inv.inv_id}:{inv.key}")
    show_record(inv.analysis, records.loc[picked])


def _attempt_links(inv: Investigation) -> None:
    """The two attempts' payments and requests in the Stripe dashboard, the call's traces in
    the configured trace viewer."""
    group, dup = inv.group, inv.duplicate
    if group is None or dup is None:
        return
    ids: list[object] = []
    for attempt in (dup.first, dup.second):
        record = group.record(attempt)
        ids += [record.get("object_id"), record.get("request_id")]
    records = call_records(inv.analysis, group)
    traces = list(dict.fromkeys(records["trace_id"].dropna())) if len(records) else []
    show_links(links_out(ids, traces, template=trace_template(),
                         modes=livemodes(inv.analysis.timeline, ids)))


def _not_duplicates(inv: Investigation) -> None:
    """The candidate pairs twice looked at and dismissed (same customer, amount and currency,
    or a repeat of a refused attempt), and why: a control sample explained, not just passed."""
    pairs = dismissed_pairs(inv.analysis, inv.snap.options.window_s)
    st.subheader("Not a duplicate", anchor="not-a-duplicate")
    if not pairs:
        st.markdown("No two attempts look alike (same customer, amount and currency): there was "
                    "nothing to dismiss.")
        return
    more = " (the nearest shown)" if len(pairs) >= MAX_PAIRS else ""
    st.markdown(f"{len(pairs)} look-alike pair(s) dismissed{more}:")
    tools = attempt_tools(inv.analysis, [a for d in pairs for a in (d.first, d.second)])
    for d in pairs[:PAIRS_SHOWN]:
        st.markdown(f"- {dismissed_words(d, tools)}  \n  "
                    + "; ".join(md_text(w) for w in d.why))
    # the attempts' ids stay in the table (its data twin), for finding them in the evidence
    table = pd.DataFrame([{"customer": d.customer, "amount": d.amount, "currency": d.currency,
                           "tool": " / ".join(pair_tools(d, tools)) or None,
                           "first": d.first, "second": d.second, "gap (s)": d.gap_seconds,
                           "why not a duplicate": "; ".join(d.why)} for d in pairs])
    st.dataframe(shown_frame(table), hide_index=True, width="stretch")


def attempt_tools(analysis: Analysis, attempt_ids: Iterable[str]) -> dict[str, str]:
    """The tool each of these attempts' calls ran, as the evidence names it (the engine's
    lookup, `Group.tool_name`); an attempt whose evidence names none is left out."""
    attempts = analysis.attempts
    if attempts.empty:
        return {}
    names = tools_by_call(analysis.timeline)
    wanted = attempts[attempts["attempt_id"].astype(str).isin(set(attempt_ids))
                      & attempts["tool_call_id"].notna()]
    return {str(a): str(names[c]) for a, c in zip(wanted["attempt_id"], wanted["tool_call_id"],
                                                    strict=True) if c in names.index}


def pair_tools(d: Dismissed, tools: Mapping[str, str]) -> list[str]:
    """The tools of a dismissed pair's two attempts, each once, as a label shows them."""
    return list(dict.fromkeys(t for a in (d.first, d.second) if (t := tool_words(tools.get(a)))))


def dismissed_words(d: Dismissed, tools: Mapping[str, str]) -> str:
    """A dismissed look-alike pair named in words, as markdown (issue 20: customer · amount ·
    tool · gap; a pair has no layer), never by its attempts' ids; a tool the evidence does not
    name is left out."""
    amount = amount_text(d.amount, d.currency) or "no amount"
    parts = [md_text(d.customer or "no customer"), md_text(amount)]
    if named := pair_tools(d, tools):
        parts.append(" / ".join(md_text(t) for t in named))
    return f"**{' · '.join(parts)}** · gap {fmt_gap(d.gap_seconds)}"


def clock_markdown(offset: ClockOffset) -> str:
    """One clock offset as a markdown list item; a thin one carries a visible flag."""
    line = f"- {md_text(offset.describe())}"
    if offset.thin:
        line += f"  \n  :orange-badge[{THIN_LABEL}] {md_text(THIN_WHY)}"
    return line
