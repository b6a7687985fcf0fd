"""A base install (`pip install twice`, no extra) analyses evidence; a command that needs the
`lab` extra says in one line which extra to install and exits 69, never with a traceback."""

from __future__ import annotations

from pathlib import Path

from tests.without_modules import LAB_ONLY, ROOT, twice_without
from twice import drills

INSTALL = "pip install 'twice[lab]'"


def _one_line_naming_the_extra(stderr: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert INSTALL in lines[0]


def test_analyze_works_without_the_lab() -> None:
    done = twice_without(LAB_ONLY, "analyze", str(ROOT / "sample_data" / "step_retry"),
                         "--format", "json")
    assert done.returncode == 0, done.stderr
    assert '"layer": "step_retry"' in done.stdout


def test_a_new_drill_without_the_lab_names_the_extra(tmp_path: Path) -> None:
    drill = drills.drill_for(1, "step_retry")
    done = twice_without(LAB_ONLY, "drill", "--drill", drill.id, "--answer", "step_retry",
                         "--fix", "derived_key", "--cache", str(tmp_path / "cache"),
                         "--store", str(tmp_path / "s.sqlite3"))
    assert done.returncode == 69, (done.stdout, done.stderr)
    _one_line_naming_the_extra(done.stderr)
    assert done.stderr.startswith("twice drill: generating a drill needs the 'lab' extra")


def test_drill_progress_needs_no_lab(tmp_path: Path) -> None:
    done = twice_without(LAB_ONLY, "drill", "progress", "--trainee", "ana",
                         "--store", str(tmp_path / "s.sqlite3"))
    assert done.returncode == 0, done.stderr


def test_twice_lab_without_the_lab_names_the_extra(tmp_path: Path) -> None:
    done = twice_without(LAB_ONLY, "lab", "run", "sdk_retry", "--out", str(tmp_path / "out"))
    assert done.returncode == 69, (done.stdout, done.stderr)
    _one_line_naming_the_extra(done.stderr)
    assert not (tmp_path / "out").exists()


def test_help_of_twice_lab_is_shown_without_the_lab() -> None:
    done = twice_without(LAB_ONLY, "lab", "--help")
    assert done.returncode == 0, done.stderr
    assert "build-samples" in done.stdout


def test_a_missing_lab_module_met_inside_a_command_names_the_extra(tmp_path: Path) -> None:
    """Past the up-front check (one module of the lab missing, the others there), the
    import error the lab meets is still the one line, not a traceback."""
    done = twice_without(["opentelemetry.sdk.trace.export"], "lab", "run", "sdk_retry", "--out",
                         str(tmp_path / "out"))
    assert done.returncode == 69, (done.stdout, done.stderr)
    _one_line_naming_the_extra(done.stderr)
    assert "module opentelemetry.sdk.trace.export is not installed" in done.stderr
