"""The DuckDB engine's live Kafka reader against the real KRaft broker: the rows Spark's reader
gives, the same rows from reader processes as from one consumer, and readers that fail or lose
their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone

import pytest

from eoctl.config.model import KafkaConnection
from eoctl.engine.duckdb.sql import connect
from eoctl.engine.duckdb.kafka_reader import read_kafka, split_plan
from eoctl.errors import SourceError
from eoctl.engine.spark.sources import read_topics
from tests.helpers.kafka_data import produce
from tests.helpers.servers import REPO

WORKER = "eoctl.engine.duckdb.kafka_worker"


def _records(partition: int, n: int) -> list[dict]:
    return [{"partition": partition, "key": f"k{partition}-{i}".encode(), "value": bytes([0, 255, i % 256]),
             "headers": [("eo-message-id", f"msg-{partition}-{i}".encode()), ("binary", bytes([0xFF, 0x00]))]}
            for i in range(n)]


def _rows(con, table: str) -> list[tuple]:
    return sorted(con.execute(f'SELECT "partition", "offset", timestamp, key, value, headers FROM {table}').fetchall())


def _readers(parent: int | None = None) -> list[int]:
    """Pids of the living reader children of `parent` (this process), from /proc."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except (OSError, ValueError):
            continue  # not a process, or gone meanwhile
        if int(ppid) == parent and state != "Z" and WORKER in cmdline:
            found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def conn(kafka) -> KafkaConnection:
    return KafkaConnection(bootstrap_servers=kafka.bootstrap)


@pytest.fixture(scope="module")
def wide_topic(kafka) -> str:
    """6 partitions of unequal sizes, 60,000 records in all."""
    name = f"wide-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name, partitions=6)
    produce(kafka.bootstrap, name, [r for p, n in enumerate([20_000, 15_000, 10_000, 8_000, 5_000, 2_000])
                                    for r in _records(p, n)])
    return name


def test_split_plan_balances_records_and_keeps_every_partition() -> None:
    plan = {("t", p): (0, n) for p, n in enumerate([100, 90, 10, 10, 5])}
    groups = split_plan(plan, 2)
    assert sorted(tp for g in groups for tp in g) == sorted(plan)
    assert sorted(sum(e - s for s, e in g.values()) for g in groups) == [105, 110]
    assert len(split_plan(plan, 8)) == 5 and len(split_plan(plan, 1)) == 1


@pytest.mark.integration
def test_the_duckdb_engine_reads_the_rows_spark_reads(spark, kafka, conn) -> None:
    """Headers (binary values too), records without headers (null, as Spark gives) or without a
    key, and timestamps come out as Spark's reader gives them."""
    name = f"mixed-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name, partitions=2)
    base_ms = 1_780_000_000_123
    records = [{**r, "timestamp": base_ms + i} for i, r in enumerate(_records(0, 4) + _records(1, 3))]
    records += [{"partition": 0, "value": b"bare", "timestamp": base_ms + 100},
                {"partition": 1, "key": b"k", "value": b"one", "headers": [("only", b"\x00")],
                 "timestamp": base_ms + 101},
                {"partition": 1, "value": b"bare-too", "timestamp": base_ms + 102}]
    produce(kafka.bootstrap, name, records)

    con = connect()
    assert read_kafka(con, "records", conn, [name], "read_uncommitted") == len(records)
    got = _rows(con, "records")

    def spark_headers(hs):
        return None if hs is None else [{"key": h.key, "value": bytes(h.value)} for h in hs]

    spark_rows = read_topics(spark, conn, [name], isolation="read_uncommitted").collect()  # 10 rows
    want = sorted((r.partition, r.offset, r.key and bytes(r.key), bytes(r.value), spark_headers(r.headers))
                  for r in spark_rows)
    assert [(p, o, k, v, h) for p, o, _ts, k, v, h in got] == want
    assert sum(h is None for *_, h in got) == 2
    stamps = {v: ts for _p, _o, ts, _k, v, _h in got}
    assert stamps[b"bare"] == datetime.fromtimestamp((base_ms + 100) / 1000, timezone.utc).replace(tzinfo=None)


@pytest.mark.integration
def test_reader_processes_give_the_rows_one_consumer_gives(conn, wide_topic: str) -> None:
    con = connect()
    assert read_kafka(con, "alone", conn, [wide_topic], "read_committed", readers=1) == 60_000
    assert read_kafka(con, "shared", conn, [wide_topic], "read_committed", readers=3) == 60_000
    assert _rows(con, "alone") == _rows(con, "shared")
    assert not _readers()


@pytest.mark.integration
def test_a_reader_that_dies_fails_the_read_in_one_line_and_the_others_are_stopped(conn, wide_topic: str) -> None:
    killed: list[int] = []

    def kill_the_first_reader() -> None:
        deadline = time.monotonic() + 30
        while not killed and time.monotonic() < deadline:
            pids = _readers()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            time.sleep(0.005)

    watcher = threading.Thread(target=kill_the_first_reader)
    watcher.start()
    with pytest.raises(SourceError, match=rf"^a Kafka reader of {conn.bootstrap_servers} was stopped by SIGKILL$"):
        read_kafka(connect(), "records", conn, [wide_topic], "read_committed", readers=3)
    watcher.join()
    assert killed and not _readers()


@pytest.mark.integration
def test_readers_end_when_their_parent_is_killed(conn, wide_topic: str) -> None:
    """kill -9 of eoctl leaves no reader behind: each fails its next write to the pipe and ends."""
    script = ("import sys; from eoctl.config.model import KafkaConnection; from eoctl.engine.duckdb.sql import connect; "
              "from eoctl.engine.duckdb.kafka_reader import read_kafka; "
              f"read_kafka(connect(), 'r', KafkaConnection(bootstrap_servers={conn.bootstrap_servers!r}), "
              f"[{wide_topic!r}], 'read_committed', readers=3)")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 30
        readers: list[int] = []
        while len(readers) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
            readers = _readers(parent.pid)
        assert len(readers) == 3, "the reader processes did not start"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in readers):
            time.sleep(0.1)
        assert not any(_alive(p) for p in readers)
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an orphan's zombie is reaped by init)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
