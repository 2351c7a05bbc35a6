"""Live Kafka topics: Spark batch reads of offset ranges, and broker metadata through confluent-kafka.

Spark reads the records (executors pull partitions in parallel; nothing is collected to the
driver). confluent-kafka answers the small metadata questions: partitions, watermarks, the last
stable offset and a consumer group's committed offsets.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from eoctl.config.model import KafkaConnection
from eoctl.errors import SourceError

EARLIEST = -2
LATEST = -1

_JAAS_MODULE = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one partition; start may be EARLIEST, end may be LATEST."""

    topic: str
    partition: int
    start: int = EARLIEST
    end: int = LATEST


def client_config(conn: KafkaConnection) -> dict[str, Any]:
    """confluent-kafka (librdkafka) settings for this connection."""
    from eoctl.logs import get as get_logger

    cfg: dict[str, Any] = {
        "bootstrap.servers": conn.bootstrap_servers,
        "security.protocol": conn.security_protocol,
        # librdkafka's own lines (`%3|...|FAIL|...` while a broker is down) go to eoctl's logging,
        # shown with --debug; eoctl reports what failed in its own words
        "logger": get_logger("kafka"),
    }
    if conn.sasl_mechanism:
        cfg["sasl.mechanism"] = conn.sasl_mechanism
        cfg["sasl.username"] = conn.sasl_username
        cfg["sasl.password"] = conn.sasl_password.get_secret_value() if conn.sasl_password else None
    if conn.ssl_ca_location:
        cfg["ssl.ca.location"] = conn.ssl_ca_location
    cfg.update(conn.client_properties)
    return cfg


# ------------------------------------------------------------------------------ metadata


@dataclass(frozen=True)
class PartitionOffsets:
    topic: str
    partition: int
    log_start: int
    high_watermark: int
    last_stable: int


def admin(conn: KafkaConnection):
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(conn))


def topic_partitions(conn: KafkaConnection, topics: list[str]) -> dict[str, list[int]]:
    """Partition numbers of each topic; raises SourceError for a missing topic or broker."""
    from confluent_kafka import KafkaException

    try:
        md = admin(conn).list_topics(timeout=conn.timeout_seconds)
    except KafkaException as exc:
        raise SourceError(f"Kafka at {conn.bootstrap_servers} is not reachable: {exc.args[0].str()}") from None
    out: dict[str, list[int]] = {}
    for topic in topics:
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None:
            raise SourceError(f"topic {topic!r} does not exist on {conn.bootstrap_servers}")
        out[topic] = sorted(meta.partitions)
    return out


def partition_offsets(conn: KafkaConnection, topics: list[str]) -> list[PartitionOffsets]:
    """Log start, high watermark and last stable offset of every partition of `topics`."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    client = admin(conn)
    parts = [TopicPartition(t, p) for t, ps in topic_partitions(conn, topics).items() for p in ps]

    def ask(spec, isolation) -> dict[tuple[str, int], int]:
        futures = client.list_offsets(
            {tp: spec for tp in parts}, isolation_level=isolation, request_timeout=conn.timeout_seconds
        )
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    start = ask(OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED)
    high = ask(OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)
    stable = ask(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
    return [
        PartitionOffsets(t, p, start[(t, p)], high[(t, p)], stable[(t, p)])
        for t, p in sorted(start)
    ]


def committed_offsets(conn: KafkaConnection, group: str, topics: list[str]) -> dict[str, dict[int, int]]:
    """The consumer group's committed offset per partition; partitions without a commit are absent."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from confluent_kafka import KafkaException

    client = admin(conn)
    parts = [TopicPartition(t, p) for t, ps in topic_partitions(conn, topics).items() for p in ps]
    deadline = time.monotonic() + conn.timeout_seconds
    while True:
        futures = client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, parts)], request_timeout=conn.timeout_seconds
        )
        try:
            listed = [tp for future in futures.values() for tp in future.result().topic_partitions]
            break
        except KafkaException as exc:
            # a broker that just started (or moved the group's coordinator) answers "coordinator
            # load in progress" for a few seconds: asked again until the timeout
            if not _coordinator_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)
    out: dict[str, dict[int, int]] = {}
    for tp in listed:
        if tp.error is None and tp.offset >= 0:
            out.setdefault(tp.topic, {})[tp.partition] = tp.offset
    return out


def _coordinator_busy(exc: Exception) -> bool:
    from confluent_kafka import KafkaError

    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error is not None and (error.retriable() or error.code() in (
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR))


def _first_unstable_timestamp(conn: KafkaConnection, topic: str, partition: int, offset: int) -> dt.datetime | None:
    """Timestamp of the record at the last stable offset: the open transaction's first record."""
    from confluent_kafka import Consumer, TopicPartition

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


def hanging_partitions(conn: KafkaConnection, topics: list[str], now: dt.datetime,
                       timeout: dt.timedelta) -> list[tuple]:
    """(topic, partition, last_stable_offset, high_watermark, first_unstable_timestamp (UTC wall
    time), age_seconds) of the partitions of `topics` whose last stable offset has stayed behind the
    high watermark for longer than `timeout`: broker metadata, the same for every engine."""
    rows = []
    for p in partition_offsets(conn, topics):
        if p.last_stable >= p.high_watermark:
            continue
        since = _first_unstable_timestamp(conn, p.topic, p.partition, p.last_stable)
        if since is None:
            continue
        age = now - since
        if age > timeout:
            rows.append((p.topic, p.partition, p.last_stable, p.high_watermark,
                         since.replace(tzinfo=None), int(age.total_seconds())))
    return rows


def time_ranges(conn: KafkaConnection, topics: list[str], since: dt.datetime | None,
                until: dt.datetime | None) -> list[OffsetRange]:
    """Offset ranges of the topics' partitions between two times (None: the log start, the end),
    asked of the broker: a reader then reads only that slice of each partition."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    offsets = {(p.topic, p.partition): p for p in partition_offsets(conn, topics)}
    client = admin(conn)

    def at(when: dt.datetime | None, default: str) -> dict[tuple[str, int], int]:
        if when is None:
            return {k: (p.log_start if default == "start" else LATEST) for k, p in offsets.items()}
        ms = int(when.timestamp() * 1000)
        futures = client.list_offsets({TopicPartition(t, p): OffsetSpec.for_timestamp(ms) for t, p in offsets},
                                      request_timeout=conn.timeout_seconds)
        out = {}
        for tp, f in futures.items():
            found = f.result().offset  # -1: no record at or after that time
            out[(tp.topic, tp.partition)] = found if found >= 0 else offsets[(tp.topic, tp.partition)].high_watermark
        return out

    start, end = at(since, "start"), at(until, "end")
    return [OffsetRange(t, p, start[(t, p)], end[(t, p)]) for t, p in sorted(offsets)
            if end[(t, p)] == LATEST or start[(t, p)] < end[(t, p)]]


@dataclass(frozen=True)
class ProducerState:
    """What the partition leader knows of one active producer (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int  # -1 when the leader does not know it
    transaction_start_offset: int | None  # None: no transaction open on the partition
