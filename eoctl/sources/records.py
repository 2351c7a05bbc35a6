"""The one normalized record schema every topic source returns, and protocol-header extraction.

Live Kafka topics and topic archives both become DataFrames of this shape, so checks never care
where records came from:

    topic string, partition int, offset long, timestamp timestamp,
    key binary, value binary, headers array<struct<key: string, value: binary>>
"""

from __future__ import annotations

RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")

#: normalized protocol columns, in order, and the HeaderNames field each comes from
PROTOCOL_COLUMNS = ("message_id", "token_id", "producer", "sequence", "causation_id", "attempt_id", "blobs")


