"""Lab commands.

`python -m lab build-samples [--out DIR]` regenerates the sample incidents;
`python -m lab run SCENARIO --out DIR [--seed N]` writes one incident folder.
"""

from __future__ import annotations

import argparse
import sys

from lab.scenarios import SCENARIOS, build_samples, run_scenario


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="twice lab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    samples = commands.add_parser("build-samples", help="regenerate sample_data/")
    samples.add_argument("--out", default="sample_data")
    samples.add_argument("--seed", type=int, default=7)
    run = commands.add_parser("run", help="run one scenario into an incident folder")
    run.add_argument("scenario", choices=sorted(SCENARIOS))
    run.add_argument("--out", required=True)
    run.add_argument("--seed", type=int, default=7)
    run.add_argument("--noise", type=int, default=None, help="noise runs per phase")
    run.add_argument("--dsn", default=None, help="PostgreSQL DSN for PostgresSaver checkpoints")
    args = parser.parse_args(argv)
    if args.command == "build-samples":
        for folder in build_samples(args.out, seed=args.seed):
            print(folder)
        return 0
    print(run_scenario(args.scenario, args.out, seed=args.seed, noise=args.noise, dsn=args.dsn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
