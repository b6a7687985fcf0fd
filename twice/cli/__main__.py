"""`python -m twice.cli ...`: the `twice` command."""

from __future__ import annotations

from twice.cli import main

raise SystemExit(main())
