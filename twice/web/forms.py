"""The sidebar's forms that make a new investigation: from uploaded evidence files, or from
live sources (the `twice investigate` form)."""

from __future__ import annotations

import math
import os
import re
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import pandas as pd
import streamlit as st

from twice.connectors import registry
from twice.connectors.base import SourceError
from twice.connectors.live import STRIPE_BASE_URL_ENV
from twice.store import Store, StoreError
from twice.store.links import ViewState
from twice.web import evidence
from twice.web.cache import save_analysed
from twice.web.export import FAILED_PREFIX, LIVE_ERRORS
from twice.web.nav import go
from twice.web.problems import store_problem
from twice.web.text import md_text

if TYPE_CHECKING:
    from twice.connectors.live.investigate import Request, Result


def upload_name(name: str, fallback: str) -> str:
    """The name an uploaded file is kept under for the request: its own last part, unless that
    is no file name at all (empty, `.`, `..`, a NUL, a name too long: a forged upload can send
    any of them)."""
    own = Path(name.replace("\\", "/")).name
    if own in ("", ".", "..") or "\x00" in own or len(own.encode(errors="replace")) > 200:
        return fallback
    return own


def upload_form(store: Store) -> None:
    files = st.file_uploader("Evidence files", accept_multiple_files=True,
                             help="Stripe events, stripe logs tail, request logs, SqliteSaver "
                                  "files, OTLP/Jaeger spans, SQS messages, twice timelines")
    title = st.text_input("Title", key="upload_title")
    if not st.button("Analyse files", disabled=not files):
        return
    with tempfile.TemporaryDirectory() as tmp, st.spinner("Loading evidence…"):
        for i, f in enumerate(files or []):
            (Path(tmp) / upload_name(f.name, f"upload-{i + 1}")).write_bytes(f.getvalue())
        found, skipped = registry.scan_folder(Path(tmp))
        try:
            if not found:
                raise SourceError("upload", "none of these files is a format twice reads")
            loaded = registry.load_all([(n, p, {}) for n, p in found])
        except SourceError as exc:
            st.error(md_text(str(exc).replace(tmp + "/", "")))
            return
        # an uploaded file is named as it was uploaded (raw records show where a row came from)
        loaded.rows["origin"] = loaded.rows["origin"].str.replace(tmp + "/", "", regex=False)
    try:
        inv = save_analysed(store, title or "Uploaded evidence", loaded.rows,
                            sources=sorted({n for n, _ in found}),
                            warnings=[{"source": w.source.replace(tmp + "/", ""),
                                       "detail": w.detail} for w in loaded.warnings])
    except StoreError as exc:
        st.error(store_problem(exc, "The investigation was not saved"))
        return
    go(ViewState(inv=inv, tab="verdict"))


# The live form's secrets (the Stripe key, a DSN with a password, a trace backend URL with
# credentials) are taken out of their fields when the form is sent, so they live for one request
# in this process and are never echoed back to the page, kept in the session, saved or put in a
# link. The trace backend's field gets its URL back without the credentials.
_SECRET_FIELDS = {"live_stripe_key": "_live_stripe_key", "live_checkpoints": "_live_checkpoints",
                  "live_traces": "_live_traces", "live_traces_key": "_live_traces_key",
                  "live_traces_public_key": "_live_traces_public_key"}
# the trace backends the form offers: (label, URL scheme, what the address field takes)
TRACE_BACKENDS = {
    "none": ("No trace backend", "", ""),
    "jaeger": ("Jaeger", "jaeger+", "http://host:16686"),
    "tempo": ("Grafana Tempo", "tempo+", "http://host:3200"),
    "phoenix": ("Arize Phoenix", "phoenix+", "http://host:6006/PROJECT"),
    "langsmith": ("LangSmith", "langsmith+", "PROJECT, or http://host:port/PROJECT self-hosted"),
    "langfuse": ("Langfuse", "langfuse+", "https://cloud.langfuse.com, or http://host:3000"),
}
KEY_LABEL = ("Trace backend API key (Phoenix, LangSmith; Langfuse's secret key; used for this "
             "request only, never saved)")
PUBLIC_KEY_LABEL = "Langfuse public key (Langfuse only; used for this request only, never saved)"
_SCHEME = re.compile(r"[a-z][a-z0-9]*\+https?://", re.I)
# userinfo up to the last "@" before the path (a password may hold an unencoded "@")
_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/\s]*@", re.I)


def without_userinfo(url: str) -> str:
    """`jaeger+http://user:password@host:16686` -> `jaeger+http://host:16686`."""
    return _USERINFO.sub(lambda m: m["scheme"], url.strip())


def trace_target(kind: str, typed: str, key: str,
                 public_key: str = "") -> tuple[str | None, str | None]:
    """(the trace backend URL, LangSmith's key) for the form's choice, address and key. An
    address typed with its scheme (`jaeger+http://...`) is taken as it is. Phoenix's key goes
    in the URL (sent as its bearer token); LangSmith's is given to the backend, "" when the
    field is empty, so the server's own LANGSMITH_API_KEY is never lent to the form. Langfuse's
    public and secret key go in the URL (its basic auth), and "" is given as the key: the
    server's own LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY are never lent either."""
    typed = typed.strip()
    if not typed:
        return None, None
    if kind not in TRACE_BACKENDS or kind == "none":  # the scheme typed says which
        kind = next((k for k, (_, scheme, _) in TRACE_BACKENDS.items()
                     if scheme and typed.lower().startswith((scheme, scheme[:-1] + "://"))),
                    "none")
        if kind == "none":
            return typed, None  # not a backend URL: the backend's parser says so
    scheme = TRACE_BACKENDS[kind][1]
    if _SCHEME.match(typed) or typed.lower().startswith("langsmith://"):
        url = typed
    elif kind == "langsmith" and "://" not in typed:
        url = f"langsmith://{quote(typed, safe='')}"  # a project of LangSmith's own API
    else:
        url = scheme + typed
    has_userinfo = "@" in url.partition("://")[2].partition("/")[0]
    if kind == "phoenix" and key and not has_userinfo:
        head, sep, rest = url.partition("://")
        url = f"{head}{sep}:{quote(key, safe='')}@{rest}"
    if kind == "langfuse" and key and public_key and not has_userinfo:
        head, sep, rest = url.partition("://")
        url = f"{head}{sep}{quote(public_key, safe='')}:{quote(key, safe='')}@{rest}"
    return url, (key if kind == "langsmith" else "" if kind == "langfuse" else None)


def _take_secrets() -> None:
    for field, once in _SECRET_FIELDS.items():
        st.session_state[once] = st.session_state.get(field, "")
        st.session_state[field] = ""
    st.session_state["live_traces"] = without_userinfo(str(st.session_state["_live_traces"]))


def live_form(store: Store) -> None:
    from twice.connectors.live.investigate import Request, investigate

    with st.form("live"):
        subject = st.text_input("Customer, payment intent or charge id", placeholder="cus_...")
        around = st.text_input("Around (UTC)", placeholder="2024-06-03T14:21Z")
        hours = st.number_input("Window (hours)", min_value=0.25, max_value=48.0, value=2.0)
        st.text_input("Stripe restricted key (used for this request only, never saved)",
                      type="password", key="live_stripe_key")
        # what it may name is said when something else is given (twice.web.evidence)
        st.text_input("Checkpoints DSN or SqliteSaver path (optional)", type="password",
                      key="live_checkpoints",
                      placeholder="postgresql://user:password@host/db")
        upload = st.file_uploader("…or upload a SqliteSaver file (optional)",
                                  key="live_checkpoints_file")
        kind = st.selectbox("Trace backend", list(TRACE_BACKENDS),
                            format_func=lambda k: TRACE_BACKENDS[k][0], key="live_traces_kind")
        st.text_input("Trace backend address (optional)",
                      placeholder=TRACE_BACKENDS[str(kind)][2] or "jaeger+http://host:16686",
                      key="live_traces")
        st.text_input(KEY_LABEL, type="password", key="live_traces_key")
        st.text_input(PUBLIC_KEY_LABEL, type="password", key="live_traces_public_key")
        sent = st.form_submit_button("Investigate", on_click=_take_secrets)
    key = str(st.session_state.pop(_SECRET_FIELDS["live_stripe_key"], "") or "")
    typed = str(st.session_state.pop(_SECRET_FIELDS["live_checkpoints"], "") or "")
    traces, traces_key = trace_target(
        str(kind), str(st.session_state.pop(_SECRET_FIELDS["live_traces"], "") or ""),
        str(st.session_state.pop(_SECRET_FIELDS["live_traces_key"], "") or ""),
        str(st.session_state.pop(_SECRET_FIELDS["live_traces_public_key"], "") or ""))
    if not sent:
        return
    if not subject.strip():
        st.error("Customer, payment intent or charge id: give the one the incident is about")
        return
    if not key.strip():  # said of the form's field, not of the command line's variable
        st.error("Stripe restricted key: give the key the provider's events are read with "
                 "(rk_… or sk_…); it is used for this request only, never saved.")
        return
    try:
        when = pd.Timestamp(around)
        if pd.isna(when):  # "" (and "NaT") read as NaT, not as an error
            raise ValueError(around)
        when = when.tz_localize("UTC") if when.tzinfo is None else when.tz_convert("UTC")
    except ValueError:
        st.error("Around: an ISO-8601 time like 2024-06-03T14:21Z")
        return
    if not (isinstance(hours, (int, float)) and math.isfinite(hours) and 0.25 <= hours <= 48):
        st.error("Window: a number of hours from 0.25 to 48")  # a forged widget state, NaN
        return
    if typed.strip() and upload is not None:
        st.error("Checkpoints: give a DSN or path, or upload a file, not both.")
        return
    try:
        checkpoints = evidence.checkpoints_target(typed)
    except evidence.Refused as exc:
        st.error(md_text(str(exc)))
        return
    with tempfile.TemporaryDirectory(prefix="twice-live-") as tmp:
        if upload is not None:  # read for this request, then gone with the folder
            checkpoints = str(Path(tmp) / upload_name(upload.name, "checkpoints.sqlite"))
            Path(checkpoints).write_bytes(upload.getvalue())
        req = Request(subject=subject.strip(), around=when.to_pydatetime(),
                      window=timedelta(hours=hours), stripe_key=key,
                      checkpoints=checkpoints, traces=traces, traces_key=traces_key,
                      stripe_base_url=os.environ.get(STRIPE_BASE_URL_ENV) or None)
        with st.status("Pulling evidence…") as status:
            result = investigate(req, progress=lambda message: status.write(md_text(message)))
    # an uploaded file is named as it was uploaded, not by where it was kept
    errors = [e.replace(tmp + "/", "") for e in result.errors]
    for error in errors:
        st.error(f"Partial: {md_text(error)}")
    if result.rows.empty:
        if not errors:  # said, or the page would look as if Investigate did nothing
            st.warning(f"Nothing found: no evidence about {md_text(req.subject)} from "
                       f"{req.since:%Y-%m-%d %H:%M} to {req.until:%Y-%m-%d %H:%M} UTC.")
        return
    try:
        inv = save_live(store, req, result, tmp)
    except StoreError as exc:
        st.error(store_problem(exc, "The investigation was not saved"))
        return
    go(ViewState(inv=inv, tab="verdict"))


def save_live(store: Store, req: Request, result: Result, tmp: str) -> str:
    """Save a live investigation (`tmp`: the folder an uploaded file was kept in, named by its
    upload name instead); returns its id. The failed sources are saved with it: the page moves
    on, and a shared link and an exported folder must say so too."""
    errors = [e.replace(tmp + "/", "") for e in result.errors]
    rows = result.rows.copy()
    rows["origin"] = rows["origin"].str.replace(tmp + "/", "", regex=False)
    failed = [{"source": LIVE_ERRORS, "detail": f"{FAILED_PREFIX}{e}"} for e in errors]
    warnings = [{"source": w.source.replace(tmp + "/", ""),
                 "detail": w.detail.replace(tmp + "/", "")} for w in result.warnings]
    when = pd.Timestamp(req.around)
    return save_analysed(store, f"Live: {req.subject} around {when:%Y-%m-%d %H:%M}", rows,
                         sources=sorted(set(rows["source"].dropna())),
                         warnings=[*warnings, *failed],
                         tags=["live", *(["partial"] if result.partial else [])])
