"""Write what the lab Stripe server saw in the provider's own export formats.

- events: the body of `GET /v1/events` listing every event (newest `created` first, events of one
  second in reverse emission order, `has_more: false`), whatever order they were emitted in: a
  lab run may move its virtual clock backwards between runs;
- logs tail: the JSON lines `stripe logs tail --format JSON` prints. stripe-cli prints the
  payload Stripe sends verbatim; its `EventPayload` struct (pkg/logtailing/tailer.go) names
  `created_at` (unix s), `livemode`, `method`, `request_id`, `status`, `url` (the path) and
  `error{type,charge,code,decline_code,message,param}`. Successful requests carry no `error`.
  No idempotency key: Stripe does not put it in this stream;
- request log: a CSV as a Dashboard export could be mapped to
  (`request_id,created,method,path,idempotency_key,status,body,replayed`, created ISO-8601 UTC, in
  ms, or in whole seconds with `precision="s"`, as the Dashboard shows them).

Requests are written in `created` order (stable), not in the order the server saw them.
Requests that never reached the API (`logged=False`: reset before the commit) are in none of them.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from twice.formats import iso
from twice.lab.stripe_wire import newest_first

if TYPE_CHECKING:
    from twice.lab.stripe_server import RequestRecord

Precision = Literal["ms", "s"]

ERROR_FIELDS = ("type", "charge", "code", "decline_code", "message", "param")
REQUEST_LOG_COLUMNS = ("request_id", "created", "method", "path", "idempotency_key", "status",
                       "body", "replayed")


def iso_utc_ms(ts: float) -> str:
    return iso(ts, "milliseconds")


def iso_utc_s(ts: float) -> str:
    """Whole seconds, truncated as a display truncates them (12:00:00.999 shows 12:00:00)."""
    return iso(math.floor(ts))


def events_listing(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """`events` (in emission order) as `GET /v1/events` lists them."""
    return {
        "object": "list",
        "data": newest_first(events),
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
    """The requests that reached the API, oldest `created` first (ties keep the server's order)."""
    return sorted((r for r in records if r.logged), key=lambda r: r.created)


def write_logs_tail(records: Iterable[RequestRecord], path: str | Path) -> Path:
    out = Path(path)
    with out.open("w", encoding="utf-8") as fh:
        for record in _logged(records):
            fh.write(json.dumps(logs_tail_line(record), separators=(",", ":")) + "\n")
    return out


def write_request_log(
    records: Iterable[RequestRecord], path: str | Path, precision: Precision = "ms"
) -> Path:
    if precision not in ("ms", "s"):
        raise ValueError(f"precision must be 'ms' or 's', not {precision!r}")
    stamp = iso_utc_ms if precision == "ms" else iso_utc_s
    out = Path(path)
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(REQUEST_LOG_COLUMNS)
        for r in _logged(records):
            writer.writerow(
                [
                    r.request_id,
                    stamp(r.created),
                    r.method,
                    r.path,
                    r.idempotency_key or "",
                    r.status,
                    r.body,
                    "true" if r.replayed else "false",
                ]
            )
    return out
