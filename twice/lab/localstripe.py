"""localstripe (PyPI: a stateful fake Stripe server, aiohttp) on a loopback port, in this process.

A second Stripe-compatible peer beside the lab's own server: it refuses `types[]` on
`GET /v1/events` (400 "Unexpected types"), writes no `request` on its events and ignores
Idempotency-Key, as real compatible servers may. Its state is one module-level store, so one
server runs at a time in a process; it starts empty (the store is cleared).

localstripe writes its whole store to `/tmp/localstripe.pickle` at every change (quadratic for
thousands of objects, and a path every localstripe on the machine shares): here the store lives
in memory only.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any, Self


class LocalStripe:
    """`with LocalStripe() as server: server.url` -> `http://127.0.0.1:PORT`."""

    def __init__(self) -> None:
        try:
            from aiohttp import web
            from localstripe import resources
            from localstripe.server import app
        except ImportError as exc:  # a test dependency, not a runtime one
            raise ImportError("localstripe is not installed: pip install 'twice[test]'"
                              ) from exc
        self._web = web
        self._app = app
        self._store: Any = resources.store
        self._loop = asyncio.new_event_loop()
        self._runner: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def start(self) -> LocalStripe:
        self._store.dump_to_disk = lambda: None  # memory only: see the module's docstring
        self._store.clear()
        self._runner = self._web.AppRunner(self._app)
        self._loop.run_until_complete(self._runner.setup())
        site = self._web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = self._runner.addresses[0][1]
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="localstripe")
        self._thread.start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = None
        self._store.clear()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
