"""Generating drill incidents: the field lab in a child process, cached by drill id.

`generate` runs the drill's case in the field lab (`twice.lab.field`) with the variant fields
its level fixes and the repeatable clock (`twice.lab.repeatable`), in a child process (the lab
moves the process's clock with time-machine and keeps moto's queues per process, neither of
which a web server's other sessions should feel), and caches the folder by id. The same id
writes the same evidence on any machine, so the folder can be dropped and made again.
`python -m twice.drills.generate CACHE ID...` is that child.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from twice.drills.curriculum import Drill, fixed_variant, parse_id

# bumped when what a drill id generates changes: older folders are not reused
GENERATION = 2
# the lab's servers listen on free loopback ports, which differ from run to run
_LOOPBACK = re.compile(r"127\.0\.0\.1:(\d{2,5})")


def default_cache() -> Path:
    """$TWICE_DRILL_CACHE, else $XDG_CACHE_HOME/twice/drills (~/.cache/twice/drills)."""
    env = os.environ.get("TWICE_DRILL_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "twice" / "drills"


def _folder(drill: Drill, cache: Path) -> Path:
    return cache / f"g{GENERATION}" / drill.id


def generate(drill: Drill, cache: str | Path | None = None) -> Path:
    """The drill's incident folder, generated once per id under `cache`."""
    return generate_all([drill], cache)[0]


def generate_all(drills: Sequence[Drill], cache: str | Path | None = None) -> list[Path]:
    """Generate every missing folder in ONE child process; returns the folders in order."""
    root = Path(cache) if cache is not None else default_cache()
    folders = [_folder(d, root) for d in drills]
    missing = [d.id for d, f in zip(drills, folders, strict=True)
               if not (f / "truth.json").exists()]
    if missing:
        from twice.extras import require

        require("lab", "generating a drill")  # a drill already generated needs no lab
        (root / f"g{GENERATION}").mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "twice.drills.generate", str(root),
               *dict.fromkeys(missing)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                              cwd=Path(__file__).resolve().parents[2])
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise RuntimeError(f"generating {', '.join(missing)} failed:\n{tail}")
    return folders


def _generate_here(drill: Drill, root: Path) -> Path:
    """Run the case in THIS process into a scratch folder, then move it into place."""
    from twice.lab.scenarios import run_scenario

    final = _folder(drill, root)
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{drill.id}.", dir=final.parent))
    if drill.spec.scenario == "redelivery":
        _reset_moto()  # moto keeps queues per process: the next run may want another timeout
    run_scenario(drill.spec.scenario, scratch, seed=drill.lab_seed, realism="field",
                 repeatable=True, fixed=fixed_variant(drill))
    nominal = _nominal_timeout(drill)
    for path in scratch.iterdir():
        if path.suffix in (".jsonl", ".json") and path.name != "truth.json":
            _same_ports(path, nominal)
    (scratch / "drill.json").write_text(json.dumps(
        {"id": drill.id, "generation": GENERATION, "case": drill.case,
         "missing": list(drill.spec.missing)}) + "\n")
    try:
        scratch.rename(final)
    except OSError:  # another process made it first: theirs is the same incident
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def _nominal_timeout(drill: Drill) -> float | None:
    """The client timeout the case's scenario stands for (the lab's real one is a fraction of a
    second, and its error messages say so)."""
    import inspect

    from twice.lab.scenarios import ALL_SCENARIOS

    if "timeout" in drill.spec.options:
        return float(drill.spec.options["timeout"])
    param = inspect.signature(ALL_SCENARIOS[drill.spec.scenario][0]).parameters.get("timeout")
    return float(param.default) if param is not None else None


def _same_ports(path: Path, nominal_timeout: float | None) -> None:
    """Name the lab's loopback ports 8001, 8002, ... in the order they first appear (in URLs,
    `server.port` attributes and error messages), so a run's files repeat byte for byte; and
    let a timeout's message name the nominal timeout the span's duration shows."""
    from twice.lab.scenario_kit import REAL_TIMEOUT

    text = path.read_text(encoding="utf-8")
    if nominal_timeout is not None:
        text = text.replace(f"(read timeout={REAL_TIMEOUT})", f"(read timeout={nominal_timeout})")
    ports = list(dict.fromkeys(_LOOPBACK.findall(text)))
    if ports:
        names = {port: str(8001 + i) for i, port in enumerate(ports)}
        pattern = re.compile(r"(?<![\d.])(" + "|".join(map(re.escape, ports)) + r")(?!\d)")
        text = pattern.sub(lambda m: names[m[1]], text)
    path.write_text(text, encoding="utf-8")


def _reset_moto() -> None:
    from moto.backends import get_backend

    get_backend("sqs").reset()


def main(argv: Iterable[str] | None = None) -> int:
    """`python -m twice.drills.generate CACHE ID...`: generate drills in this process."""
    args = list(sys.argv[1:] if argv is None else argv)
    root, ids = Path(args[0]), args[1:]
    for text in ids:
        print(_generate_here(parse_id(text), root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
