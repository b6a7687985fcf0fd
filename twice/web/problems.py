"""What a page says when the investigation store fails: what did not happen and why, in plain
words. Never the store's path, DSN or the database's own message, and never a traceback: those
go to the server's log, where whoever runs twice can read them."""

from __future__ import annotations

import logging

from twice.store import StoreError, StoreFull, StoreReadOnly

_LOG = logging.getLogger("twice.web")


def store_problem(exc: StoreError, what: str, store: str = "the investigation store") -> str:
    """`what` failed because of `exc`, as a sentence for the page; the detail is logged."""
    _LOG.warning("%s: %s", what, exc)
    if isinstance(exc, StoreFull):
        return f"{what}: the disk holding {store} is full (what it holds can still be read)."
    if isinstance(exc, StoreReadOnly):
        return f"{what}: {store} is read-only right now."
    return f"{what}: {store} cannot be used right now."
