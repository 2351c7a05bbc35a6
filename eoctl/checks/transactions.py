"""Kafka transaction check (EO601): broker metadata, not a Spark job."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from eoctl.checks import Hit
from eoctl.checks.context import AuditContext
from eoctl.engine.frames import local_frame

_SCHEMA = ("topic string, partition int, last_stable_offset long, high_watermark long, "
           "first_unstable_timestamp timestamp, age_seconds long")


def _first_unstable_timestamp(conn, topic: str, partition: int, offset: int) -> dt.datetime | None:
    """Timestamp of the record at the last stable offset: the open transaction's first record."""
    from confluent_kafka import Consumer, TopicPartition

    from eoctl.sources.kafka import client_config

    consumer = Consumer({**client_config(conn), "group.id": "eoctl-audit-probe", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        msg = consumer.poll(conn.timeout_seconds)
        if msg is None or msg.error():
            return None
        return dt.datetime.fromtimestamp(msg.timestamp()[1] / 1000, dt.timezone.utc)
    finally:
        consumer.close()


def hanging_transactions(ctx: AuditContext) -> Iterator[Hit]:
    """EO601: a partition whose last stable offset has stayed behind its high watermark for longer
    than the transaction timeout: every read_committed consumer of it is stalled."""
    from eoctl.sources.kafka import partition_offsets

    for name, ep in ctx.endpoints.items():
        if ep.input is None or not ep.input.kafka:
            continue
        conn = ctx.config.kafka[ep.input.kafka]
        rows = []
        for p in partition_offsets(conn, ep.input.topics):
            if p.last_stable >= p.high_watermark:
                continue
            since = _first_unstable_timestamp(conn, p.topic, p.partition, p.last_stable)
            if since is None:
                continue
            age = ctx.options.now - since
            if age > ctx.options.transaction_timeout:
                rows.append((p.topic, p.partition, p.last_stable, p.high_watermark,
                             since.replace(tzinfo=None), int(age.total_seconds())))
        yield "EO601", name, ", ".join(ep.input.topics), local_frame(ctx.spark, rows, _SCHEMA)
