"""The web app's live form (the `twice investigate` form) and what it may read and keep.

Live sources are real: the lab's Stripe-compatible server (the real stripe SDK calls it) holding
a step-retry incident, the incident's SqliteSaver checkpoints, and a trace backend that demands
basic auth and echoes the credentials in its 401 page. The app runs in-process (AppTest) on a
SQLite store; the upload is sent from chromium.

- Trace backend credentials: used for the request, then gone: the field keeps the URL without
  them, and neither the password nor its basic-auth form is on the page or in the store's file.
- Server files: a path is read only inside `TWICE_EVIDENCE_DIR`; without it, and for anything
  outside it (the app's own store, `..`, a link pointing out), the form refuses, plainly. A DSN
  must bring its own host, user and password and name no file of the server.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import streamlit as st
from psycopg.conninfo import conninfo_to_dict
from streamlit.testing.v1 import AppTest

from tests.web.conftest import ROOT, chromium, investigate_in_browser, running_app, samples_in
from twice.lab.scenarios import run_scenario_with_server
from twice.lab.trace_server import TraceServer
from twice.store import open_store
from twice.web.evidence import Refused, web_dsn
from twice.web.forms import upload_name

KEY = "rk_test_51LiveFormPlantedRestrictedKey0007"
TRACE_PASSWORD = "tr4ce-Form-Pw-planted"
TRACES_USER = "ops"


@dataclass
class Lab:
    folder: Path
    customer: str
    around: str
    stripe_url: str
    traces_url: str


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    folder, server = run_scenario_with_server(
        "step_retry", tmp_path_factory.mktemp("lab") / "incident", seed=5, noise=3)
    truth = json.loads((folder / "truth.json").read_text())
    events = json.loads((folder / "events.json").read_text())["data"]
    first = min(e["created"] for e in events
                if e["data"]["object"].get("customer") == truth["customer"])
    server.api_keys[KEY] = "read_only"
    server.start()
    try:
        with TraceServer(folder / "spans.jsonl", auth=(TRACES_USER, TRACE_PASSWORD),
                         echo_credentials=True) as traces:
            yield Lab(folder, truth["customer"],
                      datetime.fromtimestamp(first, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                      server.url, traces.url)
    finally:
        server.stop()


@pytest.fixture
def store(tmp_path: Path, lab: Lab, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "store" / "investigations.sqlite3"
    monkeypatch.setenv("TWICE_STORE", str(path))
    monkeypatch.setenv("TWICE_STRIPE_BASE_URL", lab.stripe_url)
    monkeypatch.delenv("TWICE_EVIDENCE_DIR", raising=False)
    monkeypatch.delenv("TWICE_ACCESS_TOKEN", raising=False)
    st.cache_resource.clear()  # the app caches its store per process
    yield path
    st.cache_resource.clear()


def _field(at: AppTest, label: str) -> Any:
    return next(t for t in at.text_input if t.label == label)


def investigate(lab: Lab, *, checkpoints: str = "", traces: str = "",
                customer: str | None = None, around: str | None = None) -> AppTest:
    """Open the app, fill the sidebar's live form, press Investigate."""
    at = AppTest.from_file(str(ROOT / "twice" / "web" / "main.py"), default_timeout=180)
    at.run()
    _field(at, "Customer, payment intent or charge id").set_value(
        lab.customer if customer is None else customer)
    _field(at, "Around (UTC)").set_value(lab.around if around is None else around)
    at.text_input(key="live_stripe_key").set_value(KEY)
    at.text_input(key="live_checkpoints").set_value(checkpoints)
    at.text_input(key="live_traces").set_value(traces)
    next(b for b in at.button if b.label == "Investigate").click().run()
    assert not at.exception, at.exception
    return at


def shown(at: AppTest) -> str:
    parts = [*at.markdown, *at.error, *at.title, *at.header, *at.caption, *at.text, *at.code,
             *at.text_input]
    return "\n".join(str(getattr(p, "value", "")) for p in parts)


def saved_titles(store: Path) -> list[str]:
    return [s.title for s in open_store(str(store)).list() if s.title.startswith("Live:")]


# -- the trace backend's credentials -----------------------------------------------------------
def test_trace_backend_credentials_are_used_once_and_kept_nowhere(
        lab: Lab, store: Path) -> None:
    wrong = "wrong-" + TRACE_PASSWORD  # the backend refuses it, and echoes it in its 401
    host = lab.traces_url.removeprefix("http://")
    at = investigate(lab, traces=f"jaeger+http://{TRACES_USER}:{wrong}@{host}")
    # the field keeps the URL, not the credentials
    assert at.text_input(key="live_traces").value == f"jaeger+http://{host}"
    assert at.text_input(key="live_stripe_key").value == ""
    # the provider's events were read: an investigation was saved, partial, naming the 401
    (saved,) = [s for s in open_store(str(store)).list() if s.title.startswith("Live:")]
    snap = open_store(str(store)).get(saved.id)
    assert snap is not None and "partial" in snap.summary.tags
    details = [str(w.get("detail", "")) for w in snap.warnings]
    assert any("HTTP 401" in d and "***" in d for d in details), details
    basic = base64.b64encode(f"{TRACES_USER}:{wrong}".encode()).decode()
    files = [p.read_bytes() for p in store.parent.glob("*") if p.is_file()]
    assert files
    for secret in (TRACE_PASSWORD, basic, KEY):
        assert secret not in shown(at)
        assert all(secret.encode() not in data for data in files)


# -- what the form may read --------------------------------------------------------------------
def test_a_server_path_is_refused_without_an_evidence_folder(lab: Lab, store: Path) -> None:
    at = investigate(lab, checkpoints=str(store))  # the app's own investigation store
    errors = [e.value for e in at.error]
    assert any("reads no files on its server" in e for e in errors), errors
    assert any("upload the SqliteSaver file" in e for e in errors)
    assert "schema_version" not in shown(at) and "investigations" not in shown(at).lower()
    assert saved_titles(store) == []


def test_only_files_inside_the_evidence_folder_are_read(
        lab: Lab, store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "evidence"
    (folder / "team-a").mkdir(parents=True)
    shutil.copy(lab.folder / "checkpoints.sqlite", folder / "team-a" / "agent.sqlite")
    (folder / "team-a" / "store-link.sqlite").symlink_to(store)
    monkeypatch.setenv("TWICE_EVIDENCE_DIR", str(folder))
    for outside in (str(store), "../store/investigations.sqlite3", "team-a/store-link.sqlite",
                    str(folder / "team-a" / ".." / ".." / "store" / "investigations.sqlite3")):
        at = investigate(lab, checkpoints=outside)
        errors = [e.value for e in at.error]
        assert any("only in its evidence folder" in e for e in errors), (outside, errors)
        assert str(folder) not in "\n".join(errors)  # the folder is named, not where it is
    assert saved_titles(store) == []
    # inside it: relative to the folder, or absolute
    for inside in ("team-a/agent.sqlite", str(folder / "team-a" / "agent.sqlite")):
        at = investigate(lab, checkpoints=inside)
        assert [e.value for e in at.error] == []
    summaries = [s for s in open_store(str(store)).list() if s.title.startswith("Live:")]
    assert len(summaries) == 2
    assert all("checkpoints" in s.sources and "partial" not in s.tags for s in summaries)


@pytest.mark.parametrize(("dsn", "why"), [
    ("postgresql:///agent", "names the database's host"),  # the server's local socket
    ("postgresql://reader:pw@%2Fvar%2Frun%2Fpostgresql/agent", "names the database's host"),
    # an empty entry in a host list is the local socket too (libpq's reading), peer login
    ("postgresql://root:wrongpw@127.0.0.1:1,:5432/db", "every host entry"),
    ("postgresql://root:wrongpw@db.internal/db?host=db.internal,,x", "every host entry"),
    ("postgresql://root:pw@db.internal/db?host=@abstract", "every host entry"),
    ("postgresql://reader@db.internal/agent", "user and password"),  # the server's ~/.pgpass
    ("postgresql://db.internal/agent", "user and password"),
    ("postgresql://reader:pw@db.internal/agent?passfile=/root/.pgpass", "leave out passfile"),
    ("postgresql://reader:pw@db.internal/agent?sslkey=/etc/ssl/private/k.pem&sslcert=/x",
     "leave out sslcert, sslkey"),
    ("postgresql://reader:pw@db.internal/agent?service=prod", "leave out service"),
    # libpq 18's TLS key log: the server would write its TLS secrets where the form says
    ("postgresql://reader:pw@db.internal/agent?sslkeylogfile=/tmp/keys", "sslkeylogfile"),
    ("postgresql://reader:pw@db.internal/agent?sslrootcert=/etc/x.pem", "sslrootcert"),
    ("postgresql://reader:pw@db.internal/agent?require_auth=none", "require_auth"),
    ("postgresql://reader:pw@db.internal/agent?target_session_attrs=any", "target_session"),
    ("postgresql://reader:pw@db.internal/agent?options=-cwork_mem%3D1", "options may only"),
    ("postgresql://reader:pw@db.internal/agent?options=-csearch_path%3Dx%20-cwork_mem%3D1",
     "options may only"),
    ("postgresql://reader:pw@db.internal/agent?sslmode=verify-ca", "sslmode is one of"),
    ("postgresql://reader:pw@db.internal/agent?hostaddr=db.example", "IP addresses only"),
    ("postgresql://reader:pw@db.internal/host%3Dx", "not a connection string"),
    ("postgresql://reader:pw@db.internal:9x/agent", "port takes numbers"),
    ("postgresql://reader:pw@db.internal/agent?x=%zz&", "not a valid"),
])
def test_a_dsn_that_leans_on_the_servers_settings_is_refused(dsn: str, why: str) -> None:
    with pytest.raises(Refused, match=why) as refused:
        web_dsn(dsn)
    assert "pw" not in str(refused.value)


def test_a_dsn_with_its_own_host_user_and_password_reaches_that_host_only() -> None:
    given = "postgresql://reader:s3%40cret@db.internal:5433,db2.internal/agent?sslmode=require"
    used = conninfo_to_dict(web_dsn(given))
    assert {k: used[k] for k in ("host", "port", "user", "password", "dbname", "sslmode")} == {
        "host": "db.internal,db2.internal", "port": "5433,", "user": "reader",
        "password": "s3@cret", "dbname": "agent", "sslmode": "require"}
    assert used["sslcertmode"] == "disable"  # the server's own client certificate stays home


def test_a_web_dsn_reads_the_database_with_its_password_and_nothing_else(
        postgres_dsn: str) -> None:
    """Against the real server: the DSN the form takes logs in with its password (scram), and
    its parameters refuse a login that asks for no password (the server's local socket trusts
    every local user, as a default install's peer login does)."""
    dsn = web_dsn(postgres_dsn)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        (sockets,) = conn.execute("SHOW unix_socket_directories").fetchone() or ("",)
    wrong = postgres_dsn.replace("postgres:", "postgres:wrong", 1)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(web_dsn(wrong)).close()
    local = {**conninfo_to_dict(dsn), "host": sockets.split(",")[0]}
    local.pop("password")
    local.pop("hostaddr", None)
    psycopg.connect(**{**local, "require_auth": "", "sslcertmode": "allow"}).close()  # trusted
    with pytest.raises(psycopg.OperationalError, match="authentication"):
        psycopg.connect(**local).close()


def test_a_dsn_refusal_is_said_in_the_form(lab: Lab, store: Path) -> None:
    at = investigate(lab, checkpoints="postgresql://reader@127.0.0.1:9/agent")
    assert any("user and password" in e.value for e in at.error)
    assert saved_titles(store) == []


# -- what the form says when there is nothing to investigate ----------------------------------
@pytest.mark.parametrize(("customer", "around", "said"), [
    ("", None, "Customer, payment intent or charge id: give"),
    (None, "", "Around: an ISO-8601 time"),  # pandas reads "" as NaT, not as an error
    (None, "   ", "Around: an ISO-8601 time"),
])
def test_a_missing_customer_or_time_is_said(lab: Lab, store: Path, customer: str | None,
                                             around: str | None, said: str) -> None:
    at = investigate(lab, customer=customer, around=around)
    assert [e.value for e in at.error if said in e.value], [e.value for e in at.error]
    assert saved_titles(store) == []


def test_an_investigation_that_finds_nothing_says_so(lab: Lab, store: Path) -> None:
    at = investigate(lab, customer="cus_nobody")
    assert not at.error
    (warning,) = [w.value for w in at.warning if "Nothing found" in w.value]
    assert "cus\\_nobody" in warning and "UTC" in warning
    assert saved_titles(store) == []


# -- an uploaded SqliteSaver file (a real browser sends it) ------------------------------------
def test_an_uploaded_checkpoints_file_is_read(lab: Lab, tmp_path: Path) -> None:
    store = tmp_path / "investigations.sqlite3"
    with running_app({"TWICE_STORE": str(store), "TWICE_STRIPE_BASE_URL": lab.stripe_url,
                      "TWICE_ACCESS_TOKEN": "", "TWICE_EVIDENCE_DIR": ""}) as url, \
            chromium() as browser:
        page = browser.new_page()
        page.goto(url)
        page.get_by_text("Incidents").first.wait_for(timeout=120_000)
        samples_in(page)  # a fresh store: its last refresh could eat the Investigate click
        page.get_by_text("New investigation from live sources").click()
        page.get_by_role("textbox", name="Customer, payment intent or charge id").fill(
            lab.customer)
        page.get_by_role("textbox", name="Around (UTC)").fill(lab.around)
        page.get_by_label("Stripe restricted key (used for this request only, never saved)") \
            .fill(KEY)
        uploader = page.locator("[data-testid='stFileUploader']").filter(
            has_text="upload a SqliteSaver file")
        uploader.locator("input[type='file']").set_input_files(
            str(lab.folder / "checkpoints.sqlite"))
        uploader.get_by_text("checkpoints.sqlite").wait_for(timeout=60_000)
        investigate_in_browser(page)
        assert "step_retry" in page.locator("body").inner_text()
    (saved,) = [s for s in open_store(str(store)).list() if s.title.startswith("Live:")]
    assert "checkpoints" in saved.sources and "partial" not in saved.tags


@pytest.mark.parametrize(("sent", "kept"), [
    ("checkpoints.sqlite", "checkpoints.sqlite"), ("../../etc/cron.d/x", "x"),
    ("C:\\Users\\ana\\agent.sqlite", "agent.sqlite"), ("..", "upload-1"), ("", "upload-1"),
    ("a\x00b.sqlite", "upload-1"), ("a" * 300, "upload-1"),
])
def test_an_upload_is_kept_under_its_own_last_name_only(sent: str, kept: str) -> None:
    """A forged upload may name any path: the file is kept in the request's folder, under its
    name's last part, or a plain name when that is no file name (`..` would be the folder's
    parent, a NUL fails the write)."""
    assert upload_name(sent, "upload-1") == kept
