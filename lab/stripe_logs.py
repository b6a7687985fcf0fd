"""Write what the lab Stripe server saw in the provider's own export formats.

- events: the body of `GET /v1/events` listing every event (newest first, `has_more: false`);
- logs tail: the JSON lines `stripe logs tail --format JSON` prints. stripe-cli prints the
  payload Stripe sends verbatim; its `EventPayload` struct (pkg/logtailing/tailer.go) names
  `created_at` (unix s), `livemode`, `method`, `request_id`, `status`, `url` (the path) and
  `error{type,charge,code,decline_code,message,param}`. Successful requests carry no `error`.
  No idempotency key: Stripe does not put it in this stream;
- request log: a CSV as a Dashboard export could be mapped to
  (`request_id,created,method,path,idempotency_key,status,body,replayed`, created ISO-8601 UTC ms).

Requests that never reached the API (`logged=False`: reset before the commit) are in none of them.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lab.stripe_server import RequestRecord

ERROR_FIELDS = ("type", "charge", "code", "decline_code", "message", "param")
REQUEST_LOG_COLUMNS = (
    "request_id",
    "created",
    "method",
    "path",
    "idempotency_key",
    "status",
    "body",
    "replayed",
)


def iso_utc_ms(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def events_listing(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": list(reversed(events)),
        "has_more": False,
        "url": "/v1/events",
    }


def write_events(events: Sequence[dict[str, Any]], path: str | Path) -> Path:
    out = Path(path)
    out.write_text(json.dumps(events_listing(events), indent=2) + "\n", encoding="utf-8")
    return out


def logs_tail_line(record: RequestRecord) -> dict[str, Any]:
    line: dict[str, Any] = {
        "created_at": int(record.created),
        "livemode": False,
        "method": record.method,
        "request_id": record.request_id,
        "status": record.status,
        "url": record.path,
    }
    if record.error:
        line["error"] = {name: str(record.error.get(name) or "") for name in ERROR_FIELDS}
    return line


def _logged(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.logged]


def write_logs_tail(records: Iterable[RequestRecord], path: str | Path) -> Path:
    out = Path(path)
    with out.open("w", encoding="utf-8") as fh:
        for record in _logged(records):
            fh.write(json.dumps(logs_tail_line(record), separators=(",", ":")) + "\n")
    return out


def write_request_log(records: Iterable[RequestRecord], path: str | Path) -> Path:
    out = Path(path)
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(REQUEST_LOG_COLUMNS)
        for r in _logged(records):
            writer.writerow(
                [
                    r.request_id,
                    iso_utc_ms(r.created),
                    r.method,
                    r.path,
                    r.idempotency_key or "",
                    r.status,
                    r.body,
                    "true" if r.replayed else "false",
                ]
            )
    return out
