"""HTTP servers on loopback that answer the way a hostile or broken backend does, for the
live sources' tests (trace backends, the Stripe base URL):

- `redirect`: 302 to another origin (a second loopback server standing for an internal
  service, which answers `INTERNAL_ANSWER` and counts the requests it gets);
- `drip`: a complete header, then the body one byte at a time, forever;
- `drip-headers`: the status line, then the headers one byte at a time, forever;
- `endless`: a chunked body that never ends, as fast as the socket takes it;
- `huge`: a Content-Length of 20 GiB, then bytes until the client hangs up;
- `echo`: 401, with the basic-auth password it was sent written first in the body, encoded
  as `Hostile.encoding` names (tests/hostile.py ENCODINGS: HTML entities, form encoding, JSON
  escapes, base64, ...), as debug pages and misconfigured proxies do.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.hostile import ENCODINGS
from twice.lab.loopback import LoopbackHandler, LoopbackService

MODES = ("redirect", "drip", "drip-headers", "endless", "huge")
INTERNAL_ANSWER = b"INTERNAL-SECRET admin console; token=int3rnal-t0ken-planted"
DRIP_EVERY_S = 0.05


@dataclass
class Internal(LoopbackService):
    """What a redirect points at: it must never be asked."""

    requests: list[str] = field(default_factory=list)
    thread_name = "internal-service"

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        self.requests.append(handler.path)
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(len(INTERNAL_ANSWER)))
        handler.end_headers()
        handler.wfile.write(INTERNAL_ANSWER)


class _Handler(LoopbackHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.server.owner.answer(self)


@dataclass
class Hostile(LoopbackService):
    mode: str
    target: str = ""  # where `redirect` points
    encoding: str = "plain"  # how `echo` writes the password
    handler = _Handler
    thread_name = "hostile-backend"

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        out = handler.wfile
        try:
            if self.mode == "echo":
                sent = handler.headers.get("Authorization", "").partition(" ")[2]
                user, _, password = base64.b64decode(sent).decode().partition(":")
                body = f"denied {ENCODINGS[self.encoding](password or user)} for {user}"
                handler.send_response(401)
                handler.send_header("Content-Type", "text/html; charset=utf-8")
                handler.send_header("Content-Length", str(len(body.encode())))
                handler.end_headers()
                out.write(body.encode())
            elif self.mode == "redirect":
                handler.send_response(302)
                handler.send_header("Location", self.target + handler.path)
                handler.send_header("Content-Length", "0")
                handler.end_headers()
            elif self.mode == "drip":
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.end_headers()
                out.flush()
                while True:
                    out.write(b" ")
                    out.flush()
                    time.sleep(DRIP_EVERY_S)
            elif self.mode == "drip-headers":
                out.write(b"HTTP/1.1 200 OK\r\n")
                while True:
                    out.write(b"X")
                    out.flush()
                    time.sleep(DRIP_EVERY_S)
            elif self.mode == "endless":
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()
                chunk = b"[" * 65536
                while True:
                    out.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            elif self.mode == "huge":
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(20 * 2**30))
                handler.end_headers()
                while True:
                    out.write(b" " * 65536)
        except OSError:  # the client hung up: what it should do
            handler.close_connection = True


@contextmanager
def hostile_backend(mode: str, encoding: str = "plain") -> Iterator[tuple[str, Internal]]:
    """(URL of a hostile backend, the internal service its redirect points at)."""
    with Internal() as internal, Hostile(mode, internal.url, encoding) as hostile:
        yield hostile.url, internal
