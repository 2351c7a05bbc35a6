"""Reading a reference-pipeline run back for assertions: tables, topic records, blobs."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from samples.reference.spec import RunSpec
from samples.reference.store import ENDPOINTS, Store


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    headers: dict[str, str]
    body: dict

    @property
    def message_id(self) -> str:
        return self.headers["eo-message-id"]

    @property
    def token_id(self) -> str:
        return self.headers["eo-token-id"]

    @property
    def blobs(self) -> list[dict]:
        return json.loads(self.headers.get("eo-blobs", "[]"))


def topic_records(bootstrap: str, topic: str) -> list[Record]:
    """Every record of a (small, test-sized) topic, read with a throwaway consumer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    out: list[Record] = []
    for p in parts:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        if hi <= lo:
            continue
        consumer.assign([TopicPartition(topic, p, lo)])
        while True:
            msg = consumer.poll(10)
            assert msg is not None and not msg.error(), f"cannot read {topic}/{p}"
            out.append(Record(topic, p, msg.offset(), {k: v.decode() for k, v in msg.headers() or []},
                              json.loads(msg.value())))
            if msg.offset() >= hi - 1:
                break
    consumer.close()
    return out


@dataclass
class PipelineState:
    spec: RunSpec
    tables: dict[str, list[tuple]]
    orders: list[Record]
    invoices: list[Record]

    @classmethod
    def read(cls, spec: RunSpec) -> PipelineState:
        store = Store.open(spec.store_kind, spec.store_target)
        tables = {}
        try:
            for ep in ENDPOINTS:
                tables[f"{ep}.eo_tokens"] = store.q(f"select token_id, message_id, destination from {ep}.eo_tokens")
                tables[f"{ep}.eo_outbox"] = store.q(
                    f"select incoming_message_id, tokens_committed_at is not null from {ep}.eo_outbox")
                tables[f"{ep}.eo_intents"] = store.q(f"select attempt_id, kind, ref from {ep}.eo_intents")
            tables["shipping.shipments"] = store.q("select order_id, source_message_id from shipping.shipments")
        finally:
            store.close()
        return cls(spec, tables, topic_records(spec.bootstrap, spec.topics["orders"]),
                   topic_records(spec.bootstrap, spec.topics["invoices"]))

    def pending_blob_refs(self) -> set[str]:
        """Blob names that pending outbox entries will publish: referenced, so not garbage."""
        store = Store.open(self.spec.store_kind, self.spec.store_target)
        try:
            rows = store.q("select outgoing from billing.eo_outbox")
        finally:
            store.close()
        refs = set()
        for (outgoing,) in rows:
            for m in json.loads(outgoing) if isinstance(outgoing, str) else outgoing:
                refs |= {b["uri"] for b in json.loads(m["headers"].get("eo-blobs", "[]"))}
        return refs

    def shipments_per_order(self) -> Counter:
        return Counter(order for order, _ in self.tables["shipping.shipments"])

    def blob_files(self) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in Path(self.spec.blobs_dir).iterdir()}
