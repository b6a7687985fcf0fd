"""Dependencies point inward, for every package (the README's Layout picture, checked below):

    core (twice/*.py) <- connectors <- store <- sweep, drills <- cli, web

The lab (the mirror of production) stands beside them: it reads the core and the connectors and
is read only by the drills, the tests and, inside its commands, the cli's `lab` group. Imports
are read with `ast`, so a lazy import inside a function counts like any other.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "twice"
CORE = "core"  # the modules directly in twice/
# package -> the twice packages it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    CORE: set(),
    "connectors": {CORE},
    "store": {CORE, "connectors"},
    "sweep": {CORE, "connectors", "store"},
    "lab": {CORE, "connectors"},
    "drills": {CORE, "connectors", "store", "lab"},
    "cli": {CORE, "connectors", "store", "sweep", "drills"},
    "web": {CORE, "connectors", "store", "sweep", "drills"},
}
# third-party imports only one package may make
OWNED = {"streamlit": "web", "click": "cli"}
# what the core never imports: it is pure pandas (the connectors read the outside world)
CORE_FORBIDDEN = {"streamlit", "stripe", "psycopg", "langgraph", "duckdb", "click", "rich"}
# the top-level names the repository's folders link to: importing them would load a second copy
LINK_NAMES = {"app", "connectors", "lab"}


def package_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return CORE if len(parts) == 1 else parts[0]


def twice_package(module: str) -> str | None:
    """`twice.sweep.run` -> "sweep"; `twice.engine` -> core; `twice` itself -> core."""
    parts = module.split(".")
    if parts[0] != "twice":
        return None
    if len(parts) == 1 or (PACKAGE / f"{parts[1]}.py").exists():
        return CORE
    return parts[1]


def imports(path: Path) -> Iterator[tuple[str, bool]]:
    """(module imported, whether the import is lazy: inside a function)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    lazy: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lazy.update(ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node in lazy
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "twice":  # `from twice import drills`: the names are packages
                for alias in node.names:
                    yield f"twice.{alias.name}", node in lazy
            else:
                yield node.module, node in lazy


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def violations(path: Path) -> list[str]:
    here = package_of(path)
    rel = path.relative_to(ROOT)
    found = []
    for module, lazy in imports(path):
        top = module.split(".")[0]
        if top in LINK_NAMES:
            found.append(f"{rel} imports {module}: import it as twice.*")
        if top in OWNED and OWNED[top] != here:
            found.append(f"{rel} imports {top}, which only twice.{OWNED[top]} may import")
        if here == CORE and top in CORE_FORBIDDEN:
            found.append(f"{rel}: the core imports {top}")
        target = twice_package(module)
        if target is None or target == here:
            continue
        if here == "cli" and target == "lab" and lazy and rel.name == "lab.py":
            continue  # the `twice lab` commands load the lab when they run
        if here == "lab" and target == "cli" and rel.name == "__main__.py":
            continue  # `python -m twice.lab` is the `twice lab` command
        if target not in ALLOWED[here]:
            found.append(f"{rel} ({here}) imports {module} ({target})")
    return found


def test_the_readme_draws_this_table() -> None:
    """The README's Layout section shows the arrows this test enforces, no more, no fewer."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Layout"):]
    drawn: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = re.fullmatch(r"(\w+)\s+->(.*)", line.split("(")[0].rstrip())
        if match:
            drawn[match[1]] = {n.strip() for n in match[2].split(",") if n.strip()}
    assert drawn == ALLOWED


def test_every_package_is_in_the_table() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ALLOWED) - {CORE}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_dependencies_point_inward(package: str) -> None:
    bad = [v for p in sources() if package_of(p) == package for v in violations(p)]
    assert bad == []


def test_nothing_imports_the_linked_folders() -> None:
    """app/, connectors/ and lab/ are links into twice/ (the project's card names them): code
    outside the package (tests, benchmarks) imports them as twice.* too."""
    outside = [p for d in ("tests", "benchmarks", "scripts") for p in (ROOT / d).rglob("*.py")]
    bad = [f"{p.relative_to(ROOT)}: {m}" for p in outside for m, _ in imports(p)
           if m.split(".")[0] in LINK_NAMES]
    assert bad == []


def test_the_linked_folders_are_links_into_the_package() -> None:
    for name, target in {"app": "twice/web", "connectors": "twice/connectors",
                         "lab": "twice/lab"}.items():
        link = ROOT / name
        assert link.is_symlink() and not Path(link.readlink()).is_absolute(), name
        assert link.resolve() == (ROOT / target).resolve(), name


def test_importing_twice_stays_light() -> None:
    """The public API (`import twice`) loads the engine, never the web app or the command line."""
    code = "import sys, twice; print(sorted({m.split('.')[0] for m in sys.modules}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    loaded = set(ast.literal_eval(done.stdout))
    assert not loaded & {"streamlit", "click", "rich", "plotly", "stripe", "psycopg"}
