"""The web app's incident folder carries the manifest `twice investigate --out` writes: a live
investigation that lost a source, saved by the app and exported, analyses as partial with that
source's error (here: localstripe answers, the trace backend does not)."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.connectors.test_localstripe import KEY, TRACE_PASSWORD, incident  # noqa: F401
from twice.cli import main
from twice.cli.exits import EXIT_PARTIAL
from twice.engine import analyze
from twice.store import open_store
from twice.web.export import incident_zip
from twice.web.forms import save_live

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # localstripe's aiohttp


def test_a_partial_live_investigation_exported_from_the_app_analyses_as_partial(
        incident: tuple[str, str], tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    from twice.connectors.live.investigate import Request, investigate

    url, customer = incident
    req = Request(subject=customer, around=datetime.now(UTC), window=timedelta(hours=2),
                  stripe_key=KEY, stripe_base_url=url,
                  traces=f"jaeger+http://ops:{TRACE_PASSWORD}@127.0.0.1:9")
    result = investigate(req)
    assert result.partial and not result.rows.empty
    store = open_store(str(tmp_path / "investigations.sqlite3"))
    inv = save_live(store, req, result, str(tmp_path / "uploads"))
    snap = store.get(inv)
    assert snap is not None
    with zipfile.ZipFile(io.BytesIO(incident_zip(snap, analyze(snap.timeline)))) as z:
        z.extractall(tmp_path / "export")
    folder = tmp_path / "export" / f"twice-{inv}"

    saved = json.loads((folder / "twice-manifest.json").read_text())
    assert saved["partial"] is True and saved["made_by"] == "twice web export"
    assert saved["versions"]["twice"] and saved["versions"]["contract"] == 1
    assert {s["name"] for s in saved["sources"] if s["ok"]} == {"stripe_events"}
    (failed,) = [s for s in saved["sources"] if not s["ok"]]
    assert "127.0.0.1:9" in failed["errors"][0]
    assert saved["window"]["since"] <= saved["window"]["until"]
    assert isinstance(saved["clock_offsets"], list)
    for path in folder.iterdir():
        assert TRACE_PASSWORD.encode() not in path.read_bytes(), path
        assert KEY.encode() not in path.read_bytes(), path

    capsys.readouterr()
    assert main(["analyze", str(folder), "--format", "json"]) == EXIT_PARTIAL
    offline = json.loads(capsys.readouterr().out)
    assert offline["partial"] is True and offline["errors"] == saved["errors"]
    assert offline["errors"] == [e.replace(str(tmp_path / "uploads") + "/", "")
                                 for e in result.errors]
    assert [g["tool_call_ids"] for g in offline["groups"]] == [["call_1"]]
    assert main(["analyze", str(folder)]) == EXIT_PARTIAL
    assert "PARTIAL (saved by the investigation)" in capsys.readouterr().out


def test_a_complete_investigation_exports_a_complete_manifest(
        incident: tuple[str, str], tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    from twice.connectors.live.investigate import Request, investigate

    url, customer = incident
    req = Request(subject=customer, around=datetime.now(UTC), window=timedelta(hours=2),
                  stripe_key=KEY, stripe_base_url=url)
    result = investigate(req)
    store = open_store(str(tmp_path / "investigations.sqlite3"))
    inv = save_live(store, req, result, str(tmp_path))
    snap = store.get(inv)
    assert snap is not None
    with zipfile.ZipFile(io.BytesIO(incident_zip(snap, analyze(snap.timeline)))) as z:
        z.extractall(tmp_path / "export")
    folder = tmp_path / "export" / f"twice-{inv}"
    assert json.loads((folder / "twice-manifest.json").read_text())["partial"] is False
    capsys.readouterr()
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["partial"] is False
