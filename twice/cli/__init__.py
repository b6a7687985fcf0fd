"""`twice` on the command line."""

from __future__ import annotations

from twice.cli.root import main

__all__ = ["main"]
