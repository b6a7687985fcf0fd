"""`twice drill` end to end in a terminal, and the drill store (tries, progress, spaced
repetition, cohorts)."""

from __future__ import annotations

import io
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from twice import drills
from twice.cli import main as twice_main
from twice.cli.drill import main
from twice.drills.store import DrillStore, default_path, results_csv, trainee_name

L1_STEP = drills.drill_for(1, "step_retry")


@pytest.fixture(scope="session")
def drill_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "drill-cache"


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=220, color_system=None), out


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_a_drill_in_the_terminal_with_gradual_reveal(drill_cache: Path, tmp_path: Path) -> None:
    """The same drill the browser test plays: the page first, sources one by one, confidence,
    a wrong layer, then the feedback on it, the explanation and the debrief."""
    scores = tmp_path / "s.sqlite3"
    answers = iter([
        "provider", "9", "2", "",  # open the provider, nonsense, the checkpoints, answer
        "3",  # fairly sure
        "5",  # model_reemission: wrong
        "1",  # derive the key: right
        "1", "1", "1",  # refund the second, the agent's team, charged twice
    ])
    console, out = _console()
    code = main(["--drill", L1_STEP.id, "--trainee", " Ana ", "--cache", str(drill_cache),
                 "--store", str(scores)], read=lambda prompt: next(answers), console=console)
    assert code == 0
    text = out.getvalue()
    page, rest = text.split("The provider's payment requests", 1)
    assert "may have been charged" in page and "request id" not in page  # the page alone
    assert "'9': choose one of" in rest
    asked = rest.split("How sure are you?")[0]
    assert "The agent's checkpoints" in asked and "The traces" not in asked  # as asked for
    assert "step_retry" not in text.split("Score ")[0]  # the question never names the answer
    result = _flat(text.split("Score ", 1)[1])
    assert result.startswith("2/3: layer wrong, fix right, sources right")
    assert "You said model_reemission. One tool call id" in result  # feedback on that answer
    assert "the model asked once" in result
    assert "What gave it away" in result and "What could mislead" in result
    assert "You opened: provider, checkpoints (first: provider)" in result
    assert "You were fairly sure before answering and decided in" in result
    assert "The expert's path through the evidence" in result
    [attempt] = DrillStore(scores).history("ana")
    assert (attempt.drill_id, attempt.true_layer, attempt.layer_answer, attempt.opened,
            attempt.confidence, attempt.score, attempt.response_ok) == (
        L1_STEP.id, "step_retry", "model_reemission", ("provider", "checkpoints"), 3, 2, 3)
    assert attempt.decide_s is not None


def test_sources_opened_by_flag_are_shown_before_the_questions(drill_cache: Path,
                                                               tmp_path: Path) -> None:
    """`--open` with the answers given at the prompt: the sources named are shown first (they
    were skipped, and the trainee answered on the page alone)."""
    answers = iter(["3", "3", "1", "1", "1", "1"])
    console, out = _console()
    code = main(["--drill", L1_STEP.id, "--trainee", "ana", "--cache", str(drill_cache),
                 "--store", str(tmp_path / "s.sqlite3"), "--open", "provider,checkpoints"],
                read=lambda prompt: next(answers), console=console)
    assert code == 0
    asked = out.getvalue().split("How sure are you?")[0]
    assert "The provider's payment requests" in asked
    assert "The agent's checkpoints" in asked and "The traces" not in asked
    assert "You opened: provider, checkpoints" in _flat(out.getvalue())


def test_answer_flags_grade_explain_and_record(drill_cache: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "drills.sqlite3"
    monkeypatch.setenv("TWICE_DRILL_STORE", str(store))
    monkeypatch.setenv("TWICE_DRILL_CACHE", str(drill_cache))
    code = twice_main(["drill", "--drill", L1_STEP.id, "--trainee", "ana", "--open",
                       "provider,checkpoints", "--answer", "step_retry", "--fix", "derived_key",
                       "--mitigation", "refund_second", "--owner", "agent_team", "--status",
                       "charged_twice"])
    assert code == 0
    out = capsys.readouterr().out
    assert "Score 3/3" in out and "Response 3/3" in out
    assert f"twice drill --drill {L1_STEP.id}" in out  # the drill can be shared
    assert "On your answer" not in out  # nothing wrong, nothing to say about it
    assert DrillStore(store).progress("ana")[1].text == \
        "1 drills, 1 tries; first tries 3/3; right layer 1/1"


def test_with_flags_the_response_questions_are_optional(drill_cache: Path,
                                                       tmp_path: Path) -> None:
    console, out = _console()
    code = main(["--drill", L1_STEP.id, "--trainee", "bo", "--answer", "step_retry", "--fix",
                 "derived_key", "--cache", str(drill_cache), "--store", str(tmp_path / "s")],
                read=lambda prompt: pytest.fail(f"asked {prompt!r}"), console=console)
    assert code == 0 and "Response" not in out.getvalue()
    [kept] = DrillStore(tmp_path / "s").history("bo")
    assert kept.response_ok is None and kept.opened == drills.SOURCES
    assert not kept.evidence_ok  # every source opened: more than the answer needs


def test_a_bad_drill_id_or_flag_is_one_message_and_exit_2(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    assert main(["--drill", "L2-step_retry-5", "--store", str(tmp_path / "s")]) == 2
    assert "not a drill id" in capsys.readouterr().err
    assert main(["--drill", "L1-1", "--answer", "retry", "--store", str(tmp_path / "s")]) == 2
    assert "choose one of" in capsys.readouterr().err


def test_no_answer_on_a_closed_stdin_is_not_a_traceback(
        drill_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def closed(prompt: str) -> str:
        raise EOFError

    console, _ = _console()
    code = main(["--drill", L1_STEP.id, "--cache", str(drill_cache),
                 "--store", str(tmp_path / "s.sqlite3")], read=closed, console=console)
    assert code == 2
    assert "--answer and --fix" in capsys.readouterr().err
    assert DrillStore(tmp_path / "s.sqlite3").history("anyone") == []


# --- the store ---------------------------------------------------------------------------


def _graded(drill_id: str, true_layer: str, answer: str, score: int) -> tuple[drills.Drill,
                                                                             drills.Grade]:
    drill = drills.parse_id(drill_id)
    key = drills.Key(true_layer, frozenset({true_layer}), frozenset({"derived_key"}),
                     ("provider", "checkpoints"), False, "refund_second",
                     frozenset({"agent_team"}), "charged_twice")
    ok = answer == true_layer
    evidence = score - int(ok) > 1
    fix = score - int(ok) - int(evidence) > 0
    return drill, drills.Grade(drills.Answer(answer, "derived_key" if fix else "nothing",
                                             ("provider",), 2, 12.5), key, ok, fix, evidence)


def _record(store: DrillStore, trainee: str, drill_id: str, true_layer: str, answer: str,
            score: int, at: datetime) -> None:
    drill, g = _graded(drill_id, true_layer, answer, score)
    assert g.score == score
    store.record(trainee, drill, g, at=at)


T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def test_progress_shows_failed_tries_and_first_try_scores(tmp_path: Path) -> None:
    store = DrillStore(tmp_path / "d.sqlite3")
    _record(store, "Ana", "L1-4", "step_retry", "redelivery", 0, T0)
    _record(store, "ana ", "L1-4", "step_retry", "step_retry", 3, T0 + timedelta(minutes=1))
    _record(store, "ANA", "L1-7", "sdk_retry", "sdk_retry", 2, T0 + timedelta(minutes=2))
    _record(store, "bo", "L1-4", "step_retry", "step_retry", 3, T0)
    progress = store.progress("ana")
    # a 0 then a 3 on one drill is not 3/3: the first try counts, the failed one is kept
    assert progress[1].text == "2 drills, 3 tries; first tries 2/6; right layer 2/3"
    history = store.history("Ana")
    assert [h.drill_id for h in history] == ["L1-7", "L1-4", "L1-4"]  # newest first
    assert history[-1].score == 0 and history[-1].at == T0
    assert store.confusion("ana")["step_retry"] == {"redelivery": 1, "step_retry": 1}


def test_a_name_is_normalised_and_kept(tmp_path: Path) -> None:
    assert trainee_name("  Ana   Lima ") == trainee_name("ana lima") == "ana lima"
    assert trainee_name("ＡＮＡ") == "ana"  # full-width letters are the same name
    for bad in ("", "   ", "ana\x1b[2J", "a" * 65, "ana\u202e"):
        with pytest.raises(ValueError):
            trainee_name(bad)


def test_spaced_repetition_brings_back_what_was_missed(tmp_path: Path) -> None:
    store = DrillStore(tmp_path / "d.sqlite3")
    _record(store, "ana", "L1-4", "step_retry", "redelivery", 0, T0)
    assert store.due("ana") == ["step_retry"]  # a miss comes back on the next drill
    review = store.review_drill("ana")
    assert review is not None and review.level == 1 and review.spec.layer == "step_retry"
    _record(store, "ana", review.id, "step_retry", "step_retry", 3, T0 + timedelta(minutes=1))
    assert store.due("ana") == []  # right once: due again after one other drill
    _record(store, "ana", "L1-1", "sdk_retry", "sdk_retry", 3, T0 + timedelta(minutes=2))
    assert store.due("ana") == ["step_retry"]
    assert DrillStore(tmp_path / "d.sqlite3").review_drill("bo") is None


def test_a_cohort_gets_a_drill_set_and_its_results(tmp_path: Path) -> None:
    store = DrillStore(tmp_path / "d.sqlite3")
    store.create_cohort("on-call q3", ["Ana", "bo", "=cmd"], ["L1-4", "L1-7"])
    assert store.cohort("on-call q3") == (["=cmd", "ana", "bo"], ["L1-4", "L1-7"])
    assert store.assigned("ANA") == [("on-call q3", ["L1-4", "L1-7"])]
    _record(store, "ana", "L1-4", "step_retry", "redelivery", 0, T0)
    _record(store, "ana", "L1-4", "step_retry", "step_retry", 3, T0 + timedelta(minutes=1))
    _record(store, "bo", "L1-4", "step_retry", "step_retry", 3, T0)
    _record(store, "bo", "L2-9", "sdk_retry", "sdk_retry", 3, T0)  # not in the set
    rows = store.cohort_results("on-call q3")
    assert len(rows) == 6  # every member and drill, answered or not
    ana = next(r for r in rows if r["trainee"] == "ana" and r["drill"] == "L1-4")
    assert (ana["tries"], ana["first_score"], ana["last_score"]) == (2, 0, 3)
    assert store.cohort_by_layer("on-call q3") == [
        {"layer": "step_retry", "first_tries": 2, "right_first": 1,
         "answered_instead": "redelivery (1)"}]
    csv_text = results_csv(rows)
    assert csv_text.splitlines()[0].startswith("trainee,drill,level,layer,tries")
    assert "'=cmd" in csv_text and "\n=cmd" not in csv_text  # a formula stays text
    with pytest.raises(KeyError):
        store.cohort("nobody")
    with pytest.raises(ValueError):
        store.create_cohort("x", [], ["L1-4"])


def test_twice_drill_cohort_and_progress_commands(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "d.sqlite3"
    assert twice_main(["drill", "cohort", "create", "team", "--members", "ana,bo", "--levels",
                       "1", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{len(drills.CURRICULUM[1].cases)} drills" in out
    _record(DrillStore(path), "ana", DrillStore(path).cohort("team")[1][0], "sdk_retry",
            "sdk_retry", 3, T0)
    csv_path = tmp_path / "team.csv"
    assert twice_main(["drill", "cohort", "show", "team", "--csv", str(csv_path),
                       "--store", str(path)]) == 0
    assert "Per trainee and drill" in capsys.readouterr().out
    assert len(csv_path.read_text().splitlines()) == 1 + 2 * len(drills.CURRICULUM[1].cases)
    assert twice_main(["drill", "progress", "--trainee", "ana", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Progress of ana" in out and "Every try, newest first" in out


def test_concurrent_answers_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "d.sqlite3"

    def answer(trainee: str) -> None:
        store = DrillStore(path)  # each writer opens its own, as two app sessions would
        for i in range(20):
            _record(store, trainee, f"L2-{i}", "sdk_retry", "sdk_retry", 3, T0)

    threads = [threading.Thread(target=answer, args=(f"t{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = DrillStore(path)
    assert all(len(store.history(f"t{n}")) == 20 for n in range(4))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 2
    conn.close()


def test_a_version_one_scores_file_keeps_its_answers(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE schema_version (version INTEGER NOT NULL);
        INSERT INTO schema_version VALUES (1);
        CREATE TABLE attempts (seq INTEGER PRIMARY KEY AUTOINCREMENT, trainee TEXT NOT NULL,
            drill_id TEXT NOT NULL, level INTEGER NOT NULL, layer_answer TEXT NOT NULL,
            fix_answer TEXT NOT NULL, score INTEGER NOT NULL, at TEXT NOT NULL);
        INSERT INTO attempts (trainee, drill_id, level, layer_answer, fix_answer, score, at)
            VALUES ('Ana', 'L1-4', 1, 'step_retry', 'derived_key', 2, '2026-01-05T09:00:00+00:00');
    """)
    conn.close()
    [kept] = DrillStore(path).history("ana")
    assert (kept.drill_id, kept.score, kept.true_layer, kept.opened) == ("L1-4", 2, "", ())


def test_scores_live_beside_the_investigations_unless_told_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWICE_DRILL_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_path() == tmp_path / "data" / "twice" / "drills.sqlite3"
    monkeypatch.setenv("TWICE_DRILL_STORE", str(tmp_path / "mine.sqlite3"))
    _record(DrillStore(), "ana", "L1-1", "sdk_retry", "sdk_retry", 3, T0)
    assert (tmp_path / "mine.sqlite3").exists()
