"""What `eoctl sources scan` says of an input, per partition, written once: counts, offsets,
records in flight and protocol coverage, over the records as read (eoctl.expr.records' protocol
table: the headers' raw bytes) and the consumer's committed offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ibis import _

if TYPE_CHECKING:
    import ibis.expr.types as ir


def partition_stats(protocol: ir.Table, commits: ir.Table) -> ir.Table:
    j = protocol.left_join(commits, [protocol.endpoint == commits.c_endpoint, protocol.topic == commits.c_topic,
                                     protocol.partition == commits.c_partition])
    return j.group_by(["topic", "partition"]).aggregate(
        records=_.count(), first_offset=j.offset.min(), last_offset=j.offset.max(),
        # counts, not sums of ones: DuckDB sums integers into 128 bits
        in_flight=j.offset.count(where=j.committed.isnull() | (j.offset >= j.committed)),
        with_protocol_headers=j.offset.count(where=j.message_id.notnull() & j.token_id.notnull()),
        distinct_message_ids=j.message_id.nunique()).order_by(["topic", "partition"])
