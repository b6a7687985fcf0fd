"""`stripe logs tail --format JSON` captures as provider_request rows.

What the CLI prints (stripe-cli `pkg/cmd/logs/tail.go`, `pkg/logtailing/tailer.go`): with
`--format JSON` every request log is printed with `fmt.Println` as the payload string the server
sent, one JSON object a line. The CLI decodes it into
`EventPayload{created_at int, livemode bool, method, request_id string, status int, url string,
error {type, charge, code, decline_code, message, param}}`; fields the server sends beyond those
are printed too and ignored here. The payload is wrapped in ANSI colour codes when stdout is a
terminal (`ansi.ColorizeJSON`), so a capture copied from a terminal holds escape sequences, and
status lines ("Getting ready...", "Ready! ...") go to the same terminal. There is no idempotency
key in this format: the column stays null (unknown), it is never invented.

Limits (`twice.connectors.jsonfile`): captures up to 1 GiB; a line over 256 MiB is skipped with a
warning; a capture whose first 1000 lines are not JSON is one SourceError. A status outside
100-599 is left empty with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from twice.connectors._parsing import Skip, short, text_or_none, unix_seconds
from twice.connectors.base import LoadResult, SourceError, SourceWarning, Warnings, redact
from twice.connectors.jsonfile import (
    MAX_BAD_LEAD,
    MAX_DOCUMENT_BYTES,
    MAX_LINE_BYTES,
    lines,
    loads,
    open_bytes,
)
from twice.timeline import Kind, make_timeline

name = "stripe_logs"

_ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# Status lines the CLI writes to the terminal around the JSON lines.
_CLI_CHATTER = (
    b"Getting ready",
    b"Ready!",
    b"> Ready!",
    b"Session expired",
    b"A newer version of the Stripe CLI",
    b"^C",  # the terminal echoing Ctrl+C
    b"Warning ",  # the CLI's own notices (e.g. about --filter-account), printed to stdout
)
_ERROR_FIELDS = ("type", "code", "decline_code")


def _status(value: Any, origin: str, warnings: list[SourceWarning]) -> int | None:
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() \
            and len(value.strip()) <= 3:
        number = int(value)
    if number == 0:
        return None  # Go's zero value: the server sent none
    if number is not None and 100 <= number <= 599:
        return number
    if value is not None:
        warnings.append(SourceWarning(
            origin, f"status {short(repr(value), 40)} is not an HTTP status; left empty"))
    return None


def _detail(error: Any) -> str | None:
    """`card_error/card_declined/insufficient_funds: Your card ... (param: x)`."""
    if not isinstance(error, Mapping):
        return None
    codes = "/".join(t for t in (text_or_none(error.get(f)) for f in _ERROR_FIELDS) if t)
    message = text_or_none(error.get("message"))
    param = text_or_none(error.get("param"))
    text = ": ".join(t for t in (codes, message) if t)
    if param:
        text = f"{text} (param: {param})" if text else f"param: {param}"
    return short(text)


def log_row(payload: Any, origin: str, warnings: list[SourceWarning]) -> dict[str, Any]:
    """One request-log payload -> one provider_request row. Raises Skip when unusable."""
    if not isinstance(payload, Mapping):
        raise Skip(f"expected a JSON object, got {type(payload).__name__}")
    if "created_at" not in payload:
        raise Skip("no `created_at`")
    at = unix_seconds(payload.get("created_at"))
    status = _status(payload.get("status"), origin, warnings)
    url = text_or_none(payload.get("url"))
    method = text_or_none(payload.get("method"))
    error = payload.get("error")
    charge = text_or_none(error.get("charge")) if isinstance(error, Mapping) else None
    outcome = None if status is None else ("ok" if 200 <= status < 300 else "error")
    return {
        "at": at,
        "source": name,
        "origin": origin,
        "kind": Kind.PROVIDER_REQUEST.value,
        "initiator": "api",
        "key_recorded": 0,  # Stripe does not put the key in this stream
        "livemode": int(payload["livemode"]) if isinstance(payload.get("livemode"), bool)
        else None,
        "request_id": text_or_none(payload.get("request_id")),
        "method": method.upper() if method else None,
        # the query string can carry customer data; the path is what identifies the call
        "path": (urlsplit(url).path or None) if url else None,
        "status": status,
        "outcome": outcome,
        "detail": _detail(error),
        "object_id": charge,
        "object_type": "charge" if charge else None,
    }


def parse_lines(lines: Iterable[tuple[str, bytes | None]], origin: str) -> LoadResult:
    """(locator, raw line) pairs of a capture -> provider_request rows and warnings (a line
    of None: too long to read, a warning).

    Raises SourceError when no line is a request-log JSON object.
    """
    warnings: list[SourceWarning] = Warnings()
    rows: list[dict[str, Any]] = []
    modes: dict[bool, int] = {}
    seen_json = 0
    for locator, raw in lines:
        if raw is None:
            warnings.append(SourceWarning(
                locator, f"line longer than {MAX_LINE_BYTES // 2**20} MiB; skipped"))
            continue
        line = _ANSI.sub(b"", raw).strip()
        if not line or line.startswith(_CLI_CHATTER):
            continue
        try:
            payload = loads(line)
        except orjson.JSONDecodeError as exc:
            warnings.append(SourceWarning(locator, f"not valid JSON ({exc}); skipped"))
            if seen_json == 0 and len(warnings) >= MAX_BAD_LEAD:
                raise SourceError(origin, "not `stripe logs tail --format JSON` output (the "
                                          f"first {len(warnings)} lines are not JSON)") from None
            continue
        seen_json += 1
        try:
            row = log_row(payload, locator, warnings)
        except Skip as exc:
            warnings.append(SourceWarning(locator, f"{exc}; skipped"))
            continue
        if row["request_id"] is None:
            warnings.append(SourceWarning(locator, "no `request_id`; kept without one"))
        live = payload.get("livemode")
        if isinstance(live, bool):
            modes[live] = modes.get(live, 0) + 1
        rows.append(row)
    if seen_json == 0 and warnings:
        raise SourceError(origin, "not `stripe logs tail --format JSON` output (no JSON lines)")
    if len(modes) == 2:
        warnings.append(SourceWarning(
            origin, f"capture mixes live-mode ({modes[True]}) and test-mode ({modes[False]}) "
            "requests; kept all"))
    return LoadResult(source=name, rows=make_timeline(rows), warnings=warnings)


def parse_capture(raw: bytes, origin: str) -> LoadResult:
    """A whole capture (bytes as the CLI printed them) -> rows; a JSON array is accepted too."""
    if not raw.strip():
        raise SourceError(origin, "file is empty")
    whole = None
    if _ANSI.sub(b"", raw[:256]).lstrip()[:1] == b"[" and len(raw) <= MAX_DOCUMENT_BYTES:
        try:
            whole = loads(_ANSI.sub(b"", raw))
        except orjson.JSONDecodeError:
            pass
    if isinstance(whole, list):  # someone saved the lines as one array
        return parse_lines(
            ((f"{origin}[{i}]", orjson.dumps(item)) for i, item in enumerate(whole)), origin)
    return parse_lines(((f"{origin}:{n}", line) for n, line in lines(raw)), origin)


def load(target: str | Path) -> LoadResult:
    path = Path(target)
    return parse_capture(open_bytes(path), redact(str(path)))


def sniff(path: Path, head: bytes) -> bool:
    for raw in head.splitlines()[:20]:
        line = _ANSI.sub(b"", raw).strip()
        if not line.startswith(b"{"):
            continue
        try:
            value = loads(line)
        except orjson.JSONDecodeError:
            continue
        return isinstance(value, dict) and {"request_id", "created_at", "url"} <= value.keys()
    return False
