"""The investigation store, on both backends: SQLite in a temp dir and a real PostgreSQL server.

Timelines are the bundled sample incidents, loaded by the real connectors.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg
import pytest

from twice.connectors.registry import load_all, scan_folder
from twice.engine import Analysis, Options, analyze
from twice.layers import Bands
from twice.store import (
    InvestigationExists,
    InvestigationNotFound,
    Note,
    Override,
    Store,
    StoreError,
    WarningLike,
    default_store_path,
    effective_overrides,
    open_store,
    prepare,
    valid_id,
)
from twice.store.postgres import MIGRATIONS as PG_MIGRATIONS
from twice.store.postgres import PostgresStore
from twice.store.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from twice.store.sqlite import SqliteStore
from twice.timeline import SourceWarning, validate

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _load(name: str) -> pd.DataFrame:
    found, _ = scan_folder(SAMPLES / name)
    return load_all((connector, path, {}) for connector, path in found).rows


@dataclass
class Incident:
    timeline: pd.DataFrame
    analysis: Analysis  # analyze(timeline), computed once: saves every create recomputing it


@pytest.fixture(scope="module")
def step_retry() -> Incident:
    timeline = _load("step_retry")
    return Incident(timeline, analyze(timeline))


@pytest.fixture(scope="module")
def redelivery() -> Incident:
    timeline = _load("redelivery")
    return Incident(timeline, analyze(timeline))


def save(store: Store, title: str, incident: Incident, **options: Any) -> str:
    return store.create(title, incident.timeline, analysis=incident.analysis, **options)


@dataclass
class Backend:
    kind: str
    url: str  # what open_store takes
    store: Store
    raw: Callable[[str], list[tuple[Any, ...]]]  # run SQL on the store's database directly


def _sqlite_raw(path: Path) -> Callable[[str], list[tuple[Any, ...]]]:
    def run(sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(path) as conn:
            return conn.execute(sql).fetchall()
    return run


def _pg_raw(dsn: str) -> Callable[[str], list[tuple[Any, ...]]]:
    def run(sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []
    return run


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        path = tmp_path / "investigations.sqlite3"
        return Backend("sqlite", str(path), open_store(str(path)), _sqlite_raw(path))
    dsn = request.getfixturevalue("fresh_postgres_dsn")
    return Backend("postgres", dsn, open_store(dsn), _pg_raw(dsn))


def test_round_trip_keeps_the_timeline_and_computes_the_summary(
        backend: Backend, step_retry: Incident) -> None:
    warning = SourceWarning(source="events.json:7", detail="not JSON; skipped")
    warnings: list[WarningLike] = [warning, {"source": "x.csv:2", "detail": "d"}]
    inv_id = backend.store.create("Double charge for ACME", step_retry.timeline,
                                  tags=["acme", "p1"], warnings=warnings)
    snap = backend.store.get(inv_id)
    assert snap is not None
    validate(snap.timeline)
    pd.testing.assert_frame_equal(snap.timeline, step_retry.timeline, check_dtype=True,
                                  check_exact=True)
    s = snap.summary
    assert (s.id, s.title, s.provider, s.tags) == (inv_id, "Double charge for ACME", "stripe",
                                                    ["acme", "p1"])
    assert (s.groups, s.worst_layer, s.money_at_risk) == (1, "step_retry", {"usd": 900})
    assert s.sources == sorted(step_retry.timeline["source"].unique())
    assert s.created_at.tzinfo is not None and abs(datetime.now(UTC) - s.created_at) < \
        timedelta(minutes=1)
    assert snap.warnings == [{"source": "events.json:7", "detail": "not JSON; skipped"},
                             {"source": "x.csv:2", "detail": "d"}]
    assert (snap.notes, snap.overrides) == ([], [])
    assert backend.store.list() == [s]
    # without its timeline (the web app holds it analysed): the rest as it is, no rows
    light = backend.store.get(inv_id, timeline=False)
    assert light is not None and len(light.timeline) == 0
    validate(light.timeline)
    assert (light.summary, light.warnings, light.notes) == (s, snap.warnings, [])
    assert backend.store.get("inv-missing-0000", timeline=False) is None


def test_a_timeline_saved_before_a_column_existed_reads_back_with_it_empty(
        tmp_path: Path, step_retry: Incident) -> None:
    """`livemode` came after stores had investigations: theirs open, the mode not known."""
    import io

    path = tmp_path / "investigations.sqlite3"
    store = open_store(str(path))
    inv_id = save(store, "saved before livemode", step_retry)
    older = io.BytesIO()
    step_retry.timeline.drop(columns="livemode").to_parquet(older, engine="pyarrow")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE timelines SET parquet = ? WHERE investigation_id = ?",
                     [older.getvalue(), inv_id])
    snap = store.get(inv_id)
    assert snap is not None
    validate(snap.timeline)
    assert snap.timeline["livemode"].isna().all() and step_retry.timeline["livemode"].notna().any()
    pd.testing.assert_frame_equal(snap.timeline.drop(columns="livemode"),
                                  step_retry.timeline.drop(columns="livemode"))


def test_an_investigations_duplicates_as_saved(backend: Backend, step_retry: Incident,
                                              redelivery: Incident) -> None:
    inv_id = save(backend.store, "two", step_retry)
    save(backend.store, "other", redelivery)
    (dup,) = backend.store.duplicates(inv_id)
    group = step_retry.analysis.groups[0]
    assert (dup.group_id, dup.layer) == (group.group_id, "step_retry")
    assert dup.dup_key.endswith(group.duplicates[0].second)
    assert backend.store.duplicates("no-such-one") == [] == backend.store.duplicates("bad id!")


def test_list_is_newest_first(backend: Backend, step_retry: Incident) -> None:
    ids = [save(backend.store, f"incident {n}", step_retry) for n in range(3)]
    assert [s.id for s in backend.store.list()] == ids[::-1]


def test_search_by_customer_thread_title_and_tag(
        backend: Backend, step_retry: Incident, redelivery: Incident) -> None:
    charged = save(backend.store, "Double charge, ACME Corp", step_retry, tags=["vip"])
    other = save(backend.store, "Night batch", redelivery)
    group = step_retry.analysis.groups[0]
    customer = str(group.attempts["subject"].dropna().iloc[0])
    assert customer.startswith("cus_")

    def found(search: str) -> list[str]:
        return [s.id for s in backend.store.list(search=search)]

    assert found(customer) == [charged]
    assert found(str(group.thread_id)) == [charged]
    assert found(customer.upper()) == [charged]  # ids pasted in any case
    assert found("acme") == [charged]
    assert found("charge acme") == [charged]  # every word must match
    assert found("vip") == [charged]
    assert found("night") == [other]
    assert found("") == [other, charged]
    assert found("cus_doesnotexist") == []
    # `_` and `%` are literal characters, not LIKE wildcards
    assert found(customer.replace("_", "%")) == []
    assert found(customer[:3] + "x" + customer[4:]) == []


def test_filter_by_layer(backend: Backend, step_retry: Incident,
                         redelivery: Incident) -> None:
    step = save(backend.store, "step", step_retry)
    redelivered = save(backend.store, "redelivered", redelivery)
    assert [s.id for s in backend.store.list(layer="redelivery")] == [redelivered]
    assert [s.id for s in backend.store.list(layer="step_retry")] == [step]
    assert backend.store.list(layer="sdk_retry") == []
    assert [s.id for s in backend.store.list(search="step", layer="step_retry")] == [step]
    assert backend.store.list(search="redelivered", layer="step_retry") == []


def test_concurrent_writers_lose_no_note_or_override(
        backend: Backend, step_retry: Incident) -> None:
    inv_id = save(backend.store, "shared", step_retry)
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def write(author: str) -> None:
        store = open_store(backend.url)  # like two app sessions, each with its own store
        start.wait()
        try:
            for n in range(50):
                store.add_note(inv_id, Note(author, f"note {n}", T0 + timedelta(seconds=n)))
                if n % 10 == 0:
                    store.add_override(inv_id, Override("g_1", "a>b", "redelivery", f"r{n}",
                                                        author, T0, confirmed=False))
        except BaseException as exc:  # reported below: a thread's exception is otherwise lost
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(who,)) for who in ("ana", "bo")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    snap = backend.store.get(inv_id)
    assert snap is not None
    assert len(snap.notes) == 100
    assert {(n.author, n.text) for n in snap.notes} == \
        {(a, f"note {n}") for a in ("ana", "bo") for n in range(50)}
    assert all(n.at.tzinfo is not None for n in snap.notes)
    assert len(snap.overrides) == 10


def test_latest_override_is_in_effect(backend: Backend, step_retry: Incident) -> None:
    inv_id = save(backend.store, "overrides", step_retry)
    first = Override("g_1", "a>b", "step_retry", "agrees", "ana", T0, confirmed=True)
    second = Override("g_1", "a>b", "redelivery", "worker log shows a restart", "bo",
                      T0 + timedelta(minutes=5), confirmed=False)
    other = Override("g_2", "c>d", "sdk_retry", "ok", "ana", T0, confirmed=True)
    for o in (first, other, second):
        backend.store.add_override(inv_id, o)
    note = Note("ana", "customer refunded", T0, group_id="g_1", duplicate="a>b")
    backend.store.add_note(inv_id, note)
    snap = backend.store.get(inv_id)
    assert snap is not None
    assert snap.overrides == [first, other, second]
    assert snap.notes == [note]
    assert effective_overrides(snap.overrides) == {("g_1", "a>b"): second, ("g_2", "c>d"): other}


def test_missing_and_invalid_ids(backend: Backend, step_retry: Incident) -> None:
    assert backend.store.get("NoSuchInvestigation_0") is None
    for bad in ("", "../etc/passwd", "a" * 65, "x' OR '1'='1", "id with space", "é"):
        assert backend.store.get(bad) is None
        backend.store.delete(bad)  # nothing to do, no error
    note = Note("ana", "hi", T0)
    with pytest.raises(InvestigationNotFound):
        backend.store.add_note("NoSuchInvestigation_0", note)
    with pytest.raises(InvestigationNotFound):
        backend.store.add_note("../x", note)
    with pytest.raises(ValueError, match="timezone"):
        backend.store.add_note("NoSuchInvestigation_0", Note("ana", "hi", datetime(2025, 1, 1)))
    inv_id = save(backend.store, "sample", step_retry, id="sample-step_retry")
    assert inv_id == "sample-step_retry"
    with pytest.raises(InvestigationExists):
        save(backend.store, "sample again", step_retry, id="sample-step_retry")
    with pytest.raises(ValueError, match="invalid investigation id"):
        save(backend.store, "bad", step_retry, id="no/slashes")
    assert [s.title for s in backend.store.list()] == ["sample"]


def test_invalid_id_is_answered_without_a_query(
        backend: Backend, step_retry: Incident) -> None:
    save(backend.store, "x", step_retry)
    # take the database away: any query now fails, so a None answer made no query
    if backend.kind == "sqlite":
        path = Path(backend.url)
        for p in path.parent.glob(path.name + "*"):
            p.unlink()
        path.mkdir()
    else:
        name = backend.url.rpartition("/")[2]
        admin = _pg_raw(backend.url.rpartition("/")[0] + "/postgres")
        admin(f'DROP DATABASE "{name}" WITH (FORCE)')
    assert backend.store.get("../../etc/passwd") is None
    assert backend.store.get("a" * 65) is None
    with pytest.raises(StoreError) as caught:
        backend.store.get("WellFormedButUnreachable")
    if backend.kind == "postgres":
        password = re.search(r"postgres:([^@]+)@", backend.url)
        assert password and password[1] not in str(caught.value)


def test_create_is_atomic(backend: Backend, step_retry: Incident) -> None:
    # the second insert of a create fails, as a crash between the two would leave it
    if backend.kind == "sqlite":
        backend.raw("CREATE TRIGGER crash BEFORE INSERT ON timelines "
                    "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END")
    else:
        backend.raw("CREATE FUNCTION crash() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$")
        backend.raw("CREATE TRIGGER crash BEFORE INSERT ON timelines "
                    "FOR EACH ROW EXECUTE FUNCTION crash()")
    with pytest.raises(StoreError, match="disk on fire") as caught:
        save(backend.store, "half", step_retry, id="half")
    assert not isinstance(caught.value, InvestigationExists)
    assert backend.store.list() == []
    assert backend.store.get("half") is None
    assert backend.raw("SELECT count(*) FROM investigations") == [(0,)]


def test_delete_removes_notes_and_overrides(backend: Backend, step_retry: Incident) -> None:
    keep = save(backend.store, "keep", step_retry)
    gone = save(backend.store, "gone", step_retry)
    for inv_id in (keep, gone):
        backend.store.add_note(inv_id, Note("ana", "n", T0))
        backend.store.add_override(inv_id, Override("g", "a>b", "sdk_retry", "r", "ana", T0,
                                                    confirmed=True))
    backend.store.delete(gone)
    assert backend.store.get(gone) is None
    assert [s.id for s in backend.store.list()] == [keep]
    for table in ("notes", "overrides", "timelines"):
        assert backend.raw(f"SELECT count(*) FROM {table}") == [(1,)]


def test_migrations_from_empty_and_one_more(backend: Backend) -> None:
    known = [(v,) for v in range(1, len(SQLITE_MIGRATIONS) + 1)]
    assert len(SQLITE_MIGRATIONS) == len(PG_MIGRATIONS)  # the two backends stay in step
    assert backend.raw("SELECT version FROM schema_version ORDER BY version") == known
    reopened = open_store(backend.url)  # nothing left to apply
    assert backend.raw("SELECT version FROM schema_version ORDER BY version") == known
    assert reopened.list() == []

    def v2(conn: Any) -> None:  # what the next version will look like: one more function
        conn.execute("ALTER TABLE investigations ADD COLUMN severity TEXT")

    store: Any
    if backend.kind == "sqlite":
        store = SqliteStore(backend.url, migrations=[*SQLITE_MIGRATIONS, v2])
        SqliteStore(backend.url, migrations=[*SQLITE_MIGRATIONS, v2])  # applied once only
    else:
        store = PostgresStore(backend.url, migrations=[*PG_MIGRATIONS, v2])
        PostgresStore(backend.url, migrations=[*PG_MIGRATIONS, v2])
    assert store.schema_version() == len(known) + 1
    assert backend.raw("SELECT version FROM schema_version ORDER BY version") == \
        [*known, (len(known) + 1,)]
    # an older twice refuses a store a newer one migrated, instead of misreading it
    with pytest.raises(StoreError, match="newer twice"):
        open_store(backend.url)


def test_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "store.sqlite3"
    open_store(f"sqlite:///{path}")  # four slashes: an absolute path
    assert _sqlite_raw(path)("PRAGMA journal_mode") == [("wal",)]


def test_generated_ids_are_unguessable(tmp_path: Path, step_retry: Incident) -> None:
    store = open_store(str(tmp_path / "s.sqlite3"))
    ids = {store.create(f"t{n}", step_retry.timeline.head(5)) for n in range(3)}
    assert len(ids) == 3
    for inv_id in ids:
        # secrets.token_urlsafe(16): 128 random bits in 22 URL-safe characters
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", inv_id) and valid_id(inv_id)


def test_open_store_picks_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("TWICE_STORE", raising=False)
    assert default_store_path() == tmp_path / "xdg" / "twice" / "investigations.sqlite3"
    store = open_store()
    assert isinstance(store, SqliteStore) and store.path == default_store_path()
    assert default_store_path().exists()

    monkeypatch.setenv("TWICE_STORE", str(tmp_path / "team.sqlite3"))
    assert open_store().path == tmp_path / "team.sqlite3"  # type: ignore[attr-defined]

    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home/.local/share/twice/investigations.sqlite3"

    for url in ("mysql://me:hunter2@db/x", "sqlite://", "sqlite:///"):
        with pytest.raises(StoreError) as caught:
            open_store(url)
        assert "hunter2" not in str(caught.value)


def test_postgres_errors_never_show_the_password(fresh_postgres_dsn: str) -> None:
    password = re.search(r"postgres:([^@]+)@", fresh_postgres_dsn)
    assert password
    wrong = fresh_postgres_dsn.replace(password[1], "not-" + password[1])
    with pytest.raises(StoreError) as caught:
        open_store(wrong)
    message = str(caught.value)
    assert password[1] not in message and "password authentication failed" in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_the_analysis_options_are_kept(backend: Backend, step_retry: Incident) -> None:
    options = Options(bands=Bands(seconds=5.0, tens_of_seconds=10.0, retention=6 * 3600.0),
                      window_s=60.0, tolerance_s=0.5)
    inv_id = backend.store.create("narrow bands", step_retry.timeline, options=options)
    snap = backend.store.get(inv_id, timeline=False)
    assert snap is not None and snap.options == options
    # the summary was computed with them too: the 34 s gap is past a 10 s edge
    assert analyze(step_retry.timeline, options=options).groups[0].duplicates[0].band \
        != step_retry.analysis.groups[0].duplicates[0].band
    plain = backend.store.get(save(backend.store, "defaults", step_retry))
    assert plain is not None and plain.options == Options()


def test_a_store_of_version_2_is_migrated_and_its_rows_read_as_defaults(
        tmp_path: Path, request: pytest.FixtureRequest, step_retry: Incident) -> None:
    for kind in ("sqlite", "postgres"):
        if kind == "sqlite":
            url = str(tmp_path / "old.sqlite3")
            old: Store = SqliteStore(url, migrations=SQLITE_MIGRATIONS[:2])
        else:
            url = request.getfixturevalue("fresh_postgres_dsn")
            old = PostgresStore(url, migrations=PG_MIGRATIONS[:2])
        # what twice wrote before options were kept: the version 2 columns only
        p = prepare("old", step_retry.timeline, provider="stripe", sources=(), warnings=(),
                    tags=(), inv_id="old-one", analysis=step_retry.analysis)
        with old.transaction(write=True) as tx:
            tx.execute(
                "INSERT INTO investigations (id, title, created_at, provider, group_count, "
                "worst_layer, layers, money_at_risk, sources, tags, warnings, search_text) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [p.summary.id, p.summary.title, p.summary.created_at, "stripe", 1,
                 p.summary.worst_layer, p.layers, {}, [], [], [], p.search_text])
            tx.execute("INSERT INTO timelines (investigation_id, parquet) VALUES (?, ?)",
                       ["old-one", p.parquet])
        assert old.schema_version() == 2
        store = open_store(url)
        assert store.schema_version() == len(SQLITE_MIGRATIONS) >= 3
        snap = store.get("old-one")
        assert snap is not None and snap.options == Options(), kind
        assert len(snap.timeline) == len(step_retry.timeline)


@pytest.fixture(scope="module")
def busy_day() -> Incident:
    """Five incidents in one upload: five duplicate groups, five customers."""
    from twice.timeline import concat

    timeline = concat([_load(n) for n in ("step_retry", "redelivery", "sdk_retry",
                                          "gateway_retry", "model_reemission")])
    return Incident(timeline, analyze(timeline))


def test_search_lands_on_the_duplicate_asked_about(backend: Backend, busy_day: Incident) -> None:
    inv_id = save(backend.store, "busy day", busy_day)
    groups = {g.worst_layer.value: g for g in busy_day.analysis.groups if g.worst_layer}
    newest = busy_day.analysis.groups[0]

    def found(term: str) -> set[str]:
        hits = backend.store.search_duplicates(term)
        assert all(h.investigation.id == inv_id for h in hits)
        return {h.duplicate.group_id for h in hits}

    redelivery = groups["redelivery"]
    assert redelivery is not newest
    assert found("cus_ZBAwnAjde5AD75") == {redelivery.group_id}
    # an amount, as written on the invoice or in minor units: whole amounts only
    assert found("29.00") == found("2900") == found("$29") == {redelivery.group_id}
    assert found("9.00") == {groups["step_retry"].group_id, groups["sdk_retry"].group_id}
    assert found("49.00") == {groups["model_reemission"].group_id}
    # the charge of the sdk retry's second attempt, named only by the provider's events
    second = next(r for r in groups["sdk_retry"].records
                  if r["attempt_id"] == groups["sdk_retry"].duplicates[0].second)
    charge = str(second["object_id"]).replace("pi_", "ch_")
    assert found(charge) == found(str(second["object_id"])) == {groups["sdk_retry"].group_id}
    assert found(str(second["request_id"]).upper()) == {groups["sdk_retry"].group_id}
    assert found("cus_ZBAwnAjde5AD75 49.00") == set()
    hit = backend.store.search_duplicates("cus_WrcAXdGAH5bSQW")[0].duplicate
    assert (hit.customer, hit.amount, hit.currency, hit.layer) == (
        "cus_WrcAXdGAH5bSQW", 900, "usd", "step_retry")
    assert hit.dup_key == f"{groups['step_retry'].group_id}:" \
        f"{groups['step_retry'].duplicates[0].second}"
    # the investigations list finds it by an amount too
    assert [s.id for s in backend.store.list(search="29.00")] == [inv_id]
    backend.store.delete(inv_id)
    assert backend.store.search_duplicates("cus_ZBAwnAjde5AD75") == []


def test_a_customers_duplicates_across_investigations(backend: Backend,
                                                      busy_day: Incident) -> None:
    busy = save(backend.store, "busy day", busy_day)
    step = _load("step_retry")
    alone = save(backend.store, "step retry alone", Incident(step, analyze(step)))
    customer = "cus_WrcAXdGAH5bSQW"
    hits = backend.store.customer_duplicates(customer)
    assert {h.investigation.id for h in hits} == {busy, alone}
    assert all(h.duplicate.customer == customer for h in hits)
    assert len(hits) == len(backend.store.search_duplicates(customer))
    times = [h.duplicate.at for h in hits]
    assert times == sorted(times, reverse=True)  # newest payment first
    # the id exactly: a part of it, another case or an injection finds nothing
    for other in ("cus_WrcAXd", customer.lower(), "' OR 1=1 --", ""):
        assert backend.store.customer_duplicates(other) == []
    backend.store.delete(alone)
    assert {h.investigation.id for h in backend.store.customer_duplicates(customer)} == {busy}


def refunded_copy(sample: str, folder: Path) -> Path:
    """A copy of a bundled sample in which the provider refunded its duplicate: the
    `charge.refunded` Event Stripe sends for the second attempt's charge, an hour later, as a
    refund request emits it (its own request id)."""
    import copy
    import json
    import shutil

    shutil.copytree(SAMPLES / sample, folder)
    events_path = folder / "events.json"
    doc = json.loads(events_path.read_text())
    timeline = _load(sample)
    duplicate = analyze(timeline).groups[0].duplicates[0]
    second = timeline[timeline["request_id"] == duplicate.second]
    payment = str(second["object_id"].dropna().iloc[0])
    charge_event = next(e for e in doc["data"] if e["type"] == "charge.succeeded"
                        and payment in (e["data"]["object"]["id"],
                                        e["data"]["object"].get("payment_intent")))
    refund = copy.deepcopy(charge_event)
    refund.update(id="evt_1RefundW7YFwBX9UBrefund", type="charge.refunded",
                  created=charge_event["created"] + 3600,
                  request={"id": "req_RefundRefund01", "idempotency_key": None})
    refund["data"]["object"].update(refunded=True,
                                    amount_refunded=refund["data"]["object"]["amount"])
    doc["data"].insert(0, refund)
    events_path.write_text(json.dumps(doc))
    return folder


def test_the_incident_workflow(backend: Backend, step_retry: Incident,
                               tmp_path: Path) -> None:
    refunded = _load_folder(refunded_copy("step_retry", tmp_path / "refunded"))
    analysis = analyze(refunded)
    # the refund event does not change the verdict
    assert [(d.first, d.second, d.layer) for g in analysis.groups for d in g.duplicates] == \
        [(d.first, d.second, d.layer) for g in step_retry.analysis.groups for d in g.duplicates]
    plain = save(backend.store, "not refunded", step_retry)
    paid_back = backend.store.create("refunded", refunded, analysis=analysis)
    s = {x.id: x for x in backend.store.list()}
    assert (s[plain].duplicates, s[plain].refunded) == (1, 0)
    assert (s[paid_back].duplicates, s[paid_back].refunded) == (1, 1)
    hit = backend.store.search_duplicates("cus_WrcAXdGAH5bSQW")
    assert {h.investigation.id: h.duplicate.refunded for h in hit} == {plain: False,
                                                                       paid_back: True}
    # the incident's own time: its attempts, not the save time nor the refund an hour later
    records = step_retry.analysis.groups[0].records
    first, last = (pd.Timestamp(min(r["at"] for r in records)),
                   pd.Timestamp(max(r["at"] for r in records)))
    assert s[paid_back].first_at == first.floor("us").to_pydatetime()
    assert s[paid_back].last_at == last.floor("us").to_pydatetime()
    assert s[plain].status == "open" and s[plain].owner is None
    # status and owner, set by the user
    backend.store.set_workflow(plain, status="resolved", owner="  ana  ")
    got = backend.store.get(plain, timeline=False)
    assert got is not None and (got.summary.status, got.summary.owner) == ("resolved", "ana")
    assert [x.id for x in backend.store.list(status="resolved")] == [plain]
    assert [x.id for x in backend.store.list(status="open")] == [paid_back]
    backend.store.set_workflow(plain, status="open", owner="")
    got = backend.store.get(plain, timeline=False)
    assert got is not None and (got.summary.status, got.summary.owner) == ("open", None)
    with pytest.raises(ValueError, match="status 'closed'"):
        backend.store.set_workflow(plain, status="closed", owner=None)
    with pytest.raises(InvestigationNotFound):
        backend.store.set_workflow("inv-missing-0000", status="open", owner=None)
    # sorted by the incident's time: the five incidents of the samples, days apart
    later = save(backend.store, "redelivery", Incident(_load("redelivery"),
                                                       analyze(_load("redelivery"))))
    by_incident = [x.id for x in backend.store.list(order="incident")]
    starts = [x.first_at for x in backend.store.list(order="incident")]
    assert starts == sorted(starts, reverse=True)  # type: ignore[type-var]
    assert [x.id for x in backend.store.list(order="incident_oldest")] == by_incident[::-1]
    assert later in by_incident


def _load_folder(folder: Path) -> pd.DataFrame:
    found, _ = scan_folder(folder)
    return load_all((connector, path, {}) for connector, path in found).rows


def _old_store(kind: str, version: int, tmp_path: Path,
               request: pytest.FixtureRequest) -> tuple[str, Store]:
    """A new store of the given schema version (the migrations up to it), SQLite or PostgreSQL:
    what an older twice made, for a migration test to write its rows into."""
    if kind == "sqlite":
        url = str(tmp_path / f"v{version}.sqlite3")
        return url, SqliteStore(url, migrations=SQLITE_MIGRATIONS[:version])
    url = request.getfixturevalue("fresh_postgres_dsn")
    return url, PostgresStore(url, migrations=PG_MIGRATIONS[:version])


def test_a_store_of_version_3_is_migrated_open_with_no_owner_and_refunds_unknown(
        tmp_path: Path, request: pytest.FixtureRequest, step_retry: Incident) -> None:
    for kind in ("sqlite", "postgres"):
        url, old = _old_store(kind, 3, tmp_path, request)
        # what twice wrote before the workflow: the version 3 columns only
        p = prepare("old", step_retry.timeline, provider="stripe", sources=(), warnings=(),
                    tags=(), inv_id="old-one", analysis=step_retry.analysis)
        d, text = p.duplicates[0]
        with old.transaction(write=True) as tx:
            tx.execute(
                "INSERT INTO investigations (id, title, created_at, provider, group_count, "
                "worst_layer, layers, money_at_risk, sources, tags, warnings, search_text, "
                "options) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [p.summary.id, p.summary.title, p.summary.created_at, "stripe", 1,
                 p.summary.worst_layer, p.layers, {}, [], [], [], p.search_text, p.options])
            tx.execute("INSERT INTO timelines (investigation_id, parquet) VALUES (?, ?)",
                       ["old-one", p.parquet])
            tx.execute("INSERT INTO duplicates (investigation_id, dup_key, group_id, layer, "
                       "gap_seconds, at, customer, amount, currency, search_text) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       ["old-one", d.dup_key, d.group_id, d.layer, d.gap_seconds, d.at,
                        d.customer, d.amount, d.currency, text])
        assert old.schema_version() == 3
        store = open_store(url)
        assert store.schema_version() == len(SQLITE_MIGRATIONS) >= 4
        [row] = store.list()
        assert (row.id, row.status, row.owner, row.first_at, row.last_at) == (
            "old-one", "open", None, None, None), kind
        assert (row.duplicates, row.refunded) == (1, None), kind  # not looked at: unknown
        [hit] = store.search_duplicates(str(d.customer))
        assert hit.duplicate.refunded is None and hit.duplicate.dup_key == d.dup_key
        # the new columns are writable on the migrated row, and sort it after dated ones
        store.set_workflow("old-one", status="resolved", owner="bo")
        new = save(store, "new", step_retry)
        assert [x.id for x in store.list(order="incident")] == [new, "old-one"]
        assert [x.id for x in store.list(status="resolved")] == ["old-one"]
        snap = store.get("old-one")
        assert snap is not None and len(snap.timeline) == len(step_retry.timeline)


def test_a_saved_duplicate_comes_back_with_its_tool(backend: Backend,
                                                   step_retry: Incident) -> None:
    """Issue 20: a search names each duplicate in words, its tool among them."""
    inv_id = save(backend.store, "tool", step_retry)
    group = step_retry.analysis.groups[0]
    assert group.tool_name == "charge_subscription"
    [dup] = backend.store.duplicates(inv_id)
    [hit] = backend.store.search_duplicates(str(dup.customer))
    assert dup.tool == hit.duplicate.tool == "charge_subscription"
    # and a search for the tool's name finds it
    [by_tool] = backend.store.search_duplicates("charge_subscription")
    assert by_tool.duplicate.dup_key == dup.dup_key


def test_a_store_of_version_4_is_migrated_and_its_duplicates_name_no_tool(
        tmp_path: Path, request: pytest.FixtureRequest, step_retry: Incident) -> None:
    for kind in ("sqlite", "postgres"):
        url, old = _old_store(kind, 4, tmp_path, request)
        # what twice wrote before it kept the tool: the version 4 columns only
        p = prepare("old", step_retry.timeline, provider="stripe", sources=(), warnings=(),
                    tags=(), inv_id="old-one", analysis=step_retry.analysis)
        d, text = p.duplicates[0]
        s = p.summary
        with old.transaction(write=True) as tx:
            tx.execute(
                "INSERT INTO investigations (id, title, created_at, provider, group_count, "
                "worst_layer, layers, money_at_risk, sources, tags, warnings, search_text, "
                "options, first_at, last_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [s.id, s.title, s.created_at, "stripe", 1, s.worst_layer, p.layers, {}, [], [],
                 [], p.search_text, p.options, s.first_at, s.last_at])
            tx.execute("INSERT INTO timelines (investigation_id, parquet) VALUES (?, ?)",
                       ["old-one", p.parquet])
            tx.execute("INSERT INTO duplicates (investigation_id, dup_key, group_id, layer, "
                       "gap_seconds, at, customer, amount, currency, search_text, refunded) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       ["old-one", d.dup_key, d.group_id, d.layer, d.gap_seconds, d.at,
                        d.customer, d.amount, d.currency, text, d.refunded])
        assert old.schema_version() == 4
        store = open_store(url)
        assert store.schema_version() == len(SQLITE_MIGRATIONS) >= 5
        [saved] = store.duplicates("old-one")
        assert saved.dup_key == d.dup_key and saved.tool is None, kind  # named without a tool
        new = save(store, "new", step_retry)
        hits = {h.investigation.id: h.duplicate.tool
                for h in store.search_duplicates(str(d.customer))}
        assert hits == {"old-one": None, new: "charge_subscription"}, kind
