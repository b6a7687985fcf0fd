"""What one checkpoint blob may cost, measured on its msgpack bytes before anything decodes it.

Decoding makes an object of every msgpack value, 60x the bytes for empty lists and maps, so a
blob is refused past `MAX_BLOB_BYTES` or `MAX_BLOB_CONTAINERS` lists and maps (counted exactly,
in the ext records too, only when its bytes could hold that many).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from twice.connectors.base import SourceWarning

MAX_BLOB_BYTES = 32 * 2**20
MAX_BLOB_CONTAINERS = 1_000_000
_NOT_CONTAINER = bytes(b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF
                                                      or 0xC7 <= b <= 0xC9 or 0xD4 <= b <= 0xD8))


class Decoder(Protocol):
    """What reads a saver's (type, blob) pairs: `decode.BlobDecoder` (LangGraph's serializer)
    or `rawpack.RawBlobs`."""

    warnings: list[SourceWarning]

    def decode(self, type_: str | None, blob: bytes | memoryview | None, where: str) -> Any:
        """The blob's value."""


class Refused:
    """Marker for a blob that was not decoded (pickle, unknown type, corrupt)."""


REFUSED = Refused()

# msgpack's fixed-size values: marker -> bytes after the marker
_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,
          0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_SIZED = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin / str: size of the length
_EXT = {0xC7: 1, 0xC8: 2, 0xC9: 4}
_BIG = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}  # array/map: size, items each


def too_many_containers(blob: bytes, limit: int = MAX_BLOB_CONTAINERS) -> bool:
    """Whether the msgpack `blob` holds more than `limit` arrays and maps, ext payloads
    included. Its bytes are counted first (in C): most blobs cannot hold that many."""
    if len(blob) <= limit or len(blob.translate(None, _NOT_CONTAINER)) <= limit:
        return False
    containers = 0
    spans = [(0, len(blob))]  # (start, end) of msgpack data to walk: the blob, ext payloads
    while spans:
        i, end = spans.pop()
        while i < end:
            b = blob[i]
            i += 1
            if b <= 0x7F or b >= 0xE0:
                continue
            if b <= 0x9F:  # fixmap, fixarray
                containers += 1
            elif b <= 0xBF:  # fixstr
                i += b & 0x1F
            elif b in _FIXED:
                i += _FIXED[b]
            elif b in _SIZED:
                width = _SIZED[b]
                i += width + int.from_bytes(blob[i:i + width], "big")
            elif b in _FIXEXT:
                spans.append((i + 1, min(end, i + 1 + _FIXEXT[b])))
                i += 1 + _FIXEXT[b]
            elif b in _EXT:
                width = _EXT[b]
                size = int.from_bytes(blob[i:i + width], "big")
                spans.append((i + width + 1, min(end, i + width + 1 + size)))
                i += width + 1 + size
            elif b in _BIG:
                containers += 1
                i += _BIG[b][0]
            if containers > limit:
                return True
    return False


def msgpack_array_head(blob: bytes) -> tuple[int, int] | None:
    """(item count, header size) when `blob` is a msgpack array, else None."""
    if not blob:
        return None
    first = blob[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F, 1
    if first == 0xDC and len(blob) >= 3:
        return int.from_bytes(blob[1:3], "big"), 3
    if first == 0xDD and len(blob) >= 5:
        return int.from_bytes(blob[1:5], "big"), 5
    return None


def msgpack_array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def blocked_warnings(source: str, blocked: Iterable[tuple[str, str]]) -> list[SourceWarning]:
    """One warning per class a source's blobs name that LangGraph's allow-list does not hold."""
    return [SourceWarning(source, f"blobs name the type {module}.{name}, which is not on "
                                  "LangGraph's safe allow-list; it was not constructed (its raw "
                                  "fields were kept)")
            for module, name in sorted(blocked)]


def decode_grown_list(
    decoder: Decoder, previous: tuple[bytes, list[Any]] | None, blob: bytes, where: str
) -> tuple[bytes, list[Any]] | None:
    """Decode a msgpack list blob that may extend the previous version's list.

    PostgresSaver stores a message channel's whole list again at every version. msgpack arrays
    are their items' encodings back to back, so when the new blob's items start with the old
    blob's items byte for byte, only the new tail needs decoding. Returns (items bytes, list),
    or None when the blob is not a list extending `previous` (then decode it whole).
    """
    head = msgpack_array_head(blob)
    if head is None or previous is None:
        return None
    count, size = head
    old_body, old_items = previous
    if count < len(old_items) or not blob.startswith(old_body, size):
        return None
    tail = decoder.decode("msgpack", msgpack_array_header(count - len(old_items))
                          + blob[size + len(old_body):], where)
    if not isinstance(tail, list):
        return None
    return blob[size:], old_items + tail
