"""Outbound HTTP for the live sources (trace backends, the Stripe API or a compatible server):
an answer is taken only within bounds, whatever the other side does.

The URL is one the user typed into the web app's form, so the server running twice must not
lend it anything: a redirect is followed only within the URL's own origin (scheme, host and
port: a 302 to an internal host is refused, never fetched), connecting, each read and the whole
exchange have their own time limits (a backend that drips one byte every few seconds cannot
hold the server), and the answer is cut off at a size cap (an endless answer, or one that says
it is huge, costs at most the cap). The whole exchange runs under one deadline in an event loop
of its own, because a blocking client can only bound each read, not the sum of them.

What an answer says is never quoted back beyond `excerpt`: a few dozen characters, redacted and
with control characters shown by name.
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx

from twice.connectors.redaction import redact
from twice.formats import visible

__all__ = ["DEFAULT_LIMITS", "Answer", "HttpRefused", "Limits", "excerpt", "fetch"]

_REDIRECTS = (301, 302, 303, 307, 308)
_EXCERPT = 60  # characters of an answer a message may quote
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    connect_s: float = 5.0
    read_s: float = 10.0  # between two reads
    total_s: float = 60.0  # the whole exchange, redirects included
    max_bytes: int = 32 * 1024 * 1024  # of the answer's body (decoded)
    max_redirects: int = 5  # within the origin


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Answer:
    status: int
    headers: httpx.Headers
    content: bytes = field(repr=False)
    reason: str = ""

    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class HttpRefused(Exception):
    """No answer within the bounds: the reason in words, safe to show (no answer quoted)."""


def excerpt(text: str, secrets: tuple[str, ...] | list[str] = ()) -> str:
    """The start of an answer, safe to quote: redacted (before it is cut: half a password
    would not be recognised), on one line, control and bidi characters by name, short."""
    flat = " ".join(visible(redact(text, secrets)).split())
    return flat if len(flat) <= _EXCERPT else flat[:_EXCERPT] + "…"


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def fetch(method: str, url: str, *, headers: Mapping[str, str] | None = None,
          params: Mapping[str, Any] | None = None, content: bytes | str | None = None,
          auth: tuple[str, str] | None = None, limits: Limits = DEFAULT_LIMITS) -> Answer:
    """One HTTP exchange within `limits`; HttpRefused when it cannot be had within them.
    httpx's own errors (unreachable, refused, TLS) become HttpRefused too."""
    return _run(_fetch(method, url, dict(headers or {}), params, content, auth, limits))


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:  # called from inside an event loop (a notebook)
        return pool.submit(asyncio.run, coro).result()


@functools.cache
def _tls() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CAs, verified), made once: loading the CA bundle
    costs ~50 ms, more than asking a local server for a page of 100 events."""
    return httpx.create_ssl_context()


async def _fetch(method: str, url: str, headers: dict[str, str],
                 params: Mapping[str, Any] | None, content: bytes | str | None,
                 auth: tuple[str, str] | None, limits: Limits) -> Answer:
    timeout = httpx.Timeout(limits.read_s, connect=limits.connect_s)
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False,
                                     verify=_tls()) as client:
            return await asyncio.wait_for(
                _exchange(client, method, url, headers, params, content, auth, limits),
                limits.total_s)
    except (TimeoutError, httpx.TimeoutException):
        raise HttpRefused(f"no complete answer within {limits.total_s:g} s") from None
    except httpx.InvalidURL as exc:
        raise HttpRefused(f"not a URL it can ask ({exc})") from None
    except httpx.HTTPError as exc:
        raise HttpRefused(f"cannot reach it: {_network_reason(exc)}") from None


async def _exchange(client: httpx.AsyncClient, method: str, url: str, headers: dict[str, str],
                    params: Mapping[str, Any] | None, content: bytes | str | None,
                    auth: tuple[str, str] | None, limits: Limits) -> Answer:
    start = origin(url)
    for _hop in range(limits.max_redirects + 1):
        request = client.build_request(method, url, headers=headers, params=params,
                                       content=content)
        response = await client.send(request, auth=auth, stream=True)
        try:
            location = response.headers.get("location")
            if response.status_code in _REDIRECTS and location:
                url = urljoin(str(request.url), location)
                if origin(url) != start:
                    raise HttpRefused(f"answered {response.status_code} with a redirect to "
                                      "another host, which is not followed")
                params = None  # the Location carries its own query
                if response.status_code == 303 or (
                        response.status_code in (301, 302) and method != "GET"):
                    method, content = "GET", None
                continue
            return Answer(response.status_code, response.headers,
                          await _body(response, limits.max_bytes), response.reason_phrase)
        finally:
            await response.aclose()
    raise HttpRefused(f"more than {limits.max_redirects} redirects")


async def _body(response: httpx.Response, cap: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise HttpRefused(f"the answer is larger than {_size(cap)} "
                          f"({_size(int(declared))} announced); not read")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            raise HttpRefused(f"the answer is larger than {_size(cap)}; cut off there")
        chunks.append(chunk)
    return b"".join(chunks)


def _size(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.3g} GiB"
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n} bytes"


def _network_reason(exc: httpx.HTTPError) -> str:
    """What failed, in words: the operating system's reason when there is one."""
    seen: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and len(seen) < 10:
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    for error in seen:
        if isinstance(error, OSError) and (error.errno or error.strerror):
            # asyncio words a refused connection "Connect call failed (host, port)"
            number = error.errno or 0
            words = os.strerror(number) if number > 0 else str(error.strerror)
            return excerpt(words.lower())
    return excerpt(str(exc).lower() or type(exc).__name__)
