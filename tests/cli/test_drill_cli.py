"""`twice drill` end to end, and the drill score store."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from twice import drills
from twice.cli import main as twice_main
from twice.cli.drill import main
from twice.drills.store import DrillStore, LevelProgress, default_path


@pytest.fixture(scope="session")
def drill_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "drill-cache"


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200, color_system=None), out


def test_twice_drill_with_answer_flags_grades_explains_and_records(
        drill_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "drills.sqlite3"
    monkeypatch.setenv("TWICE_DRILL_STORE", str(store))
    monkeypatch.setenv("TWICE_DRILL_CACHE", str(drill_cache))
    drill = drills.drill_for(1, "model_reemission")
    code = twice_main(["drill", "--drill", drill.id, "--trainee", "ana",
                       "--answer", "model_reemission", "--fix", "unknown_outcome"])
    assert code == 0
    out = capsys.readouterr().out
    assert "Score 2/2" in out
    assert "What gave it away" in out and "What would have misled" in out
    assert f"twice drill --drill {drill.id}" in out  # the drill can be shared
    [attempt] = DrillStore(store).history("ana")
    assert (attempt.drill_id, attempt.layer_answer, attempt.score) == (
        drill.id, "model_reemission", 2)
    assert DrillStore(store).progress("ana") == {1: LevelProgress(1, 2, 2)}


def test_interactive_answers_by_number_with_a_retry_on_nonsense(
        drill_cache: Path, tmp_path: Path) -> None:
    drill = drills.drill_for(1, "step_retry")
    answers = iter(["42", "3", "nothing"])  # bad number, step_retry, a wrong fix
    console, out = _console()
    code = main(["--drill", drill.id, "--trainee", "bo", "--cache", str(drill_cache),
                 "--store", str(tmp_path / "s.sqlite3")],
                read=lambda prompt: next(answers), console=console)
    assert code == 0
    text = out.getvalue()
    assert "'42': choose one of" in text
    assert "Score 1/2" in text and "layer right" in text and "fix wrong" in text
    assert "step_retry" not in text.split("Layer?")[0]  # the question never names the answer
    assert DrillStore(tmp_path / "s.sqlite3").history("bo")[0].score == 1


def test_a_bad_drill_id_is_one_message_and_exit_2(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    assert main(["--drill", "L2-step_retry-5", "--store", str(tmp_path / "s")]) == 2
    assert "not a drill id" in capsys.readouterr().err


def test_no_answer_on_a_closed_stdin_is_not_a_traceback(
        drill_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def closed(prompt: str) -> str:
        raise EOFError

    console, _ = _console()
    code = main(["--drill", drills.drill_for(1, "step_retry").id, "--cache", str(drill_cache),
                 "--store", str(tmp_path / "s.sqlite3")], read=closed, console=console)
    assert code == 2
    assert "--answer and --fix" in capsys.readouterr().err
    assert DrillStore(tmp_path / "s.sqlite3").history("anyone") == []


# --- the store ---------------------------------------------------------------------------


def test_progress_counts_drills_and_their_best_scores(tmp_path: Path) -> None:
    store = DrillStore(tmp_path / "d.sqlite3")
    t0 = datetime(2026, 1, 5, 9, tzinfo=UTC)
    store.record("ana", "L1-4", "redelivery", "derived_key", 0, t0)
    store.record("ana", "L1-4", "step_retry", "derived_key", 2, t0 + timedelta(minutes=1))
    store.record("ana", "L1-7", "none", "nothing", 1, t0 + timedelta(minutes=2))
    store.record("ana", "L3-12", "sdk_retry", "client_key", 2, t0 + timedelta(minutes=3))
    store.record("bo", "L1-4", "step_retry", "derived_key", 2, t0)
    assert store.progress("ana") == {1: LevelProgress(2, 3, 4), 3: LevelProgress(1, 2, 2)}
    assert store.progress("ana")[1].text == "2 drills, 3/4"
    history = store.history("ana")
    assert [h.drill_id for h in history] == ["L3-12", "L1-7", "L1-4", "L1-4"]  # newest first
    assert history[-1].at == t0 and history[-1].level == 1
    assert DrillStore(tmp_path / "d.sqlite3").progress("bo") == {1: LevelProgress(1, 2, 2)}
    with pytest.raises(ValueError):
        store.record("ana", "L1-4", "none", "nothing", 3)


def test_twice_drill_progress_prints_the_scores_per_level(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "d.sqlite3"
    DrillStore(path).record("ana", "L2-9", "step_retry", "derived_key", 2)
    assert twice_main(["drill", "progress", "--trainee", "ana", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Progress of ana" in out
    level_two = next(line for line in out.splitlines() if line.strip("│ ").startswith("2 "))
    assert "2/2" in level_two and "1" in level_two


def test_concurrent_answers_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "d.sqlite3"

    def answer(trainee: str) -> None:
        store = DrillStore(path)  # each writer opens its own, as two app sessions would
        for i in range(20):
            store.record(trainee, f"L2-{i}", "sdk_retry", "client_key", i % 3)

    threads = [threading.Thread(target=answer, args=(f"t{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = DrillStore(path)
    assert all(len(store.history(f"t{n}")) == 20 for n in range(4))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 1
    conn.close()


def test_scores_live_beside_the_investigations_unless_told_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWICE_DRILL_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_path() == tmp_path / "data" / "twice" / "drills.sqlite3"
    monkeypatch.setenv("TWICE_DRILL_STORE", str(tmp_path / "mine.sqlite3"))
    DrillStore().record("ana", "L1-1", "step_retry", "derived_key", 2)
    assert (tmp_path / "mine.sqlite3").exists()
    assert json.dumps(DrillStore().progress("ana")) == '{"1": [1, 2, 2]}'
