"""Kafka transaction check (EO601): broker metadata, not a Spark job."""

from __future__ import annotations

from collections.abc import Iterator

from eoctl.checks import Hit
from eoctl.checks.context import AuditContext
from eoctl.engine.frames import local_frame
from eoctl.sources.kafka import hanging_partitions

_SCHEMA = ("topic string, partition int, last_stable_offset long, high_watermark long, "
           "first_unstable_timestamp timestamp, age_seconds long")


def hanging_transactions(ctx: AuditContext) -> Iterator[Hit]:
    """EO601: a partition whose last stable offset has stayed behind its high watermark for longer
    than the transaction timeout: every read_committed consumer of it is stalled."""
    for name, ep in ctx.endpoints.items():
        if ep.input is None or not ep.input.kafka:
            continue
        rows = hanging_partitions(ctx.config.kafka[ep.input.kafka], ep.input.topics, ctx.options.now,
                                  ctx.options.transaction_timeout)
        yield "EO601", name, ", ".join(ep.input.topics), local_frame(ctx.spark, rows, _SCHEMA)
