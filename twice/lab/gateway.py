"""A retrying reverse proxy on loopback, behaving like an Envoy/Istio route with a retry policy.

Each downstream request is forwarded upstream unchanged (method, path, headers, body) except for
`x-envoy-attempt-count: N`, which Envoy adds per upstream attempt when
`include_request_attempt_count` is set (Istio sets it). A failed attempt whose outcome is in
`retry_on` is retried after Envoy's fully jittered exponential backoff (25 ms base: the first
retry waits up to 25 ms, the second up to 75 ms, ...), up to `retries` times. This is the duplicate
`gateway_retry` makes: the client sent one request, the provider received several, all with the
same headers, so the same idempotency key if the client set one, and none if it did not.

`retry_on` tokens (Envoy's names where they exist): "reset" (upstream closed or reset the
connection before a response), "connect-failure", "timeout" (the per-try timeout fired),
"5xx" (any 5xx response), "gateway-error" (502/503/504), "retriable-4xx" (409).
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import urlsplit

from twice.lab.loopback import LoopbackHandler, LoopbackService

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
}


class GatewayAttempt(NamedTuple):
    time: float  # time.time() when the upstream attempt started
    path: str
    attempt: int  # 1-based, the value of x-envoy-attempt-count
    outcome: str  # the upstream status as a string ("200", "503"), or reset/timeout/...


class _Upstream(NamedTuple):
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


def _retryable(outcome: str, retry_on: frozenset[str]) -> bool:
    if outcome == "connect-failure":  # as in Envoy, 5xx and gateway-error include it
        return bool(retry_on & {"connect-failure", "reset", "5xx", "gateway-error"})
    if not outcome.isdigit():
        return outcome in retry_on
    status = int(outcome)
    return (
        ("5xx" in retry_on and status >= 500)
        or ("gateway-error" in retry_on and status in (502, 503, 504))
        or ("retriable-4xx" in retry_on and status == 409)
    )


class _Handler(LoopbackHandler):
    do_POST = LoopbackHandler.do_GET  # noqa: N815
    do_PUT = LoopbackHandler.do_GET  # noqa: N815
    do_DELETE = LoopbackHandler.do_GET  # noqa: N815
    do_PATCH = LoopbackHandler.do_GET  # noqa: N815


class Gateway(LoopbackService):
    handler = _Handler
    thread_name = "lab-gateway"

    """`Gateway(upstream_url, retries=2, per_try_timeout=..., retry_on=(...))`, on 127.0.0.1."""

    def __init__(
        self,
        upstream_url: str,
        retries: int = 2,
        per_try_timeout: float = 15.0,
        retry_on: Iterable[str] = ("reset", "5xx", "timeout"),
        *,
        backoff_base: float = 0.025,
        seed: int | None = None,
    ) -> None:
        upstream = urlsplit(upstream_url)
        if upstream.scheme != "http" or not upstream.hostname:
            raise ValueError(f"upstream must be an http:// URL, got {upstream_url!r}")
        self.upstream_host = upstream.hostname
        self.upstream_port = upstream.port or 80
        self.retries = retries
        self.per_try_timeout = per_try_timeout
        self.retry_on = frozenset(retry_on)
        self.backoff_base = backoff_base
        self.attempts: list[GatewayAttempt] = []
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def backoff(self, retry: int) -> float:
        """Envoy's fully jittered backoff before retry number `retry` (1-based), capped at 10x."""
        ceiling = min(self.backoff_base * (2**retry - 1), 10 * self.backoff_base)
        with self._lock:
            return self._random.uniform(0, ceiling)

    def answer(self, handler: _Handler) -> None:  # type: ignore[override]
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = [
            (k, v)
            for k, v in handler.headers.items()
            if k.lower() not in HOP_BY_HOP and k.lower() != "x-envoy-attempt-count"
        ]
        response: _Upstream | None = None
        outcome = "reset"
        for attempt in range(1, self.retries + 2):
            if attempt > 1:
                time.sleep(self.backoff(attempt - 1))
            started = time.time()
            response, outcome = self._attempt(handler.command, handler.path, headers, body, attempt)
            with self._lock:
                self.attempts.append(GatewayAttempt(started, handler.path, attempt, outcome))
            if not _retryable(outcome, self.retry_on):
                break
        if response is None:  # Envoy's own local replies
            if outcome == "timeout":
                response = _Upstream(504, "Gateway Timeout", [], b"upstream request timeout")
            else:
                response = _Upstream(
                    503,
                    "Service Unavailable",
                    [],
                    b"upstream connect error or disconnect/reset before headers. "
                    b"reset reason: connection termination",
                )
            response.headers.append(("content-type", "text/plain"))
        self._reply(handler, response)

    def _attempt(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes, attempt: int
    ) -> tuple[_Upstream | None, str]:
        conn = http.client.HTTPConnection(
            self.upstream_host, self.upstream_port, timeout=self.per_try_timeout
        )
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            conn.putheader("x-envoy-attempt-count", str(attempt))
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
            upstream = _Upstream(resp.status, resp.reason, resp.getheaders(), data)
            return upstream, str(resp.status)
        except TimeoutError:
            return None, "timeout"
        except ConnectionRefusedError:
            return None, "connect-failure"
        except (ConnectionError, http.client.HTTPException, OSError):
            return None, "reset"
        finally:
            conn.close()

    @staticmethod
    def _reply(handler: _Handler, response: _Upstream) -> None:
        try:
            handler.send_response(response.status, response.reason)
            for name, value in response.headers:
                if name.lower() not in HOP_BY_HOP and name.lower() not in ("server", "date"):
                    handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(response.body)))
            handler.end_headers()
            handler.wfile.write(response.body)
            handler.wfile.flush()
        except OSError:
            handler.close_connection = True
