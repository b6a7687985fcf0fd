"""Shared fixtures: a real PostgreSQL server for the whole test session; Hypothesis profiles.

Markers (pyproject.toml) are set here by what a test needs, never by hand: `postgres` for a test
that uses the session's server (its fixtures), `browser` for one that drives chromium or
serves the app, `lab` for one that runs the lab (tests/lab, tests/drills, generated drills),
`slow` for the ones measured slowest (SLOW below). `./scripts/test --fast` deselects all four.

The suite starts its own throw-away server (initdb + pg_ctl) on 127.0.0.1 with a random
superuser password, so connectors are tested against the real thing, not a double. CI installs
the server binaries; a machine without them fails here with a message saying so.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from psycopg import sql

# Property tests: `ci` (what ./scripts/test and CI run) draws the same cases every run and keeps
# no example database, so a run's verdict never depends on luck or on an earlier run;
# `explore` (plain `python -m pytest`) draws fresh cases each time and remembers failures in
# .hypothesis/. HYPOTHESIS_PROFILE picks one; CI=true alone means `ci`. No deadline in `ci`: a
# loaded machine must not fail a test (the fuzz tests keep their own generous hang guard).
settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI") else "explore"))

_SERVER_OPTIONS = (
    # durability is worthless for a test server and costs most of its start-up time
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
    "-c max_connections=40 -c shared_buffers=16MB -c max_wal_size=256MB "
    "-c log_min_messages=warning"
)


def _server_bin_dir() -> Path:
    found = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if Path(p, "initdb").exists()]
    if not found:
        pytest.fail(
            "PostgreSQL server binaries not found (looked for /usr/lib/postgresql/*/bin/initdb). "
            "The test suite starts a real server: install them, e.g. "
            "`apt-get install postgresql` (Debian/Ubuntu).",
            pytrace=False,
        )
    # newest major version first; directory names are the major version numbers
    def major(path: Path) -> int:
        name = path.parent.name
        return int(name) if name.isdigit() else 0

    return max(found, key=major)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user() -> Callable[[list[str]], list[str]]:
    """initdb and postgres refuse to run as root: run them as `postgres` in that case."""
    if os.geteuid() != 0:
        return lambda cmd: cmd
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.fail("running as root but `runuser` is missing: cannot start PostgreSQL as "
                    "the postgres user", pytrace=False)
    return lambda cmd: [runuser, "-u", "postgres", "--", *cmd]


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.fail(f"{what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}",
                    pytrace=False)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """DSN of a database on a PostgreSQL server started for this test session."""
    bindir = _server_bin_dir()
    wrap = _as_server_user()
    root = Path(tempfile.mkdtemp(prefix="twice-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, user="postgres", group="postgres")
    data = root / "data"
    sockets = root / "sock"
    log = root / "server.log"
    password = secrets.token_urlsafe(24)
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    sockets.mkdir()
    if os.geteuid() == 0:
        for p in (pwfile, sockets):
            shutil.chown(p, user="postgres", group="postgres")
    started = False
    try:
        _run(wrap([str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                   f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=trust",
                   "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"]),
             "initdb")
        pwfile.unlink()
        port = 0
        for _attempt in range(3):  # the free port can be taken between probe and bind
            port = _free_port()
            opts = (f"-c listen_addresses=127.0.0.1 -p {port} "
                    f"-c unix_socket_directories={sockets} {_SERVER_OPTIONS}")
            done = subprocess.run(
                wrap([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w",
                      "-t", "60", "-o", opts, "start"]),
                capture_output=True, text=True, timeout=90,
            )
            if done.returncode == 0:
                started = True
                break
        if not started:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            pytest.fail(f"PostgreSQL did not start:\n{tail}", pytrace=False)
        admin = f"postgresql://postgres:{password}@127.0.0.1:{port}/postgres"
        db = "twice_test"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        yield f"postgresql://postgres:{password}@127.0.0.1:{port}/{db}"
    finally:
        if started:
            subprocess.run(wrap([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w",
                                 "stop"]), capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def _with_database(dsn: str, database: str) -> str:
    base, _, _ = dsn.rpartition("/")
    return f"{base}/{database}"


@pytest.fixture(scope="session")
def new_postgres_database(postgres_dsn: str) -> Iterator[Callable[[], str]]:
    """Factory: each call creates an empty database on the session server and returns its DSN.

    For fixtures wider than one test (e.g. module-scoped data sets); the databases go with the
    server at the end of the session.
    """

    def create() -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(_with_database(postgres_dsn, "postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return _with_database(postgres_dsn, name)

    yield create


@pytest.fixture
def fresh_postgres_dsn(new_postgres_database: Callable[[], str]) -> Iterator[str]:
    """DSN of a new, empty database on the session server (dropped after the test)."""
    dsn = new_postgres_database()
    try:
        yield dsn
    finally:
        name = dsn.rpartition("/")[2]
        with psycopg.connect(_with_database(dsn, "postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(sql.Identifier(name)))


# --- markers, by what a test needs -------------------------------------------------------

POSTGRES_FIXTURES = {"postgres_dsn"}  # every other PostgreSQL fixture depends on it
LAB_FIXTURES = {"drill_cache", "generated"}  # drills generated by the lab
LAB_FOLDERS = {"lab", "drills"}
# what runs a lab scenario (needs twice[lab]): named by the test's module or its own code
LAB_NAMES = {"run_scenario", "run_scenario_with_server"}
# helpers that drive chromium or serve the app (free_port: for the app's server); a module that
# imports one is a browser test
BROWSER_HELPERS = {"chromium", "running_app", "free_port"}
# the slowest tests outside the markers above, a file name marking the whole file (seconds
# measured on a shared 2-core machine under load, about 3x an idle one)
SLOW = {
    "connectors/test_fuzz_provider.py",  # 163 s: property tests
    "twice/test_engine_properties.py",  # 127 s
    "cli/test_cli_bounds.py",  # 110 s: memory and time bounds on big inputs
    "connectors/test_fuzz_spans.py",  # 65 s
    "connectors/test_fuzz_files.py",  # 61 s
    "connectors/test_parallel.py",  # 44 s: worker processes
    "connectors/test_fuzz_registry.py",  # 35 s
    "connectors/test_fuzz_checkpoints.py",  # 33 s
    "connectors/test_hostile_http.py",  # 33 s
    "connectors/test_fuzz_api.py",  # 33 s
    "connectors/test_spans_speed_paths.py",  # 33 s
    "connectors/test_stripe_events_duckdb.py",  # 17 s
    "cli/test_cli_inputs.py::test_a_bad_option_value_is_one_usage_error_naming_it",  # 46 s
    "cli/test_cli_inputs.py::test_a_device_is_refused_up_front",  # 12 s
    "cli/test_exit_codes.py::test_duplicates_found_exit_0_without_the_gate_and_1_with_it",  # 11
    "cli/test_cli_inputs.py::test_corpus_file_through_analyze",  # 10 s
    "cli/test_cli_inputs.py::test_a_fifo_is_refused_up_front_not_waited_on",  # 7 s
    "cli/test_cli_inputs.py::test_a_span_time_past_2100_is_a_warning_naming_file_and_line",  # 7
    "cli/test_cli.py::test_installed_entry_point_runs",  # 6 s
    "cli/test_exit_codes.py::test_a_partial_live_result_exits_3_and_says_partial",  # 6 s
    # peers in side environments (tests/side_venvs.py; skipped where their variable is unset)
    "connectors/test_langfuse_live.py",  # 9 s: the Langfuse SDK's agent run, a 3 s retry
    "connectors/test_langfuse_capture.py",  # 6 s
    "connectors/test_phoenix_server.py",  # 30 s: a real Phoenix server starts (up to 2 min)
}


def _marks(item: pytest.Item) -> set[str]:
    marks = set()
    names = set(getattr(item, "fixturenames", ()))
    parts = Path(str(item.fspath)).relative_to(Path(__file__).parent).parts
    if names & POSTGRES_FIXTURES:
        marks.add("postgres")
    module = getattr(item, "module", None)
    code = getattr(getattr(item, "function", None), "__code__", None)
    if names & LAB_FIXTURES or (len(parts) > 1 and parts[0] in LAB_FOLDERS) or \
            (module is not None and LAB_NAMES & set(vars(module))) or \
            (code is not None and LAB_NAMES & set(code.co_names)):
        marks.add("lab")
    if module is not None and BROWSER_HELPERS & set(vars(module)):
        marks.add("browser")
    file = "/".join(parts)
    if file in SLOW or item.nodeid.removeprefix("tests/") in SLOW or \
            item.nodeid.removeprefix("tests/").split("[")[0] in SLOW:
        marks.add("slow")
    return marks


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for mark in sorted(_marks(item)):
            item.add_marker(getattr(pytest.mark, mark))
