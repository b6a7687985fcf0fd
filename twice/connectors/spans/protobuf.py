"""OTLP protobuf span files: an `ExportTraceServiceRequest` as an SDK sends it over OTLP/HTTP
(`application/x-protobuf`; Langfuse's SDK posts it gzipped to `/api/public/otel/v1/traces`),
saved as it was sent, gzipped or not. Several requests appended in one file are one request
(protobuf merges repeated fields), and several gzip members one stream.

Decoding needs `opentelemetry-proto` (the `protobuf` extra); without it a protobuf file is one
clear error naming the extra. The decoded request is protobuf's canonical JSON mapping of it
(`MessageToDict`: camelCase, base64 ids, enum names), which the OTLP JSON reader reads already.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import Any

from twice.connectors.base import SourceError
from twice.connectors.jsonfile import open_bytes
from twice.extras import MissingExtra, missing_module

GZIP_MAGIC = b"\x1f\x8b"
SUFFIXES = (".pb", ".binpb", ".protobuf")  # and each with .gz
MAX_BYTES = 256 * 2**20  # decoded, as for one JSON span document
# what an OTLP resource carries in its first bytes (the SDK's own attributes)
_MARKERS = (b"service.name", b"telemetry.sdk")


def _gunzip_head(head: bytes) -> bytes:
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 4096)
    except zlib.error:
        return b""


def sniff(path: Path, head: bytes) -> bool:
    """An OTLP protobuf request: a protobuf suffix, or a request's first field (1,
    `resource_spans`, length-delimited: 0x0A) followed by a resource's usual attributes."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(SUFFIXES) and head:
        return True
    body = _gunzip_head(head) if head.startswith(GZIP_MAGIC) else head
    return body.startswith(b"\x0a") and any(m in body[:4096] for m in _MARKERS)


def decode(path: str | Path) -> dict[str, Any]:
    """The file's request as OTLP JSON (protobuf's canonical mapping)."""
    name = str(path)
    module = missing_module("protobuf")
    if module is not None:
        raise SourceError(name, str(MissingExtra("protobuf", module, "an OTLP protobuf file")))
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    raw = open_bytes(path, MAX_BYTES)
    if raw.startswith(GZIP_MAGIC):
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
                data = fh.read(MAX_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise SourceError(name, f"not a readable gzip stream ({exc})") from None
        if len(data) > MAX_BYTES:
            raise SourceError(name, f"larger than {MAX_BYTES // 2**20} MiB once unzipped; "
                                    "not read")
        raw = data
    try:
        request = ExportTraceServiceRequest.FromString(raw)
    except DecodeError as exc:
        raise SourceError(name, f"not an OTLP protobuf trace request ({exc})") from None
    doc: dict[str, Any] = MessageToDict(request)
    return doc

