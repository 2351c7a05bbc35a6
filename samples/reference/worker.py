"""The endpoints' process: consumes `invoices` (shipping) and `orders` (billing) until both are
caught up, committing each record's offset after the algorithm has run for it.

    python -m samples.reference.worker RUN_SPEC.json

Crash faults kill this process with SIGKILL; the orchestrator (chaos.py) starts it again and the
uncommitted records are delivered again. Partitions are assigned, not subscribed: a restarted
process resumes at once, with no group rebalance, from the group's committed offsets.
"""

from __future__ import annotations

import sys
from pathlib import Path

from samples.reference.endpoint import BlobStore, Billing, Dispatcher, Endpoint, Incoming, Shipping
from samples.reference.faults import Injector, Ledger
from samples.reference.spec import RunSpec
from samples.reference.store import Store


def _consumer(spec: RunSpec, group: str, topic: str):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": spec.bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "log_level": 3,
        # a fetch of a caught-up partition waits this long at the broker, and the lag check's
        # offset queries wait behind it on the same connection (500 ms each by default)
        "fetch.wait.max.ms": 10,
    })
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
    return consumer


def _incoming(msg) -> Incoming:
    headers = {k: v.decode() for k, v in (msg.headers() or [])}
    return Incoming(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), headers)


def _drain(consumer, endpoint: Endpoint) -> int:
    """Handle records until this consumer has committed everything its partitions hold now.

    Draining to zero lag (not merely until a poll comes back empty) keeps the order of work the
    same on every run: all of shipping's backlog, then all of billing's.
    """
    handled = 0
    while True:
        msg = consumer.poll(0.1)
        if msg is None:
            if _lag(consumer) == 0:
                return handled
            continue
        if msg.error():
            if msg.error().fatal():
                raise RuntimeError(f"consumer error: {msg.error()}")
            continue  # transient (e.g. the group coordinator is still loading): poll again
        endpoint.handle(_incoming(msg))
        consumer.commit(message=msg, asynchronous=False)  # the record is processed (or dropped)
        handled += 1


def _lag(consumer) -> int:
    from confluent_kafka import OFFSET_INVALID

    parts = consumer.assignment()
    lag = 0
    for tp, committed in zip(parts, consumer.committed(parts, timeout=30)):
        lo, hi = consumer.get_watermark_offsets(tp, timeout=30, cached=False)
        done = committed.offset if committed.offset != OFFSET_INVALID else lo
        lag += max(hi - max(done, lo), 0)
    return lag


def main(spec_path: str) -> int:
    spec = RunSpec.load(Path(spec_path))
    store = Store.open(spec.store_kind, spec.store_target)
    dispatcher = Dispatcher(spec.bootstrap)
    faults = Injector(spec.plan, Ledger.open(spec.ledger_path))
    billing = Billing(store, dispatcher, faults, BlobStore(spec.blobs_dir), topics=spec.topics)
    shipping = Shipping(store, dispatcher, faults, topics=spec.topics)
    invoices = _consumer(spec, spec.group("shipping"), spec.topics["invoices"])
    orders = _consumer(spec, spec.group("billing"), spec.topics["orders"])
    try:
        while True:
            # Downstream first: after a restart, shipping sees what billing sent before it crashed.
            _drain(invoices, shipping)
            _drain(orders, billing)
            if _lag(invoices) == 0 and _lag(orders) == 0:
                return 0
    finally:
        invoices.close()
        orders.close()
        store.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
