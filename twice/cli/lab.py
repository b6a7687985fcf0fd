"""`twice lab` (also `python -m twice.lab`): reproduce a layer with real libraries.

    twice lab run SCENARIO --out DIR [--seed N] [--realism clean|field] [--set NAME=VALUE ...]
    twice lab build-samples [--out DIR]
    twice lab eval --seeds N [--start S] [--realism clean|field] [--out [PATH]] [--keep DIR]

`run` writes one incident folder; `--set` passes a scenario option (e.g. `--set key=derived`,
`--set effects=ledger`, `--set visibility_timeout=600`; see `twice.lab.scenarios`).
`--realism field` draws a variant as hard as production from the seed (`twice.lab.field`); the
scenario `drawn` is the one the field mix draws for the seed. `build-samples` regenerates
sample_data/. `eval` generates incidents and measures `twice analyze` on them
(`twice.lab.accuracy`, docs/accuracy.md).

The lab is imported when one of these commands runs, never by the rest of the command line.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest.mock import patch

import click

from twice.cli.options import EXIT_OK, run

DRAWN = "drawn"  # the scenario the field mix draws for the seed
REALISMS = ["clean", "field"]
seed_option = click.option("--seed", type=int, default=7, show_default=True)


LAB_HELP = """Reproduce a layer with real libraries: a LangGraph agent, the stripe SDK against the
lab's Stripe-compatible server, OpenTelemetry spans.

\b
    twice lab run SCENARIO --out DIR [--seed N] [--realism clean|field] [--set NAME=VALUE]
    twice lab build-samples [--out DIR]
    twice lab eval --seeds N [--start S] [--realism clean|field] [--out [PATH]]
"""


@click.group("lab", help=LAB_HELP,
             short_help="reproduce a layer with real libraries: `twice lab run SCENARIO --out "
                        "DIR`, `twice lab build-samples`")
def lab_group() -> None:
    from twice.extras import require

    require("lab", "the lab")  # one line naming the extra (exit 69), before anything runs


@lab_group.command("build-samples")
@click.option("--out", default="sample_data", show_default=True)
@seed_option
def build_samples_command(out: str, seed: int) -> int:
    """Regenerate sample_data/."""
    from twice.lab.samples import build_samples

    for folder in build_samples(out, seed=seed):
        print(folder)
    return EXIT_OK


@lab_group.command("run")
@click.argument("scenario")
@click.option("--out", required=True)
@seed_option
@click.option("--noise", type=int, default=None, help="noise runs per phase")
@click.option("--dsn", default=None,
              help="PostgreSQL DSN: PostgresSaver checkpoints (and the PostgreSQL queue)")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="a scenario option, e.g. key=derived (repeatable)")
@click.option("--realism", type=click.Choice(REALISMS), default="clean",
              help="clean (the samples) or field (a variant as hard as production)")
@click.option("--detailed-truth", is_flag=True,
              help="clean realism: also write request ids and expected findings")
def run_command(scenario: str, out: str, seed: int, noise: int | None, dsn: str | None,
                settings: Sequence[str], realism: str, detailed_truth: bool) -> int:
    """Run one scenario into an incident folder."""
    from twice.lab.field import field_scenario
    from twice.lab.scenarios import ALL_SCENARIOS, OptionError, run_scenario

    known = [*sorted(ALL_SCENARIOS), DRAWN]
    if scenario not in known:
        raise click.BadParameter(f"{scenario!r} is not one of {', '.join(known)}",
                                 param_hint="'SCENARIO'")
    options: dict[str, Any] = {}
    for item in settings:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--set wants NAME=VALUE, got {item!r}")
        options[name.strip()] = _value(value.strip())
    if scenario == DRAWN:
        if realism != "field":
            raise click.UsageError("the scenario 'drawn' needs --realism field")
        scenario = field_scenario(seed)
    try:
        folder = run_scenario(scenario, out, seed=seed, noise=noise, dsn=dsn,
                              realism=realism,  # type: ignore[arg-type]
                              detailed_truth=detailed_truth or None, **options)
    except OptionError as error:  # an option the scenario does not take, or a bad value
        raise click.UsageError(str(error)) from None
    print(folder)
    return EXIT_OK


def _value(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@lab_group.command("eval")
@click.option("--seeds", type=int, default=None, help="how many incidents")
@click.option("--ci", is_flag=True,
              help="the CI gate's 20 field incidents (tests/lab/test_accuracy.py)")
@click.option("--start", type=int, default=None,
              help="first seed (default: field 1000, the DEV range; clean 7)")
@click.option("--realism", type=click.Choice(REALISMS), default="field", show_default=True)
@click.option("--out", is_flag=False, flag_value="", default=None, metavar="[PATH]",
              help="write the JSON results here (bare --out: benchmarks/results/accuracy.json;"
                   " default: a temporary file)")
@click.option("--label", default=None,
              help="the name of this run in the results file (default: realism and seed range)")
@click.option("--keep", default=None, metavar="DIR",
              help="keep the generated incident folders under DIR")
@click.option("--jobs", type=int, default=None, help="incidents generated at once (at most 2)")
@click.option("--corpus", default=None, metavar="DIR",
              type=click.Path(exists=True, file_okay=False),
              help="score the incident folders under DIR that carry a truth.json in the corpus "
                   "format instead of generating any (twice.lab.corpus)")
@click.option("--folders", default=None, metavar="DIR",
              type=click.Path(exists=True, file_okay=False),
              help="score again the lab incident folders kept under DIR (--keep) instead of "
                   "generating: the same incidents before and after a change")
def eval_command(seeds: int | None, ci: bool, start: int | None, realism: str, out: str | None,
                 label: str | None, keep: str | None, jobs: int | None,
                 corpus: str | None, folders: str | None) -> int:
    """Measure twice analyze on generated incidents, or on a corpus of incident folders."""
    from twice.lab import accuracy

    if corpus is not None:
        from twice.lab import corpus as corpus_eval

        return corpus_eval.run_eval(Path(corpus), analyze_args, out or None)
    path = str(accuracy.DEFAULT_OUT) if out == "" else out
    return accuracy.run_eval(analyze_folder, seeds=seeds, ci=ci, start=start, realism=realism,
                             out=path, label=label, keep=keep,
                             jobs=accuracy.MAX_JOBS if jobs is None else jobs,
                             folders=folders)


_ANALYSIS_LOCK = threading.Lock()


def analyze_folder(folder: Path) -> tuple[dict[str, Any], float, float | None]:
    """`twice analyze FOLDER --format json` in this process: (report, wall s, engine s).

    The engine's own time is measured by wrapping the `analyze` the command calls (None if the
    command no longer calls it by that name)."""
    import twice.cli.analyze as command
    from twice.cli.root import main

    engine_s: list[float] = []
    target: Any = command if hasattr(command, "analyze") else None
    timing: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if target is not None:
        real_analyze = target.analyze

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return real_analyze(*args, **kwargs)
            finally:
                engine_s.append(time.perf_counter() - started)

        timing = patch.object(target, "analyze", timed)
    buffer = io.BytesIO()
    stdout = io.TextIOWrapper(buffer, encoding="utf-8")
    with _ANALYSIS_LOCK, timing, contextlib.redirect_stdout(stdout):
        started = time.perf_counter()
        code = main(["analyze", str(folder), "--format", "json"])
        wall = time.perf_counter() - started
        stdout.flush()
    if code != 0:
        raise RuntimeError(f"twice analyze {folder} exited {code}")
    report: dict[str, Any] = json.loads(buffer.getvalue())
    return report, wall, sum(engine_s) if engine_s else None


def analyze_args(args: list[str]) -> tuple[int, dict[str, Any] | None, str, float]:
    """`twice analyze ARGS --format json` in this process: (exit code, report or None, what it
    wrote on stderr, wall s). An exception out of the command is a crash: exit code 1 and its
    traceback as the stderr text."""
    import traceback

    from twice.cli.root import main

    buffer = io.BytesIO()
    stdout = io.TextIOWrapper(buffer, encoding="utf-8")
    stderr = io.StringIO()
    started = time.perf_counter()
    with _ANALYSIS_LOCK, contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(["analyze", *args, "--format", "json"])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except Exception:  # noqa: BLE001 - a crash is a result to score, not the end of the run
            code = 1
            stderr.write(traceback.format_exc())
        stdout.flush()
    wall = time.perf_counter() - started
    report = None
    if code == 0:
        try:
            report = json.loads(buffer.getvalue())
        except ValueError:
            code = 1
    return code, report, stderr.getvalue(), wall


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m twice.lab ...`: the `twice lab` commands."""
    return run(lab_group, argv, "twice lab")
