"""A local LangSmith-compatible server for tests: it keeps what the real `langsmith` SDK sends
(`POST /runs/multipart`, `/runs/batch`, `/runs`, `PATCH /runs/{id}`) and answers the read API
twice asks from those runs (`GET /sessions?name=`, `POST /runs/query`), as LangSmith does:
runs of a project (`session`), of a trace (`trace`), started at or after `start_time`, with a
thread's `metadata_key`/`metadata_value` filter, in pages of `limit` with `cursors.next`.

Requests without the expected `x-api-key` are answered 401. Every request's path and headers are
kept (`seen`), so a test can check what twice sent.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

_THREAD_FILTER = re.compile(r'eq\(metadata_key, "([^"]*)"\), eq\(metadata_value, "([^"]*)"\)')


def _at(value: Any) -> datetime:
    at = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=UTC)


class Store:
    """The runs as posted and patched, by id, and each request seen."""

    def __init__(self, key: str, page: int) -> None:
        self.key = key
        self.page = page
        self.runs: dict[str, dict[str, Any]] = {}
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.lock = threading.Lock()

    def post(self, run: dict[str, Any]) -> None:
        with self.lock:
            self.runs.setdefault(str(run["id"]), {}).update(run)

    def patch(self, run_id: str, fields: dict[str, Any]) -> None:
        with self.lock:
            self.runs.setdefault(run_id, {"id": run_id}).update(fields)

    def project_id(self, name: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"langsmith-project:{name}"))

    def projects(self) -> set[str]:
        return {str(r.get("session_name")) for r in self.runs.values() if r.get("session_name")}

    def query(self, body: dict[str, Any]) -> dict[str, Any]:
        sessions = set(body.get("session") or [])
        wanted = _THREAD_FILTER.findall(str(body.get("filter") or ""))
        since = _at(body["start_time"]) if body.get("start_time") else None
        out = []
        for run in sorted(self.runs.values(), key=lambda r: _at(r["start_time"]), reverse=True):
            if self.project_id(str(run.get("session_name"))) not in sessions:
                continue
            if body.get("trace") and str(run.get("trace_id")) != str(body["trace"]):
                continue
            if since is not None and _at(run["start_time"]) < since:
                continue
            metadata = (run.get("extra") or {}).get("metadata") or {}
            if any(str(metadata.get(k)) != v for k, v in wanted):
                continue
            answer = {k: v for k, v in run.items() if k != "session_name"}
            answer["session_id"] = self.project_id(str(run.get("session_name")))
            out.append(answer)
        size = min(int(body.get("limit") or self.page), self.page)
        start = int(body.get("cursor") or 0)
        more = start + size < len(out)
        return {"runs": out[start:start + size],
                "cursors": {"next": str(start + size) if more else None}}


def _multipart(store: Store, content_type: str, body: bytes) -> None:
    """The SDK's multipart form: `post.<id>` / `patch.<id>` parts with the run's fields, and
    `post.<id>.inputs|outputs|extra|events` parts with one field each."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    posts: dict[str, dict[str, Any]] = {}
    patches: dict[str, dict[str, Any]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition") or ""
        payload = part.get_payload(decode=True) or b""
        op, _, rest = str(name).partition(".")
        run_id, _, field = rest.partition(".")
        if op not in ("post", "patch") or not run_id:
            continue
        into = (posts if op == "post" else patches).setdefault(run_id, {"id": run_id})
        value = json.loads(payload)
        if field:
            into[field] = value
        else:
            into.update(value)
    for run in posts.values():
        store.post(run)
    for run_id, fields in patches.items():
        store.patch(run_id, fields)


class _Handler(BaseHTTPRequestHandler):
    store: Store

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self, method: str) -> None:
        body = self._body() if method in ("POST", "PATCH") else b""
        url = urlsplit(self.path)
        self.store.seen.append((method, self.path, dict(self.headers.items()), body))
        path = url.path.removeprefix("/api/v1")
        if path == "/info":
            return self._answer(200, {"version": "0.0.0-local"})
        if self.headers.get("x-api-key") != self.store.key:
            return self._answer(401, {"detail": "Invalid token"})
        if method == "POST" and path == "/runs/multipart":
            _multipart(self.store, self.headers["Content-Type"], body)
            return self._answer(202, {})
        if method == "POST" and path == "/runs/batch":
            doc = json.loads(body)
            for run in doc.get("post") or []:
                self.store.post(run)
            for run in doc.get("patch") or []:
                self.store.patch(str(run["id"]), run)
            return self._answer(202, {})
        if method == "POST" and path == "/runs":
            self.store.post(json.loads(body))
            return self._answer(202, {})
        if method == "PATCH" and path.startswith("/runs/"):
            self.store.patch(path.removeprefix("/runs/"), json.loads(body))
            return self._answer(202, {})
        if method == "GET" and path == "/sessions":
            name = parse_qs(url.query).get("name", [""])[0]
            found = [{"id": self.store.project_id(name), "name": name}] \
                if name in self.store.projects() else []
            return self._answer(200, found)
        if method == "POST" and path == "/runs/query":
            return self._answer(200, self.store.query(json.loads(body)))
        return self._answer(404, {"detail": "Not Found"})

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._handle("PATCH")


@contextmanager
def langsmith_server(key: str, page: int = 100) -> Iterator[tuple[str, Store]]:
    """(its URL, its store), serving on a free loopback port until the block ends."""
    store = Store(key, page)
    handler = type("Handler", (_Handler,), {"store": store})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", store
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
