"""Dependencies point inward: app -> connectors -> twice (and lab beside app)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> top-level imports it must not make
FORBIDDEN = {
    "twice": {"app", "connectors", "lab", "streamlit", "stripe", "psycopg", "langgraph"},
    "connectors": {"app", "lab", "streamlit"},
}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_dependencies_point_inward(package: str) -> None:
    bad = {
        str(p.relative_to(ROOT)): sorted(imports(p) & FORBIDDEN[package])
        for p in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in bad.items() if v} == {}
