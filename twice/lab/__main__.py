"""Lab commands.

`python -m twice.lab build-samples [--out DIR]` regenerates the sample incidents;
`python -m twice.lab run SCENARIO --out DIR [--seed N] [--realism clean|field]
[--set NAME=VALUE ...]` writes one incident folder; `--set` passes a scenario option (e.g.
`--set key=derived`, `--set effects=ledger`, `--set visibility_timeout=600`; see
`twice.lab.scenarios`).
`--realism field` draws a variant as hard as production from the seed (`twice.lab.field`); the
scenario `drawn` is the one the field mix draws for the seed.
`python -m twice.lab eval --seeds N [--start S] [--realism clean|field] [--out PATH] [--keep DIR]`
generates N incidents and measures `twice analyze` on them (`twice.lab.accuracy`, docs/accuracy.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from twice.lab.accuracy import add_eval_arguments, run_eval
from twice.lab.field import field_scenario
from twice.lab.samples import build_samples
from twice.lab.scenarios import ALL_SCENARIOS, REALISMS, OptionError, run_scenario

DRAWN = "drawn"  # the scenario the field mix draws for the seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="twice lab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    samples = commands.add_parser("build-samples", help="regenerate sample_data/")
    samples.add_argument("--out", default="sample_data")
    samples.add_argument("--seed", type=int, default=7)
    run = commands.add_parser("run", help="run one scenario into an incident folder")
    run.add_argument("scenario", choices=[*sorted(ALL_SCENARIOS), DRAWN])
    run.add_argument("--out", required=True)
    run.add_argument("--seed", type=int, default=7)
    run.add_argument("--noise", type=int, default=None, help="noise runs per phase")
    run.add_argument("--dsn", default=None,
                     help="PostgreSQL DSN: PostgresSaver checkpoints (and the PostgreSQL queue)")
    run.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="a scenario option, e.g. key=derived (repeatable)")
    run.add_argument("--realism", choices=REALISMS, default="clean",
                     help="clean (the samples) or field (a variant as hard as production)")
    run.add_argument("--detailed-truth", action="store_true",
                     help="clean realism: also write request ids and expected findings")
    evaluate = commands.add_parser("eval", help="measure twice analyze on generated incidents")
    add_eval_arguments(evaluate)
    args = parser.parse_args(argv)
    if args.command == "eval":
        return run_eval(args)
    if args.command == "build-samples":
        for folder in build_samples(args.out, seed=args.seed):
            print(folder)
        return 0
    options: dict[str, Any] = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--set wants NAME=VALUE, got {item!r}")
        options[name.strip()] = _value(value.strip())
    scenario = args.scenario
    if scenario == DRAWN:
        if args.realism != "field":
            parser.error("the scenario 'drawn' needs --realism field")
        scenario = field_scenario(args.seed)
    try:
        folder = run_scenario(scenario, args.out, seed=args.seed, noise=args.noise,
                              dsn=args.dsn, realism=args.realism,
                              detailed_truth=args.detailed_truth or None, **options)
    except OptionError as error:  # an option the scenario does not take, or a bad value
        parser.error(str(error))
    print(folder)
    return 0


def _value(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


if __name__ == "__main__":
    sys.exit(main())
