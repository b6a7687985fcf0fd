"""`python -m twice.lab ...` is `twice lab ...` (`run`, `build-samples`, `eval`; see
twice/cli/lab.py)."""

from __future__ import annotations

import sys

from twice.cli.lab import main

if __name__ == "__main__":
    sys.exit(main())
