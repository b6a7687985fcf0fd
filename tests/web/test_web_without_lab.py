"""The web app of a base install (no `lab` extra): a new drill's page says which extra to
install instead of failing; the rest of the app does not need the lab."""

from __future__ import annotations

import json
from pathlib import Path

from tests.without_modules import LAB_ONLY, python_without
from twice import drills

_PAGE = """
import json
from streamlit.testing.v1 import AppTest

at = AppTest.from_file("twice/web/main.py", default_timeout=120)
for key, value in json.loads(sys.argv[2]).items():
    at.query_params[key] = value
at.run()
print(json.dumps({"exceptions": [str(e.value) for e in at.exception],
                  "info": [i.value for i in at.info], "error": [e.value for e in at.error],
                  "title": [t.value for t in at.title]}))
"""


def _page(tmp_path: Path, query: dict[str, str]) -> dict[str, list[str]]:
    env = {"TWICE_DRILL_CACHE": str(tmp_path / "cache"), "TWICE_STORE": str(tmp_path / "s.db"),
           "TWICE_DRILL_STORE": str(tmp_path / "d.db")}
    done = python_without(LAB_ONLY, _PAGE.replace("sys.argv[2]", repr(json.dumps(query))),
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    page: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return page


def test_a_new_drill_names_the_extra(tmp_path: Path) -> None:
    page = _page(tmp_path, {"drill": drills.drill_for(1, "step_retry").id})
    assert page["exceptions"] == [] and page["error"] == []
    assert any("pip install 'twice[lab]'" in text for text in page["info"]), page


def test_the_incidents_page_needs_no_lab(tmp_path: Path) -> None:
    page = _page(tmp_path, {})
    assert page["exceptions"] == [] and page["error"] == [], page
