"""Generating drill incidents: the lab scenario in a child process, cached by drill id.

`generate` runs the lab scenario in a child process (the lab moves the process's clock with
time-machine and keeps moto's queues per process, neither of which a web server's other sessions
should feel) and caches the folder by id; `python -m twice.drills.generate CACHE NOISE|- ID...` is
that child. `skew_provider` moves the provider's timestamps for the skewed-clock variants.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from twice.drills.curriculum import CURRICULUM, Drill, parse_id, variant
from twice.formats import iso


def default_cache() -> Path:
    """$TWICE_DRILL_CACHE, else $XDG_CACHE_HOME/twice/drills (~/.cache/twice/drills)."""
    env = os.environ.get("TWICE_DRILL_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "twice" / "drills"


def _folder(drill: Drill, cache: Path, noise: int | None) -> Path:
    return cache / (drill.id if noise is None else f"{drill.id}.noise{noise}")


def generate(drill: Drill, cache: str | Path | None = None, *, noise: int | None = None) -> Path:
    """The drill's incident folder, generated once per id (and noise override) under `cache`."""
    return generate_all([drill], cache, noise=noise)[0]


def generate_all(drills: Sequence[Drill], cache: str | Path | None = None, *,
                 noise: int | None = None) -> list[Path]:
    """Generate every missing folder in ONE child process; returns the folders in order."""
    root = Path(cache) if cache is not None else default_cache()
    root.mkdir(parents=True, exist_ok=True)
    folders = [_folder(d, root, noise) for d in drills]
    missing = [d.id for d, f in zip(drills, folders, strict=True)
               if not (f / "truth.json").exists()]
    if missing:
        cmd = [sys.executable, "-m", "twice.drills.generate", str(root),
               "-" if noise is None else str(noise), *dict.fromkeys(missing)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              cwd=Path(__file__).resolve().parents[2])
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise RuntimeError(f"generating {', '.join(missing)} failed:\n{tail}")
    return folders


def _generate_here(drill: Drill, root: Path, noise: int | None) -> Path:
    """Run the scenario in THIS process into a scratch folder, then move it into place."""
    from twice.lab.scenarios import run_scenario

    final = _folder(drill, root, noise)
    entry = CURRICULUM[drill.level].entries[drill.scenario]
    v = variant(drill)
    scratch = Path(tempfile.mkdtemp(prefix=f".{drill.id}.", dir=root))
    if drill.scenario in ("redelivery",):
        _reset_moto()  # moto keeps queues per process: the next run may want another timeout
    run_scenario(drill.scenario, scratch, seed=drill.seed,
                 noise=entry.noise if noise is None else noise, **v.options)
    for name in v.drop:
        (scratch / name).unlink(missing_ok=True)
    if v.skew_s:
        skew_provider(scratch, v.skew_s)
    (scratch / "drill.json").write_text(json.dumps(
        {"id": drill.id, "drop": list(v.drop), "skew_s": v.skew_s, "options": v.options}) + "\n")
    try:
        scratch.rename(final)
    except OSError:  # another process made it first: theirs is the same incident
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def _reset_moto() -> None:
    from moto.backends import get_backend

    get_backend("sqs").reset()


def skew_provider(folder: Path, seconds: int) -> None:
    """Move every provider timestamp by `seconds`: a provider clock further off the agent's."""
    events_path = folder / "events.json"
    doc = json.loads(events_path.read_text())
    for event in doc["data"] if isinstance(doc, dict) else doc:
        event["created"] += seconds
        obj = event.get("data", {}).get("object", {})
        if isinstance(obj.get("created"), int):
            obj["created"] += seconds
    events_path.write_text(json.dumps(doc, indent=2) + "\n")
    logs = folder / "stripe_logs.jsonl"
    lines = [json.loads(x) for x in logs.read_text().splitlines() if x.strip()]
    for line in lines:
        line["created_at"] += seconds
    logs.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    log_csv = folder / "request_log.csv"
    with log_csv.open(newline="") as fh:
        reader = csv.DictReader(fh)
        names, rows = list(reader.fieldnames or []), list(reader)
    for row in rows:
        at = pd.Timestamp(row["created"]) + pd.Timedelta(seconds=seconds)
        row["created"] = iso(at, "milliseconds")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    log_csv.write_text(buf.getvalue())


def main(argv: Iterable[str] | None = None) -> int:
    """`python -m twice.drills.generate CACHE NOISE|- ID...`: generate drills in this process."""
    args = list(sys.argv[1:] if argv is None else argv)
    root, noise_text, ids = Path(args[0]), args[1], args[2:]
    noise = None if noise_text == "-" else int(noise_text)
    for text in ids:
        print(_generate_here(parse_id(text), root, noise))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
