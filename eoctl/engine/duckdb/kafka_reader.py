"""Live Kafka topics for the DuckDB engine: confluent-kafka reads each partition's offset range
(log start, or a --range start, to the high watermark, or the last stable offset under
read_committed, as Spark's Kafka source ends) in batches, which go to a table of the run's database
as Arrow record batches: the records are never all in Python at once.

A consumer in Python is bound by one core (turning a million messages into columns is Python
work), so a large read is shared among reader processes (eoctl.engine.duckdb.kafka_worker), one per core
up to the partitions, each streaming Arrow batches of its partitions back through a pipe. Pipes,
not files: a reader whose parent is gone (kill -9) fails its next write and ends, leaving nothing.
"""

from __future__ import annotations

import gc
import os
import time
import uuid
from collections.abc import Generator
from contextlib import closing
from typing import TYPE_CHECKING, NoReturn

from eoctl.errors import SourceError
from eoctl.sources.kafka import EARLIEST, LATEST, OffsetRange, client_config, partition_offsets

if TYPE_CHECKING:
    import duckdb

    from eoctl.config.model import Isolation, KafkaConnection

#: messages asked of librdkafka per call, and per Arrow batch written to the table
BATCH = 50_000
#: below this many records one consumer in process reads them: starting readers costs more
PARALLEL_FROM = 200_000

Plan = dict[tuple[str, int], tuple[int, int]]


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


def record_schema():
    import pyarrow as pa

    return pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                      ("timestamp", pa.timestamp("ms")), ("key", pa.binary()), ("value", pa.binary()),
                      ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])


def read_kafka(con: duckdb.DuckDBPyConnection, table: str, conn: KafkaConnection, topics: list[str],
               isolation: Isolation, ranges: list[OffsetRange] | None = None, readers: int | None = None) -> int:
    """Make `table` the records of `topics` (or of `ranges`) in the normalized record schema;
    the number read. Aborted transactions' records are skipped under read_committed. `readers`:
    processes reading at once (default: one per core, for reads of PARALLEL_FROM records or more)."""
    con.execute(f'CREATE OR REPLACE TABLE "{table}" (topic VARCHAR, "partition" INTEGER, "offset" BIGINT, '
                'timestamp TIMESTAMP, key BLOB, value BLOB, headers STRUCT("key" VARCHAR, "value" BLOB)[])')
    plan = {tp: se for tp, se in offset_plan(conn, topics, isolation, ranges).items() if se[0] < se[1]}
    if not plan:
        return 0
    if readers is None:
        readers = (os.cpu_count() or 1) if sum(e - s for s, e in plan.values()) >= PARALLEL_FROM else 1
    groups = split_plan(plan, readers)
    batches = consume(conn, isolation, plan) if len(groups) == 1 else _from_readers(conn, isolation, groups)
    total = 0
    with closing(batches):  # on a failure here, the readers are stopped at once
        for batch in batches:
            con.register("kafka_batch", batch)
            con.execute(f'INSERT INTO "{table}" SELECT * FROM kafka_batch')
            con.unregister("kafka_batch")
            total += batch.num_rows
    return total


def split_plan(plan: Plan, readers: int) -> list[Plan]:
    """At most `readers` groups of partitions with about as many records each (largest first,
    each to the group with the fewest so far)."""
    groups: list[Plan] = [{} for _ in range(max(1, min(readers, len(plan))))]
    sizes = [0] * len(groups)
    for tp, (start, end) in sorted(plan.items(), key=lambda item: item[1][0] - item[1][1]):
        i = sizes.index(min(sizes))
        groups[i][tp] = (start, end)
        sizes[i] += end - start
    return groups


def consume(conn: KafkaConnection, isolation: Isolation, plan: Plan) -> Generator:
    """The records of `plan` ((topic, partition) -> [start, end)) as Arrow record batches of
    record_schema(), in the order the broker sends them."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    schema = record_schema()
    try:
        consumer = Consumer(_consumer_config(conn, isolation))
    except KafkaException as exc:
        raise SourceError(f"Kafka at {conn.bootstrap_servers}: {exc.args[0].str()}") from None
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
                yield _record_batch(schema, topic_, part_, off_, ts_, key_, val_, pairs, ends_, bare_)
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


def _consumer_config(conn: KafkaConnection, isolation: Isolation) -> dict:
    return {
        # librdkafka stops fetching a partition whose queue holds queued.min.messages (or the
        # queue's kbytes) and then waits fetch.queue.backoff.ms (1 s) before asking again: a reader
        # that keeps up waited most of the time (1M records: 7.5 s, 1.6 s of it CPU; with 50 ms:
        # 2.5 s, the same bounded queue). A connection's client_properties may set it otherwise.
        "fetch.queue.backoff.ms": 50,
        **client_config(conn), "group.id": f"eoctl-read-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "isolation.level": isolation, "enable.partition.eof": True,
        # the consumer reads once, from the offsets assigned: nothing of a group is used or kept
        "auto.offset.reset": "error",
    }


def _from_readers(conn: KafkaConnection, isolation: Isolation, groups: list[Plan]) -> Generator:
    """The batches of every group's reader process, as they come. A reader's failure is its one
    line (SourceError); on any way out, every reader still running is killed."""
    import contextlib
    import json
    import queue
    import subprocess
    import sys
    import threading

    import pyarrow as pa

    from eoctl.engine.duckdb.kafka_worker import connection_json

    arrived: queue.Queue = queue.Queue(maxsize=2 * len(groups))  # bounded: readers wait for the inserts
    procs = []

    def pump(proc: subprocess.Popen) -> None:
        try:
            with pa.ipc.open_stream(proc.stdout) as stream:
                for batch in stream:
                    arrived.put(batch)
        except (pa.ArrowInvalid, OSError):
            pass  # the reader ended early: its exit code and its line say why
        finally:
            arrived.put(proc)  # this reader is done

    try:
        for group in groups:
            # the connection (secrets included) goes through the pipe, never the command line
            request = {"connection": connection_json(conn), "isolation": isolation,
                       "plan": [[t, p, s, e] for (t, p), (s, e) in group.items()]}
            proc = subprocess.Popen([sys.executable, "-m", "eoctl.engine.duckdb.kafka_worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            procs.append(proc)
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(request).encode())
                proc.stdin.close()
            except BrokenPipeError:  # the reader died before reading its request: its pump sees it end and why
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            threading.Thread(target=pump, args=(proc,), daemon=True).start()
        running = len(procs)
        while running:
            item = arrived.get()
            if not isinstance(item, subprocess.Popen):
                yield item
                continue
            running -= 1
            if item.wait() != 0:  # the first reader to fail ends the read (the others are killed below)
                _reader_failed(item, conn)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


def _reader_failed(proc, conn: KafkaConnection) -> NoReturn:
    import signal

    from eoctl import interrupts
    from eoctl.errors import Interrupted

    if interrupts.received() is not None:  # the run was stopped: a reader in its process group too
        raise Interrupted(interrupts.received())
    lines = proc.stderr.read().decode(errors="replace").strip().splitlines()
    if lines:
        raise SourceError(lines[-1])
    how = (f"was stopped by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
           else f"ended with exit code {proc.returncode}")
    raise SourceError(f"a Kafka reader of {conn.bootstrap_servers} {how}")


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
