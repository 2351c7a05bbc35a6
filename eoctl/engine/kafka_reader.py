"""Live Kafka topics for the DuckDB engine: confluent-kafka reads each partition's offset range
(log start, or a --range start, to the high watermark, or the last stable offset under
read_committed, as Spark's Kafka source ends) in batches, which go to a table of the run's database
as Arrow record batches: the records are never all in Python at once.
"""

from __future__ import annotations

import gc
import time
import uuid
from typing import TYPE_CHECKING

from eoctl.errors import SourceError
from eoctl.sources.kafka import EARLIEST, LATEST, OffsetRange, client_config, partition_offsets

if TYPE_CHECKING:
    import duckdb

    from eoctl.config.model import Isolation, KafkaConnection

#: messages asked of librdkafka per call, and per Arrow batch written to the table
BATCH = 50_000


def offset_plan(conn: KafkaConnection, topics: list[str], isolation: Isolation,
                ranges: list[OffsetRange] | None) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> [start, end) to read: every partition of `topics`, or `ranges`,
    within the log (a start below the log start reads from it; an end past the last readable
    offset stops there)."""
    known = {(p.topic, p.partition): p for p in partition_offsets(conn, topics)}
    wanted = ranges or [OffsetRange(t, p) for t, p in known]
    plan = {}
    for r in wanted:
        p = known.get((r.topic, r.partition))
        if p is None:
            raise SourceError(f"partition {r.topic}:{r.partition} does not exist on {conn.bootstrap_servers}")
        last = p.last_stable if isolation == "read_committed" else p.high_watermark
        start = p.log_start if r.start == EARLIEST else max(r.start, p.log_start)
        end = last if r.end == LATEST else min(r.end, last)
        plan[(r.topic, r.partition)] = (start, end)
    return plan


def read_kafka(con: duckdb.DuckDBPyConnection, table: str, conn: KafkaConnection, topics: list[str],
               isolation: Isolation, ranges: list[OffsetRange] | None = None) -> int:
    """Make `table` the records of `topics` (or of `ranges`) in the normalized record schema;
    the number read. Aborted transactions' records are skipped under read_committed."""
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("ms")), ("key", pa.binary()), ("value", pa.binary()),
                        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])
    con.execute(f'CREATE OR REPLACE TABLE "{table}" (topic VARCHAR, "partition" INTEGER, "offset" BIGINT, '
                'timestamp TIMESTAMP, key BLOB, value BLOB, headers STRUCT("key" VARCHAR, "value" BLOB)[])')
    plan = {tp: se for tp, se in offset_plan(conn, topics, isolation, ranges).items() if se[0] < se[1]}
    if not plan:
        return 0
    consumer = Consumer({
        # librdkafka stops fetching a partition whose queue holds queued.min.messages (or the
        # queue's kbytes) and then waits fetch.queue.backoff.ms (1 s) before asking again: a reader
        # that keeps up waited most of the time (1M records: 7.5 s, 1.6 s of it CPU; with 50 ms:
        # 2.5 s, the same bounded queue). A connection's client_properties may set it otherwise.
        "fetch.queue.backoff.ms": 50,
        **client_config(conn), "group.id": f"eoctl-read-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "isolation.level": isolation, "enable.partition.eof": True,
        # the consumer reads once, from the offsets assigned: nothing of a group is used or kept
        "auto.offset.reset": "error",
    })
    total = 0
    # the loop makes millions of small objects and keeps none past its batch: the collector's
    # passes over them cost a quarter of the read (1M records: 11.7 s, without them 9.3 s)
    collecting = gc.isenabled()
    gc.disable()
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _end) in plan.items()])
        remaining = dict(plan)
        idle_since = time.monotonic()
        while remaining:
            topic_: list = []
            part_: list = []
            off_: list = []
            ts_: list = []
            key_: list = []
            val_: list = []
            # headers flat, (key, value) pairs and each record's end among them: Arrow builds the
            # list of structs from these ten times faster than from a dict per header
            pairs: list = []
            ends_: list = [0]
            bare_: list = []  # no headers: null, as Spark's Kafka source gives
            for m in consumer.consume(num_messages=BATCH, timeout=1.0):
                tp = (m.topic(), m.partition())
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if tp in remaining and m.offset() >= remaining[tp][1]:
                            del remaining[tp]  # read to the end (the last offsets may be transaction markers)
                        continue
                    raise SourceError(f"reading {tp[0]}:{tp[1]} from {conn.bootstrap_servers} failed: {err.str()}")
                end = remaining.get(tp, (0, -1))[1]
                offset = m.offset()
                if offset >= end:  # past the planned end: written after the plan
                    remaining.pop(tp, None)
                    continue
                topic_.append(tp[0])
                part_.append(tp[1])
                off_.append(offset)
                ts_.append(m.timestamp()[1])
                key_.append(m.key())
                val_.append(m.value())
                headers = m.headers()
                if headers:
                    pairs.extend(headers)
                bare_.append(not headers)
                ends_.append(len(pairs))
                if offset + 1 >= end:
                    del remaining[tp]
            if off_:
                idle_since = time.monotonic()
                batch = _record_batch(schema, topic_, part_, off_, ts_, key_, val_, pairs, ends_, bare_)
                con.register("kafka_batch", batch)
                con.execute(f'INSERT INTO "{table}" SELECT * FROM kafka_batch')
                con.unregister("kafka_batch")
                total += len(off_)
            elif time.monotonic() - idle_since > conn.timeout_seconds:
                left = ", ".join(f"{t}:{p}" for t, p in sorted(remaining))
                raise SourceError(f"Kafka at {conn.bootstrap_servers} sent nothing for {conn.timeout_seconds:g}s "
                                  f"while partitions {left} had records left to read")
    except KafkaException as exc:
        raise SourceError(f"Kafka at {conn.bootstrap_servers} failed: {exc.args[0].str()}") from None
    finally:
        if collecting:
            gc.enable()
        consumer.close()
    return total


def _record_batch(schema, topics: list, partitions: list, offsets: list, timestamps: list, keys: list,
                  values: list, pairs: list, ends: list, bare: list):
    """One Arrow batch of the normalized schema from a batch's columns, its headers as flat
    (key, value) pairs with each record's end among them; `bare` marks records without headers."""
    import pyarrow as pa

    header_type = schema.field("headers").type
    headers = pa.ListArray.from_arrays(
        pa.array(ends, pa.int32()),
        pa.StructArray.from_arrays([pa.array([k for k, _ in pairs], pa.string()),
                                    pa.array([v for _, v in pairs], pa.binary())],
                                   fields=list(header_type.value_type)),
        mask=pa.array(bare, pa.bool_()))
    columns = [topics, partitions, offsets, timestamps, keys, values]
    return pa.RecordBatch.from_arrays([*(pa.array(c, type=f.type) for c, f in zip(columns, schema)), headers],
                                      schema=schema)
