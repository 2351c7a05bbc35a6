"""Live Kafka through Spark's Kafka reader, against the real KRaft broker."""

from __future__ import annotations

import uuid

import pytest

from eoctl.config.model import HeaderNames, KafkaConnection
from eoctl.sources.kafka import OffsetRange, committed_offsets, partition_offsets
from eoctl.engine.spark.sources import read_topics
from eoctl.engine.spark.sources import record_schema, with_protocol_columns
from tests.helpers.kafka_data import commit_group_offsets, produce

pytestmark = pytest.mark.integration


def _records(partition: int, n: int) -> list[dict]:
    return [
        {
            "partition": partition,
            "key": f"k{partition}-{i}".encode(),
            "value": bytes([0, 255, i]),  # binary values must survive untouched
            "headers": [
                ("eo-message-id", f"msg-{partition}-{i}".encode()),
                ("eo-token-id", f"tok-{partition}-{i}".encode()),
                ("eo-blobs", b'[{"uri": "file:///b", "sha256": "00"}]'),
                ("binary", bytes([0xFF, 0x00, i])),
            ],
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def topic(kafka) -> str:
    name = f"orders-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name, partitions=2)
    produce(kafka.bootstrap, name, _records(0, 10) + _records(1, 6))
    return name


@pytest.fixture(scope="module")
def conn(kafka) -> KafkaConnection:
    return KafkaConnection(bootstrap_servers=kafka.bootstrap)


def test_records_and_headers_round_trip_through_spark(spark, conn, topic) -> None:
    df = read_topics(spark, conn, [topic], isolation="read_uncommitted")
    assert df.schema == record_schema()
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))  # 16 rows: a test-sized read
    expected = sorted(_records(0, 10) + _records(1, 6), key=lambda r: (r["partition"], r["key"]))
    assert [(r.partition, r.offset) for r in rows] == [(0, i) for i in range(10)] + [(1, i) for i in range(6)]
    by_key = {bytes(r.key): r for r in rows}
    for rec in expected:
        got = by_key[rec["key"]]
        assert bytes(got.value) == rec["value"]
        assert [(h.key, bytes(h.value)) for h in got.headers] == rec["headers"]
        assert got.topic == topic and got.timestamp is not None


def test_protocol_columns_come_from_the_configured_header_names(spark, conn, topic) -> None:
    df = with_protocol_columns(read_topics(spark, conn, [topic]), HeaderNames())
    row = df.where("partition = 1 and offset = 2").first()
    assert (row.message_id, row.token_id, row.producer) == ("msg-1-2", "tok-1-2", None)
    remapped = with_protocol_columns(read_topics(spark, conn, [topic]), HeaderNames(message_id="eo-token-id"))
    assert remapped.where("partition = 1 and offset = 2").first().message_id == "tok-1-2"


def test_partition_range_by_offsets(spark, conn, topic) -> None:
    df = read_topics(spark, conn, [topic], ranges=[OffsetRange(topic, 0, 3, 7)])
    assert sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect()) == [
        (0, 3), (0, 4), (0, 5), (0, 6)
    ]
    both = read_topics(spark, conn, [topic], ranges=[OffsetRange(topic, 0, 8), OffsetRange(topic, 1, 0, 2)])
    assert sorted((r.partition, r.offset) for r in both.select("partition", "offset").collect()) == [
        (0, 8), (0, 9), (1, 0), (1, 1)
    ]


def test_aborted_transaction_is_invisible_under_read_committed(spark, kafka, conn) -> None:
    name = f"tx-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name)
    rec = lambda tag, i: {"value": f"{tag}-{i}".encode(), "headers": [("eo-message-id", f"{tag}-{i}".encode())]}  # noqa: E731
    produce(kafka.bootstrap, name, [rec("committed", i) for i in range(3)], transactional_id=f"{name}-a")
    produce(kafka.bootstrap, name, [rec("aborted", i) for i in range(4)], transactional_id=f"{name}-b", abort=True)
    produce(kafka.bootstrap, name, [rec("later", i) for i in range(2)], transactional_id=f"{name}-c")

    committed = read_topics(spark, conn, [name], isolation="read_committed")
    uncommitted = read_topics(spark, conn, [name], isolation="read_uncommitted")
    committed_values = sorted(bytes(r.value).decode() for r in committed.select("value").collect())
    uncommitted_values = sorted(bytes(r.value).decode() for r in uncommitted.select("value").collect())
    assert len(committed_values) == 5 and not any(v.startswith("aborted") for v in committed_values)
    assert len(uncommitted_values) == 9
    assert len(committed_values) < len(uncommitted_values)

    (offsets,) = partition_offsets(conn, [name])
    # 9 records + 3 commit/abort markers; nothing is pending so the last stable offset is the end.
    assert (offsets.log_start, offsets.high_watermark, offsets.last_stable) == (0, 12, 12)


def test_consumer_group_offsets(conn, kafka, topic) -> None:
    commit_group_offsets(kafka.bootstrap, "billing-test", topic, {0: 7, 1: 2})
    assert committed_offsets(conn, "billing-test", [topic]) == {topic: {0: 7, 1: 2}}
    assert committed_offsets(conn, "never-committed", [topic]) == {}



def test_a_busy_group_coordinator_is_asked_again_and_other_errors_are_not() -> None:
    """A broker that just started answers 'coordinator load in progress' for a few seconds
    (seen in CI): committed_offsets asks again; a refusal (authorization) is raised at once."""
    from confluent_kafka import KafkaError, KafkaException

    from eoctl.sources.kafka import _coordinator_busy

    assert _coordinator_busy(KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)))
    assert _coordinator_busy(KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)))
    assert not _coordinator_busy(KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)))
    assert not _coordinator_busy(ValueError("not a Kafka error"))
