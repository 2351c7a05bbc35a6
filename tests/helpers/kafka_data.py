"""Producing test records to the real broker with confluent-kafka."""

from __future__ import annotations

from collections.abc import Iterable


def produce(bootstrap: str, topic: str, records: Iterable[dict], *, transactional_id: str | None = None,
            abort: bool = False) -> None:
    """Produce records {key, value, headers, partition}; in one transaction when transactional_id is set."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    if transactional_id:
        conf["transactional.id"] = transactional_id
    producer = Producer(conf)
    errors: list[str] = []

    def report(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    if transactional_id:
        producer.init_transactions(30)
        producer.begin_transaction()
    for r in records:
        kwargs = {k: r[k] for k in ("key", "value", "headers", "partition", "timestamp") if k in r}
        producer.produce(topic, on_delivery=report, **kwargs)
    if transactional_id:
        producer.flush(30)
        (producer.abort_transaction if abort else producer.commit_transaction)(30)
    remaining = producer.flush(30)
    assert remaining == 0 and not errors, f"produce failed: {errors or remaining}"


def commit_group_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    consumer.close()


# A producer that opens a transaction, writes, and dies (SIGKILL) without committing or aborting;
# its transaction timeout is long, so the coordinator does not end it during a test.
_HANG = """
import os, signal, sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[3], "transaction.timeout.ms": 600000})
p.init_transactions(30)
p.begin_transaction()
p.produce(sys.argv[2], value=b"open", headers=[("eo-message-id", b"hang-1"), ("eo-token-id", b"tok-hang-1")])
p.flush(30)
os.kill(os.getpid(), signal.SIGKILL)
"""


def hang_a_transaction(bootstrap: str, topic: str, transactional_id: str) -> None:
    """Leave a transaction open on `topic` with one record in it, its producer killed."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _HANG, bootstrap, topic, transactional_id], capture_output=True)
    assert proc.returncode == -9, proc.stderr
