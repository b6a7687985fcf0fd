"""SQS connector: logged SQS receives into `queue_receive` rows.

Input: JSON lines (or one JSON document) of what a consumer got from SQS, each line being
- a whole boto3 `receive_message(..., MessageSystemAttributeNames=["All"])` response
  (`{"Messages": [...], "ResponseMetadata": {...}}`; an empty receive has no `Messages`),
- one Message dict (`MessageId`, `ReceiptHandle`, `Body`, `Attributes`, `MessageAttributes`),
- a consumer's wrapper `{"received_at": ISO text or epoch ms, "message": {...}}` (optional
  `"worker"`/`"host"` for who received it), whose `message` may also be a whole response,
- an AWS Lambda SQS event (`{"Records": [{"messageId", "body", "attributes", ...}]}`).

When was it received? A Message does not say when *this* receive happened, only
`ApproximateFirstReceiveTimestamp` (the first receive) and `SentTimestamp`, both epoch ms on
SQS's clock. So `at` is, in this order:
1. the wrapper's `received_at` (the consumer's clock; naive ISO text is taken as UTC, a number
   below 1e11 as seconds, otherwise as milliseconds);
2. `ApproximateFirstReceiveTimestamp` when `ApproximateReceiveCount` is 1 (this receive is the
   first one);
3. the response's HTTP `Date` header when the whole response was logged (SQS's clock, 1 s);
4. otherwise a LOWER BOUND: the first receive time, else the send time. Such rows say so in
   `detail`, and one warning counts them: a gap measured from them is too short.
`delivery_count` is `ApproximateReceiveCount` (1 = first delivery). `thread_id` comes from the
body JSON (`thread_id`, `threadId`, `configurable.thread_id`, `config.configurable.thread_id`;
an SNS envelope's `Message` is opened first) or from a `thread_id` message attribute.
`trace_id` comes from `AWSTraceHeader` (X-Ray `Root=1-xxxxxxxx-yyyy...`) or a `traceparent`
message attribute, so a receive can be matched with the spans of the run it started.
"""

from __future__ import annotations

import math
import re
from datetime import UTC
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import orjson
import pandas as pd

from twice.connectors._parsing import EARLIEST, LATEST, Skip, as_int, short
from twice.connectors.base import LoadResult, SourceError, SourceWarning, Warnings, fits_int64
from twice.connectors.jsonfile import MAX_BAD_LEAD, json_documents, loads
from twice.timeline import Kind, make_timeline

name = "sqs"

_MAX_MS = int(LATEST.timestamp()) * 1000  # a later SQS timestamp is garbage (LATEST)
# A receive count past 32 bits is no real count (Pub/Sub's delivery_attempt and Service Bus'
# delivery count are 32-bit; an SQS redrive policy moves a message on after at most 1000
# receives); it is left empty with a warning naming the record, as is a count below 1.
MAX_RECEIVE_COUNT = 2**31 - 1
_THREAD_PATHS = (("thread_id",), ("threadId",), ("configurable", "thread_id"),
                 ("config", "configurable", "thread_id"))
_XRAY_ROOT = re.compile(r"Root=1-([0-9a-fA-F]{8})-([0-9a-fA-F]{24})")
_NUMBER = re.compile(r"\d+(\.\d+)?")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def _field(obj: dict[str, Any], key: str) -> Any:
    """`MessageId` or Lambda's `messageId`."""
    return obj[key] if key in obj else obj.get(key[0].lower() + key[1:])


def _epoch_ms(value: Any) -> pd.Timestamp | None:
    ms = as_int(value)
    if ms is None or not 0 < ms <= _MAX_MS:
        return None
    return pd.Timestamp(ms, unit="ms", tz="UTC")


def _received_at(value: Any) -> pd.Timestamp:
    """The consumer's receive time: ISO text (naive = UTC) or epoch ms (below 1e11: seconds)."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float
            number = math.inf
        if not math.isfinite(number) or number <= 0:
            raise Skip(f"received_at {short(repr(value), 60)} is not a time")
        stamp = _epoch_ms(int(number * 1000 if number < 1e11 else number))
        if stamp is None:
            raise Skip(f"received_at {short(repr(value), 60)} is out of range")
        return stamp
    if not isinstance(value, str):
        raise Skip(f"received_at {short(repr(value), 60)} is not a time")
    try:
        stamp = pd.Timestamp(value)
        stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    except (ValueError, OverflowError):  # OutOfBoundsDatetime is a ValueError
        raise Skip(f"received_at {short(repr(value), 60)} is not a time") from None
    if pd.isna(stamp):
        raise Skip(f"received_at {short(repr(value), 60)} is not a time")
    if not EARLIEST <= stamp <= LATEST:
        raise Skip(f"received_at {short(repr(value), 60)} is outside 2000-2100")
    return stamp


def _date_header(response: dict[str, Any]) -> pd.Timestamp | None:
    meta = response.get("ResponseMetadata")
    headers = meta.get("HTTPHeaders") if isinstance(meta, dict) else None
    date = headers.get("date") if isinstance(headers, dict) else None
    if not isinstance(date, str):
        return None
    try:
        stamp = pd.Timestamp(parsedate_to_datetime(date).astimezone(UTC))
    except (TypeError, ValueError, OverflowError):
        return None
    return stamp if EARLIEST <= stamp <= LATEST else None


def _body_thread_id(body: Any) -> str | None:
    if not isinstance(body, str):
        return None
    try:
        doc = loads(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(doc, dict) and doc.get("Type") == "Notification" and isinstance(
            doc.get("Message"), str):
        return _body_thread_id(doc["Message"])  # SNS -> SQS fan-out envelope
    for path in _THREAD_PATHS:
        node: Any = doc
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, str | int) and not isinstance(node, bool) and str(node):
            return str(node)
    return None


def _attribute_text(attributes: Any, key: str) -> str | None:
    value = attributes.get(key) if isinstance(attributes, dict) else None
    text = _field(value, "StringValue") if isinstance(value, dict) else None
    return text if isinstance(text, str) and text else None


def _trace_id(system: dict[str, Any], message_attributes: Any) -> str | None:
    header = system.get("AWSTraceHeader")
    if isinstance(header, str) and (m := _XRAY_ROOT.search(header)):
        return (m[1] + m[2]).lower()
    parent = _attribute_text(message_attributes, "traceparent")
    if parent and (m := _TRACEPARENT.match(parent.strip())):
        return m[1]
    return None


def _row(
    message: dict[str, Any], origin: str, received_at: Any, response_date: pd.Timestamp | None,
    worker: str | None, queue: str | None, warnings: list[SourceWarning],
) -> dict[str, Any]:
    message_id = _field(message, "MessageId")
    if not isinstance(message_id, str) or not message_id:
        raise Skip("message has no MessageId")
    system = _field(message, "Attributes")
    system = system if isinstance(system, dict) else {}
    count = as_int(system.get("ApproximateReceiveCount"))
    if count is not None and not 1 <= count <= MAX_RECEIVE_COUNT:
        what = "beyond 64-bit integers" if not fits_int64(count) else "not a receive count"
        warnings.append(SourceWarning(origin, f"ApproximateReceiveCount "
                                      f"{short(repr(count), 60)} is {what}; left empty"))
        count = None
    first = _epoch_ms(system.get("ApproximateFirstReceiveTimestamp"))
    sent = _epoch_ms(system.get("SentTimestamp"))
    detail = None
    logged = None
    if received_at is not None:
        try:
            logged = _received_at(received_at)
        except Skip as reason:
            warnings.append(SourceWarning(origin, f"{reason}; used SQS's own timestamps"))
    if logged is not None:
        at = logged
    elif count == 1 and first is not None:
        at = first
    elif response_date is not None:
        at = response_date
        detail = "receive time from the response's Date header (1 s resolution)"
    elif first is not None:
        at = first
        detail = "receive time not logged: `at` is the first receive time, a lower bound"
    elif sent is not None:
        at = sent
        detail = "receive time not logged: `at` is the send time, a lower bound"
    else:
        raise Skip("no receive time (log received_at, or receive with "
                    "MessageSystemAttributeNames=['All'])")
    attributes = _field(message, "MessageAttributes")
    thread_id = _body_thread_id(_field(message, "Body")) or _attribute_text(attributes, "thread_id")
    return {
        "source": name, "origin": origin, "kind": Kind.QUEUE_RECEIVE.value, "at": at,
        "delivery_count": count, "message_id": message_id, "thread_id": thread_id,
        "trace_id": _trace_id(system, attributes), "worker": worker, "name": queue,
        "detail": detail,
    }


def _queue_name(value: Any) -> str | None:
    """Queue name from a queue URL or ARN."""
    if not isinstance(value, str) or not value:
        return None
    return re.split(r"[/:]", value.rstrip("/"))[-1] or None


def _rows_of(doc: Any, locator: str, warnings: list[SourceWarning]) -> list[dict[str, Any]] | None:
    """Rows of one JSON document; None when it is not an SQS record at all."""
    if not isinstance(doc, dict):
        return None
    received_at, worker, queue = None, None, _queue_name(doc.get("queue"))
    if isinstance(doc.get("message"), dict):
        received_at = doc.get("received_at")
        worker = doc.get("worker") or doc.get("host")
        worker = worker if isinstance(worker, str) else None
        doc = doc["message"]
    response_date = _date_header(doc)
    messages: list[Any]
    if isinstance(doc.get("Messages"), list):
        messages = doc["Messages"]
    elif isinstance(doc.get("Records"), list):  # a Lambda SQS event
        messages = []
        for i, record in enumerate(doc["Records"]):
            if isinstance(record, dict) and record.get("eventSource") == "aws:sqs":
                messages.append(record)
            else:
                warnings.append(SourceWarning(f"{locator} Records[{i}]",
                                              "not an SQS record (eventSource aws:sqs); skipped"))
    elif any(k in doc for k in ("MessageId", "messageId", "ReceiptHandle", "receiptHandle")):
        messages = [doc]
    elif "Messages" in doc or "Records" in doc:
        warnings.append(SourceWarning(locator, "`Messages` / `Records` is not a list; skipped"))
        return []
    elif "ResponseMetadata" in doc:
        return []  # an empty receive: boto3 leaves out `Messages`
    else:
        return None
    rows = []
    for i, message in enumerate(messages):
        where = locator if len(messages) == 1 else f"{locator} Messages[{i}]"
        try:
            if not isinstance(message, dict):
                raise Skip("not a message object")
            queue_here = _queue_name(message.get("eventSourceARN")) or queue
            rows.append(_row(message, locator, received_at, response_date, worker, queue_here,
                             warnings))
        except Skip as reason:
            warnings.append(SourceWarning(where, f"{reason}; skipped"))
    return rows


def _flatten(documents: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A document that is a JSON array (of messages or responses) counts item by item."""
    out: list[tuple[str, Any]] = []
    for locator, doc in documents:
        if isinstance(doc, list):
            out.extend((f"{locator}[{i}]", item) for i, item in enumerate(doc))
        else:
            out.append((locator, doc))
    return out


def parse_sqs(
    documents: list[tuple[str, Any]], origin: str, warnings: list[SourceWarning] | None = None
) -> LoadResult:
    """Timeline rows from already-parsed JSON documents, each with its locator ("file:line")."""
    warnings = Warnings() if warnings is None else warnings
    rows: list[dict[str, Any]] = []
    recognised = skipped = 0
    for locator, doc in _flatten(documents):
        found = _rows_of(doc, locator, warnings)
        if found is None:
            warnings.append(SourceWarning(locator, "not an SQS message or receive; skipped"))
            skipped += 1
            if not recognised and skipped >= MAX_BAD_LEAD:  # junk: do not read it all
                raise SourceError(origin, f"no SQS messages in the first {skipped:,} records")
            continue
        recognised += 1
        rows.extend(found)
    if documents and not recognised:
        raise SourceError(origin, "no SQS messages found")
    bounded = sum(1 for r in rows if r["detail"] and "lower bound" in r["detail"])
    if bounded:
        warnings.append(SourceWarning(
            origin, f"{bounded} receive(s) carry no receive time; their `at` is a lower bound "
                    "(log received_at with each message, or the whole response)"))
    return LoadResult(source=name, rows=make_timeline(rows), warnings=warnings)


def load(target: str | Path) -> LoadResult:
    warnings: list[SourceWarning] = Warnings()
    documents = list(json_documents(target, warnings))
    return parse_sqs(documents, str(target), warnings)


def sniff(path: Path, head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return text.startswith((b"{", b"[")) and (
        b'"ReceiptHandle"' in head or b'"aws:sqs"' in head
        or (b'"MessageId"' in head and b'"ApproximateReceiveCount"' in head)
    )
