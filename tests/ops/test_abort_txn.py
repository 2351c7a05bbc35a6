"""abort-transaction on the real broker: a producer begins a transaction, sends, and is killed
with SIGKILL; the last stable offset stays behind the high watermark; the plan lists the
transaction (producer id, epoch, start offset); --execute aborts it through Kafka's Admin API, the
last stable offset reaches the high watermark and a read_committed consumer reads past it; a
second run finds nothing."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from pathlib import Path

import pytest

from eoctl.config import load_config
from eoctl.engine.spark.kafka_admin import JavaTransactionAdmin
from eoctl.ops.abort_txn import AbortOptions, abort_transactions
from eoctl.sources.kafka import partition_offsets
from tests.helpers.cli import run_eoctl
from tests.helpers.configs import live_input_config
from tests.helpers.kafka_data import hang_a_transaction, produce

pytestmark = pytest.mark.integration


def _committed_values(bootstrap: str, topic: str) -> list[bytes]:
    """Everything a read_committed consumer reads from the start of partition 0."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values, idle = [], 0
    while idle < 3:
        msg = consumer.poll(1.0)
        if msg is None:
            idle += 1
        elif not msg.error():
            values.append(msg.value())
    consumer.close()
    return values


def test_a_killed_producers_transaction_is_planned_aborted_and_gone(spark, kafka, spark_jars: Path,
                                                                       tmp_path: Path) -> None:
    topic = f"abort-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic)
    produce(kafka.bootstrap, topic, [{"value": b"before", "partition": 0}])
    hang_a_transaction(kafka.bootstrap, topic, f"{topic}-tx")
    produce(kafka.bootstrap, topic, [{"value": b"after", "partition": 0}])
    path = live_input_config(tmp_path, kafka.bootstrap, topic, store=True)
    config = load_config(path)
    time.sleep(1.1)
    (held,) = [p for p in partition_offsets(config.kafka["main"], [topic]) if p.partition == 0]
    assert held.last_stable < held.high_watermark and _committed_values(kafka.bootstrap, topic) == [b"before"]

    # the plan, as an operator runs it: the transaction that holds the partition, nothing changed
    planned = run_eoctl("--config", str(path), "--format", "json", "abort-transaction", "--transaction-timeout", "1s",
                        env={"EOCTL_JARS_DIR": str(spark_jars)})
    assert planned.code == 0, planned.stderr[-2000:]
    plan = json.loads(planned.stdout)
    assert plan["schema"] == "eoctl.abort-transaction/v1" and plan["executed"] is False
    (row,) = plan["transactions"]
    assert (row["topic"], row["partition"], row["status"]) == (topic, 0, "planned")
    assert row["start_offset"] == row["last_stable_offset"] == held.last_stable and row["producer_id"] >= 0
    assert row["producer_epoch"] is not None and row["age_seconds"] >= 1
    assert partition_offsets(config.kafka["main"], [topic])[0].last_stable == held.last_stable

    # while another run holds the lease, --execute is refused (exit 4) before it touches anything
    from eoctl.ops.lease import Lease

    held_lease = Lease(config, "abort-transaction", "other-run").acquire()
    try:
        refused = run_eoctl("--config", str(path), "abort-transaction", "--execute", "--transaction-timeout", "1s")
    finally:
        held_lease.release()
    assert refused.code == 4 and "abort-transaction is already running: run other-run" in refused.stderr
    assert partition_offsets(config.kafka["main"], [topic])[0].last_stable == held.last_stable

    # --execute: aborted through the Admin API; the last stable offset reaches the high watermark
    options = AbortOptions(transaction_timeout=dt.timedelta(seconds=1), execute=True)
    done = abort_transactions(config, options, lambda conn: JavaTransactionAdmin(spark, conn))
    (aborted,) = done.transactions
    assert aborted.status == "aborted", aborted.reason
    after = partition_offsets(config.kafka["main"], [topic])[0]
    assert after.last_stable == after.high_watermark == aborted.last_stable_offset_after
    assert _committed_values(kafka.bootstrap, topic) == [b"before", b"after"]  # the open record never is

    # a second run finds nothing to do
    again = abort_transactions(config, options, lambda conn: JavaTransactionAdmin(spark, conn))
    assert again.transactions == [] and not again.failed()
