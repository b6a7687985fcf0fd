"""The Arrow schema of an OTLP JSON line as the SDK's and the Collector's exporters write it.

Only the fields the columnar reader can read exactly as the general way does are declared with
their types; a line with any other field is refused by pyarrow (`unexpected_field_behavior`
"error"), and the file goes the general way.
"""

from __future__ import annotations

import pyarrow as pa

# captured headers: an array of strings
ARRAY = pa.struct([("values", pa.list_(pa.struct([("stringValue", pa.string())])))])
VALUE = pa.struct([("stringValue", pa.string()), ("intValue", pa.string()), ("arrayValue", ARRAY)])
ATTRIBUTES = pa.list_(pa.struct([("key", pa.string()), ("value", VALUE)]))
# an event's attributes: every scalar type the SDK writes, and arrays of them (a kvlistValue,
# which the SDK does not write on a span's events, is refused)
SCALAR = [("stringValue", pa.string()), ("intValue", pa.string()), ("boolValue", pa.bool_()),
          ("doubleValue", pa.float64()), ("bytesValue", pa.string())]
EVENT_VALUE = pa.struct([*SCALAR, ("arrayValue", pa.struct([("values", pa.list_(
    pa.struct(SCALAR)))]))])
EVENT = pa.struct([
    ("name", pa.string()), ("timeUnixNano", pa.string()),
    ("attributes", pa.list_(pa.struct([("key", pa.string()), ("value", EVENT_VALUE)]))),
    ("droppedAttributesCount", pa.int64()),
])
# a link to another span (a queue consumer's to its producer): read past, as the general way
# does, its attributes of any scalar type
LINK = pa.struct([
    ("traceId", pa.string()), ("spanId", pa.string()), ("traceState", pa.string()),
    ("flags", pa.int64()),
    ("attributes", pa.list_(pa.struct([("key", pa.string()), ("value", EVENT_VALUE)]))),
    ("droppedAttributesCount", pa.int64()),
])
STATUS = pa.struct([("code", pa.int64()), ("message", pa.string())])
SPAN = pa.struct([
    ("traceId", pa.string()), ("spanId", pa.string()), ("parentSpanId", pa.string()),
    ("name", pa.string()), ("kind", pa.int64()),
    ("startTimeUnixNano", pa.string()), ("endTimeUnixNano", pa.string()),
    ("status", STATUS), ("attributes", ATTRIBUTES), ("events", pa.list_(EVENT)),
    # read past, as the general way does
    ("flags", pa.int64()), ("traceState", pa.string()), ("links", pa.list_(LINK)),
    ("droppedAttributesCount", pa.int64()), ("droppedEventsCount", pa.int64()),
    ("droppedLinksCount", pa.int64()),
])
SCOPE = pa.struct([("name", pa.string()), ("version", pa.string())])
SCOPE_SPANS = pa.struct([("scope", SCOPE), ("schemaUrl", pa.string()),
                         ("spans", pa.list_(SPAN))])
RESOURCE_SPANS = pa.struct([("resource", pa.struct([("attributes", ATTRIBUTES),
                                                     ("droppedAttributesCount", pa.int64())])),
                            ("schemaUrl", pa.string()),
                            ("scopeSpans", pa.list_(SCOPE_SPANS))])
LINE = pa.schema([("resourceSpans", pa.list_(RESOURCE_SPANS))])
