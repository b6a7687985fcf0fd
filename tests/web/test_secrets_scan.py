"""Secret-leak scan: plant a recognisable Stripe key and PostgreSQL passwords, run everything a
user runs, then grep every byte the app wrote.

Live: the lab's Stripe-compatible server (the real stripe SDK calls it) holding a step-retry
incident, that incident's LangGraph checkpoints in the test PostgreSQL server (read through a
role whose password is planted), its spans behind a Jaeger/Tempo-compatible server. Runs:
`twice investigate` (JSON and table, --out), `twice analyze <dsn>`, and the web app's live form
saving to a SQLite store and to a PostgreSQL store (whose role's password is planted too), then
the three exports downloaded from the browser; failures are provoked on both (wrong key, wrong
password, unreachable host). Everything the processes could write lands under one folder (HOME,
TMPDIR, XDG_DATA_HOME, --out, logs, captured output, the pages' HTML and URLs, the downloads,
a dump of the PostgreSQL store's rows); none of it may contain a secret, in any of the forms
a server may echo it in (HTML entities, form encoding, JSON escapes, base64: tests/hostile.py).
One trace backend echoes the password it is sent, HTML-encoded, at the start of its 401 page;
that password has every character an encoder changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from tests.connectors.hostile_http import hostile_backend
from tests.contract import contract
from tests.hostile import SPECIAL_SECRETS, encoded_forms
from tests.web.conftest import (
    chromium,
    click_after_typing,
    free_port,
    page_state,
    samples_in,
)
from twice.lab.scenarios import run_scenario_with_server
from twice.lab.trace_server import TraceServer

ROOT = Path(__file__).resolve().parents[2]
KEY = "rk_test_51LeakScanPlantedRestrictedKey7f3c9a"  # a restricted key with read access
WRONG_KEY = "rk_test_51LeakScanWrongKeyNobodyIssued00x1"
READER_PW = "pgLeakScanPlantedReaderPw7Q2"
STORE_PW = "pgLeakScanPlantedStorePw9Z4"
TRACE_PW = SPECIAL_SECRETS[0]  # Pw&<"' X9q
SECRETS = (KEY, WRONG_KEY, READER_PW, STORE_PW, TRACE_PW)


@dataclass
class Live:
    root: Path  # everything the app may write goes under here
    env: dict[str, str]
    customer: str
    around: str
    stripe_url: str
    traces_url: str
    reader_dsn: str  # checkpoints, read through a role with a planted password
    store_dsn: str  # a PostgreSQL investigation store, its role's password planted
    admin_dsn: str


def _role(admin_dsn: str, name: str, password: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(name), sql.Literal(password)))


def _as(dsn: str, user: str, password: str) -> str:
    scheme, _, rest = dsn.partition("://")
    return f"{scheme}://{user}:{password}@{rest.split('@', 1)[1]}"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory,
         new_postgres_database: Callable[[], str]) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("leak-scan")
    env = {"HOME": str(root / "home"), "TMPDIR": str(root / "tmp"),
           "XDG_DATA_HOME": str(root / "xdg"), "PYTHONPATH": str(ROOT),
           "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    for folder in ("home", "tmp", "xdg"):
        (root / folder).mkdir()
    suffix = uuid.uuid4().hex[:8]
    checkpoints = new_postgres_database()
    folder, server = run_scenario_with_server(
        "step_retry", tmp_path_factory.mktemp("lab") / "incident", seed=5, noise=3,
        dsn=checkpoints)
    reader = f"leak_reader_{suffix}"
    _role(checkpoints, reader, READER_PW)
    with psycopg.connect(checkpoints, autocommit=True) as conn:
        name = checkpoints.rpartition("/")[2]
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
            sql.Identifier(name), sql.Identifier(reader)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(reader)))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(
            sql.Identifier(reader)))
    store_db = new_postgres_database()
    owner = f"leak_store_{suffix}"
    _role(store_db, owner, STORE_PW)
    with psycopg.connect(store_db, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
            sql.Identifier(store_db.rpartition("/")[2]), sql.Identifier(owner)))
        conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(owner)))
    truth = json.loads((folder / "truth.json").read_text())
    events = json.loads((folder / "events.json").read_text())["data"]
    first = min(e["created"] for e in events
                if e["data"]["object"].get("customer") == truth["customer"])
    server.api_keys[KEY] = "read_only"
    server.start()
    try:
        with TraceServer(folder / "spans.jsonl") as traces:
            yield Live(root, env, truth["customer"],
                       datetime.fromtimestamp(first, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       server.url, traces.url, _as(checkpoints, reader, READER_PW),
                       _as(store_db, owner, STORE_PW), store_db)
    finally:
        server.stop()


def _unreachable(dsn: str) -> str:
    head, _, tail = dsn.rpartition("@")
    return f"{head}@127.0.0.1:9/{tail.split('/', 1)[1]}"


def _cli(live: Live, name: str, *args: str, key: str = KEY) -> subprocess.CompletedProcess[str]:
    """`twice ...` as a user runs it; its stdout and stderr are kept in the scanned folder."""
    done = subprocess.run([sys.executable, "-m", "twice.cli", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, **live.env, "LEAK_SCAN_KEY": key})
    logs = live.root / "cli"
    logs.mkdir(exist_ok=True)
    (logs / f"{name}.stdout").write_text(done.stdout)
    (logs / f"{name}.stderr").write_text(done.stderr)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


def _investigate_args(live: Live, *, checkpoints: str | None = None,
                      traces: str | None = None) -> list[str]:
    return ["investigate", "--customer", live.customer, "--around", live.around,
            "--stripe-key-env", "LEAK_SCAN_KEY", "--stripe-base-url", live.stripe_url,
            "--checkpoints", checkpoints or live.reader_dsn,
            "--traces", traces or f"jaeger+{live.traces_url}"]


@contextmanager
def _served(live: Live, store: str, name: str) -> Iterator[str]:
    """The web app as `twice web` serves it, its log kept in the scanned folder."""
    port = free_port()
    log = (live.root / "logs")
    log.mkdir(exist_ok=True)
    with open(log / f"streamlit-{name}.log", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "twice.cli", "web", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, **live.env, "TWICE_STORE": store,
                 "TWICE_STRIPE_BASE_URL": live.stripe_url})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                        break
                except OSError:
                    assert proc.poll() is None and time.monotonic() < deadline, \
                        (log / f"streamlit-{name}.log").read_text()
                    time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


class Browser:
    """Pages of one app; each page's HTML and URL are kept in the scanned folder."""

    def __init__(self, live: Live, browser: Any, url: str, name: str) -> None:
        self.live, self.url, self.name = live, url, name
        self.context = browser.new_context(accept_downloads=True)
        self.page = self.context.new_page()
        self.urls: list[str] = []
        self.page.on("framenavigated", lambda frame: self.urls.append(frame.url))
        self.n = 0

    def keep(self) -> None:
        self.n += 1
        pages = self.live.root / "pages"
        pages.mkdir(exist_ok=True)
        (pages / f"{self.name}-{self.n}.html").write_text(self.page.content())
        (pages / f"{self.name}-urls.txt").write_text("\n".join([*self.urls, self.page.url]))

    def settle(self) -> None:
        self.page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden",
                                                                      timeout=120_000)
        self.page.wait_for_timeout(800)

    def investigate(self, key: str, checkpoints: str, traces: str) -> str:
        """Fill the sidebar's live form; returns the page text once the run has finished."""
        page = self.page
        page.goto(self.url)
        page.get_by_text("Incidents").first.wait_for(timeout=120_000)
        samples_in(page)  # a fresh store: its last refresh could eat the Investigate click
        page.get_by_text("New investigation from live sources").click()
        page.get_by_role("textbox", name="Customer, payment intent or charge id").fill(
            self.live.customer)
        page.get_by_role("textbox", name="Around (UTC)").fill(self.live.around)
        page.get_by_label("Stripe restricted key (used for this request only, never saved)") \
            .fill(key)
        page.get_by_label("Checkpoints DSN or SqliteSaver path (optional)").fill(checkpoints)
        page.get_by_role("textbox", name="Trace backend address (optional)").fill(traces)
        # sent to a page no run is redrawing, from no field
        click_after_typing(page, page.get_by_role("button", name="Investigate"))
        try:  # any end the form can come to: the verdict, a message, an error
            page.wait_for_function(
                "!!document.querySelector('[id=\"verdict\"], [data-testid=\"stException\"]')"
                " || ['Partial:', 'Nothing found', 'Around: an ISO', 'the incident is about']"
                ".some(t => document.body.innerText.includes(t))",
                timeout=480_000)  # a hang guard: a loaded machine is slow
        except Exception:
            self.keep()  # the page as it hung, in live.root/pages
            # the form empties its key field when its submit reaches the script
            kept = page.get_by_label("Stripe restricted key (used for this request only, "
                                     "never saved)").input_value() == key
            raise AssertionError(
                "the live form came to no end; "
                + ("its key field still holds the key: the submit never reached the script; "
                   if kept else "the script took the submit; ") + page_state(page)) from None
        self.settle()
        self.keep()
        return str(page.locator("body").inner_text())

    def export(self) -> int:
        page = self.page
        page.get_by_text("Export", exact=True).click()
        downloads = self.live.root / "downloads"
        downloads.mkdir(exist_ok=True)
        labels = ["Analysis JSON", "Incident folder", "Self-contained HTML report"]
        for label in labels:
            button = page.get_by_role("button", name=label)
            button.wait_for(timeout=90_000)
            with page.expect_download() as info:
                button.click()
            info.value.save_as(downloads / f"{self.name}-{info.value.suggested_filename}")
        self.settle()
        self.keep()
        return len(labels)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _dump_postgres_store(live: Live) -> None:
    """The PostgreSQL store's rows, blobs included, as files the scan reads."""
    dump = live.root / "postgres-store"
    dump.mkdir(exist_ok=True)
    with psycopg.connect(live.admin_dsn) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()]
        for table in tables:
            rows = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table)))
            with open(dump / f"{table}.txt", "wb") as out:
                for row in rows:
                    for value in row:
                        out.write(value if isinstance(value, bytes) else
                                  json.dumps(value, default=str).encode())
                        out.write(b"\n")


def _scan(root: Path) -> tuple[int, int, list[str]]:
    files = size = 0
    hits: list[str] = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        files += 1
        size += len(data)
        hits += [f"{path.relative_to(root)}: {s[:12]!r}… as {form[:16]!r}" for s in SECRETS
                 for form in encoded_forms(s) if form.encode() in data]
    return files, size, hits


def test_no_secret_reaches_anything_the_app_wrote(live: Live, browser: Any) -> None:
    # --- the command line --------------------------------------------------------------------
    out = live.root / "out"
    ok = _cli(live, "investigate-json", *_investigate_args(live), "--out", str(out),
              "--format", "json")
    assert ok.returncode == 0, ok.stderr
    report = contract(ok.stdout)
    assert [d["layer"] for g in report["groups"] for d in g["duplicates"]] == ["step_retry"]
    assert (out / "checkpoints.sqlite").exists() and (out / "README.md").exists()
    assert ":***@" in (out / "README.md").read_text()  # the DSN, shown redacted
    table = _cli(live, "investigate-table", *_investigate_args(live), "--out",
                 str(live.root / "out-table"))
    assert table.returncode == 0 and ":***@" in table.stdout
    wrong = _cli(live, "wrong-key", *_investigate_args(live), "--format", "json",
                 key=WRONG_KEY)
    assert wrong.returncode == 3 and contract(wrong.stdout)["partial"]
    bad_pw = _cli(live, "wrong-password", *_investigate_args(
        live, checkpoints=live.reader_dsn.replace(READER_PW, READER_PW + "nope")),
        "--format", "json")
    assert bad_pw.returncode == 3  # partial
    assert any("***" in e for e in contract(bad_pw.stdout)["errors"])
    unreachable = _investigate_args(live, checkpoints=_unreachable(live.reader_dsn),
                                    traces="jaeger+http://127.0.0.1:9")
    down = _cli(live, "unreachable", *unreachable, "--format", "json")
    assert down.returncode == 3 and len(contract(down.stdout)["errors"]) == 2
    # with --out, saving the checkpoints of the threads the provider named fails too
    down = _cli(live, "unreachable-out", *unreachable, "--out", str(live.root / "out-partial"),
                "--format", "json")
    assert down.returncode == 3 and ":***@127.0.0.1:9/" in down.stderr
    # ... which is one more failed source: the report is still printed, the events still saved
    assert len(contract(down.stdout)["errors"]) == 3
    assert (live.root / "out-partial" / "events.json").exists()
    assert not (live.root / "out-partial" / "checkpoints.sqlite").exists()
    with hostile_backend("echo", "html") as (echo_url, _):
        echoing = f"jaeger+http://ops:{quote(TRACE_PW, safe='')}@{echo_url[7:]}"
        echoed = _cli(live, "echoing-traces", *_investigate_args(live, traces=echoing),
                      "--format", "json")
        assert echoed.returncode == 3  # partial
        assert any("HTTP 401" in e and "denied ***" in e
                   for e in contract(echoed.stdout)["errors"])
    no_key = _cli(live, "no-key", *_investigate_args(live), key="")
    assert no_key.returncode == 2 and "LEAK_SCAN_KEY" in no_key.stderr
    assert _cli(live, "analyze-dsn", "analyze", live.reader_dsn).returncode == 0
    analyze_down = _cli(live, "analyze-unreachable", "analyze", _unreachable(live.reader_dsn))
    assert analyze_down.returncode == 2 and ":***@" in analyze_down.stderr

    # --- the web app: live form, saved to a SQLite store, then to a PostgreSQL store ----------
    traces = f"jaeger+{live.traces_url}"
    sqlite_store = live.root / "xdg" / "store.sqlite3"
    runs = exports = 0
    with _served(live, str(sqlite_store), "sqlite") as url:
        web = Browser(live, browser, url, "sqlite")
        text = web.investigate(KEY, live.reader_dsn, traces)
        assert "step_retry" in text and "Partial:" not in text
        runs += 1
        exports += web.export()
        text = web.investigate(WRONG_KEY, live.reader_dsn, traces)
        assert "Partial:" in text and "stripe" in text.lower()
        text = web.investigate(KEY, live.reader_dsn.replace(READER_PW, READER_PW + "nope"),
                               traces)
        assert "Partial:" in text and "***" in text
        text = web.investigate(KEY, _unreachable(live.reader_dsn), "jaeger+http://127.0.0.1:9")
        assert "Partial:" in text and "127.0.0.1:9" in text
        with hostile_backend("echo", "html") as (echo_url, _):
            text = web.investigate(
                KEY, live.reader_dsn, f"jaeger+http://ops:{quote(TRACE_PW, safe='')}@"
                                      f"{echo_url[7:]}")
        assert "Partial:" in text and "denied ***" in text
        runs += 4
        web.context.close()
    with _served(live, live.store_dsn, "postgres") as url:
        web = Browser(live, browser, url, "postgres")
        text = web.investigate(KEY, live.reader_dsn, traces)
        assert "step_retry" in text
        exports += web.export()
        text = web.investigate(WRONG_KEY, _unreachable(live.reader_dsn), traces)
        assert "Partial:" in text
        runs += 2
        web.context.close()
    _dump_postgres_store(live)
    assert list(live.root.glob("xdg/store.sqlite3*")), "the SQLite store was written"

    # --- the scan --------------------------------------------------------------------------
    files, size, hits = _scan(live.root)
    print(f"\nsecret-leak scan: {files} files, {size:,} bytes, {len(SECRETS)} secrets, "
          f"10 CLI runs, {runs} web runs, {exports} exports: {len(hits)} hits")
    assert hits == []
    assert files >= 30 and size > 1_000_000  # the scan really read what was written


def test_the_scan_finds_a_planted_secret(tmp_path: Path) -> None:
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "log.bin").write_bytes(b"\x00\xffkey=" + KEY.encode() + b"\n")
    (tmp_path / "clean.txt").write_text("postgresql://reader:***@db/x")
    (tmp_path / "page.html").write_text("<p>Pw&amp;&lt;&quot;&#x27; X9q</p>")  # HTML-encoded
    files, size, hits = _scan(tmp_path)
    assert (files, len(hits)) == (3, 2), hits
    assert hits[0].startswith("deep/er/log.bin") and hits[1].startswith("page.html")
