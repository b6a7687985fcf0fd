"""What the store raises. Every message is safe to show: it names the store with any password
removed."""

from __future__ import annotations


class StoreError(Exception):
    """The store cannot do what was asked (unreachable, locked, timed out). Message is safe to
    show: it names the store with any password removed."""


class StoreReadOnly(StoreError):
    """The store can be read but not written: a read-only file, folder or mount, a read-only
    database or a role without the right to write."""


class StoreFull(StoreReadOnly):
    """The disk holding the store is full: nothing new can be written (what was saved is kept,
    and can still be read)."""


class InvestigationNotFound(StoreError, LookupError):
    """A note or override was added to an investigation that does not exist (or a bad id)."""


class InvestigationExists(StoreError):
    """`create` was given an id that is already taken."""
