"""An HTTP server on 127.0.0.1 (free port) served from a daemon thread, for the lab's fakes.

`close()` also cuts the keep-alive connections still open, so a stopped server really stops
answering (http.server would otherwise keep serving a client's persistent connection).
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, handler_class: type[BaseHTTPRequestHandler], owner: Any, name: str) -> None:
        super().__init__(("127.0.0.1", 0), handler_class)
        self.owner = owner  # the object the handler calls back into
        self._name = name
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def serve(self) -> LoopbackServer:
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name=self._name,
        )
        self._thread.start()
        return self

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conn_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conn_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        with self._conn_lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)


class LoopbackHandler(BaseHTTPRequestHandler):
    """Hands each GET to the service that owns the server (`owner.answer(handler)`; a subclass
    adds the other methods its service takes): HTTP/1.1, and no log lines (each service keeps
    its own record)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms stall
    server: LoopbackServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.server.owner.answer(self)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class LoopbackService:
    """start/stop/url/context manager for a lab fake served by a LoopbackServer.

    Subclasses implement `answer(handler)` (one request), may set `handler` (the methods they
    take) and `thread_name`; `_on_start` / `_on_stop` hook extra work.
    """

    handler: type[BaseHTTPRequestHandler] = LoopbackHandler
    thread_name = "lab-service"
    _httpd: LoopbackServer | None = None

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        if self._httpd is None:
            self._on_start()
            self._httpd = LoopbackServer(self.handler, self, self.thread_name).serve()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            self._on_stop()
            httpd.close()

    def _on_start(self) -> None:
        pass

    def _on_stop(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._httpd.url
