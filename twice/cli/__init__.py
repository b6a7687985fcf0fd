"""`twice` on the command line: one click command tree (`root.cli`), its commands one module
each, the options they share in `options`."""

from __future__ import annotations

from twice.cli.root import cli, main

__all__ = ["cli", "main"]
