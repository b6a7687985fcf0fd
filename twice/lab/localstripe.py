"""localstripe (PyPI: a stateful fake Stripe server, aiohttp) on a loopback port, in this process.

A second Stripe-compatible peer beside the lab's own server: it refuses `types[]` on
`GET /v1/events` (400 "Unexpected types"), writes no `request` on its events and ignores
Idempotency-Key, as real compatible servers may. Its state is one module-level store and its
aiohttp application binds to the first event loop that runs it, so one server runs at a time in
a process, on one loop kept for the process; it starts empty (the store is cleared).

localstripe writes its whole store to `/tmp/localstripe.pickle` at every change (quadratic for
thousands of objects, and a path every localstripe on the machine shares): here the store lives
in memory only.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any, Self

_LOOP: asyncio.AbstractEventLoop | None = None  # localstripe's app binds to its first loop
_LOOP_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, daemon=True, name="localstripe").start()
        return _LOOP


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
        self._runner: Any = None
        self.url = ""

    def start(self) -> LocalStripe:
        self._store.dump_to_disk = lambda: None  # memory only: see the module's docstring
        self._store.clear()
        self._runner = self._web.AppRunner(self._app)
        asyncio.run_coroutine_threadsafe(self._serve(), _loop()).result(timeout=30)
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def _serve(self) -> None:
        await self._runner.setup()
        await self._web.TCPSite(self._runner, "127.0.0.1", 0).start()

    def stop(self) -> None:
        if self._runner is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), _loop()).result(timeout=10)
        self._runner = None
        self._store.clear()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
