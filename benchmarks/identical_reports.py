"""The reports of incident folders, written one file a folder, to prove a refactor identical.

    python benchmarks/identical_reports.py OUT 'GLOB' ['GLOB' ...]

Runs `twice analyze FOLDER --format json` (the command line's own code path, in this process)
on every folder the globs name and writes OUT/<hash of the folder's path>.json: the folder, the
exit code and the JSON. A folder with a corpus truth.json that names its inputs (`inputs`) is
analysed with those flags, as `twice lab eval --corpus` does. Run it with the tree before and
after a change (`PYTHONPATH=TREE`) and compare the two OUT folders with `diff -r`: prove it on
evidence the lab did not make too (`../shared/corpus/independent/set-*/*/*`), not on the lab's
folders alone.
"""

from __future__ import annotations

import glob
import hashlib
import json
import sys
from pathlib import Path

from click.testing import CliRunner

from twice.cli import cli


def analyze_args(folder: Path) -> list[str]:
    truth = folder / "truth.json"
    inputs = json.loads(truth.read_text()).get("inputs") if truth.is_file() else None
    if not inputs:
        return ["analyze", str(folder), "--format", "json"]
    args = ["analyze", "--format", "json"]
    for flag, name in inputs.items():
        args += [flag, str(folder / name)]
    return args


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    folders = sorted({Path(p) for pattern in argv[1:] for p in glob.glob(pattern)
                      if Path(p).is_dir()})
    runner = CliRunner()
    for folder in folders:
        result = runner.invoke(cli, analyze_args(folder))
        name = hashlib.sha1(str(folder).encode()).hexdigest()[:12]
        (out / f"{name}.json").write_text(f"{folder}\n{result.exit_code}\n{result.output}")
    print(f"{len(folders)} folders -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
