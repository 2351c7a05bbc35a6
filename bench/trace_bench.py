"""Benchmark: `eoctl trace` on a large live topic, with and without a time bound, against a plain
confluent-kafka consumer asked the same question in this process.

    python bench/trace_bench.py --records 1000000 --work /tmp/bench-trace --start-broker
    python bench/trace_bench.py --records 1000000 --work /tmp/bench-trace --kafka 127.0.0.1:9092
    python bench/trace_bench.py --records 1000000 --work /tmp/bench-trace --archive --engines duckdb,spark

With `--archive`, the state is a Parquet topic archive instead; the question is every copy of
one message of it, asked of `eoctl --engine E trace` (each engine in `--engines`) and of the same
question as hand-written DuckDB SQL over the same files, in this process.

The generator fills a fresh topic (8 partitions); after a pause, a late batch of `--late` records
with new message ids is produced. The question: every copy of one message of the late batch.
Contenders: `eoctl trace --full-scan` (reads every record), `eoctl trace --since T` (the broker's
offsets for T, then only that slice), and the same two as a confluent-kafka consumer loop
(whole topic / seek to offsets_for_times). Wall time and peak RSS of eoctl's process tree (Python
driver and Spark JVM, with Spark's start-up) are measured as a user runs it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from measure import run_measured, with_broker  # noqa: E402


def produce_late(bootstrap: str, topic: str, count: int) -> tuple[str, dt.datetime]:
    """`count` records with fresh message ids; returns one of them (sent twice) and the batch's start."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    start = dt.datetime.now(dt.timezone.utc)
    target = f"late-{uuid.uuid4()}"
    for i in range(count):
        mid = target if i in (count // 2, count - 1) else f"late-{uuid.uuid4()}"  # the target: two copies
        producer.produce(topic, value=b"{}", key=str(i).encode(), headers=[
            ("eo-message-id", mid.encode()), ("eo-token-id", f"tok-{mid}".encode()), ("eo-producer", b"shop")])
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("late records could not be delivered")
    return target, start


def trace(config: Path, jars: str | None, target: str, extra: list[str],
          engine: str = "spark") -> tuple[float, int, int, int]:
    env = {**os.environ, **({"EOCTL_JARS_DIR": jars} if jars else {})}
    args = [sys.executable, "-m", "eoctl", "--engine", engine, "--config", str(config), "--format", "json", "trace",
            target, *extra]
    elapsed, peak, code, stdout, stderr = run_measured(args, env, REPO)
    if code not in (0, 1):
        raise RuntimeError(f"eoctl trace failed ({code}): {stderr[-2000:]}")
    out = json.loads(stdout)
    read = out["scans"][0]["records_read"]
    return elapsed, peak, read, len(out["messages"][0]["copies"])


def consumer_loop(bootstrap: str, topic: str, target: str, since: dt.datetime | None) -> tuple[float, int, int]:
    """The same question as a plain consumer: read (from `since`'s offsets) to the end, keep matches."""
    from confluent_kafka import Consumer, TopicPartition

    start = time.monotonic()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    parts = [TopicPartition(topic, p) for p in c.list_topics(topic, timeout=10).topics[topic].partitions]
    ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
    if since is not None:
        ms = int(since.timestamp() * 1000)
        parts = c.offsets_for_times([TopicPartition(topic, tp.partition, ms) for tp in parts], timeout=10)
        parts = [TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else ends[tp.partition])
                 for tp in parts]
    else:
        parts = [TopicPartition(topic, tp.partition, 0) for tp in parts]
    c.assign(parts)
    pending = {tp.partition for tp in parts if tp.offset < ends[tp.partition]}
    read = found = 0
    want = target.encode()
    while pending:
        for m in c.consume(10_000, timeout=1.0):
            if m.error():
                pending.discard(m.partition())
                continue
            read += 1
            if any(k == "eo-message-id" and v == want for k, v in m.headers() or []):
                found += 1
            if m.offset() + 1 >= ends[m.partition()]:
                pending.discard(m.partition())
    c.close()
    return time.monotonic() - start, read, found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--late", type=int, default=2000, help="records produced after the pause")
    ap.add_argument("--work", type=Path, default=Path("/tmp/eoctl-bench-trace"))
    ap.add_argument("--kafka", help="bootstrap servers of a running broker")
    ap.add_argument("--start-broker", action="store_true", help="run on the test bed's broker")
    ap.add_argument("--jars", default=os.environ.get("EOCTL_JARS_DIR"), help="EOCTL_JARS_DIR for eoctl")
    ap.add_argument("--engines", default="spark", help="engines to run eoctl trace on (duckdb,spark)")
    ap.add_argument("--archive", action="store_true", help="a Parquet topic archive instead of a live topic")
    args = ap.parse_args()
    if args.archive:
        return bench_archive(args)
    if not (args.kafka or args.start_broker):
        ap.error("give --kafka BOOTSTRAP or --start-broker")
    return with_broker(args, bench)


def bench_archive(args: argparse.Namespace) -> int:
    """One message of a generated Parquet archive: eoctl trace on each engine, and the same
    question in hand-written DuckDB SQL."""
    import duckdb

    from samples.generator import GenSpec, generate

    state = args.work / f"archive-{args.records}"
    if not (state / "ground_truth.json").exists():
        t = time.monotonic()
        generate(GenSpec(args.records, state))
        print(f"generated {args.records} records in {time.monotonic() - t:.1f} s", flush=True)
    files = f"{state}/topics/**/*.parquet"
    target = duckdb.sql(f"SELECT decode(list_filter(headers, lambda h: h.key = 'eo-message-id')[-1].value) "
                        f"FROM read_parquet('{files}') WHERE \"offset\" = {args.records // 20} LIMIT 1").fetchall()[0][0]
    rows = []
    for engine in args.engines.split(","):
        secs, peak, read, copies = trace(state / "eoctl.toml", args.jars, target, ["--full-scan"], engine)
        rows.append((f"eoctl --engine {engine} trace --full-scan", secs, peak, read, copies))
    t = time.monotonic()
    con = duckdb.connect()
    found = con.execute(f"SELECT count(*) FROM read_parquet('{files}') WHERE list_contains(list_transform("
                        "list_filter(headers, lambda h: h.key = 'eo-message-id'), lambda h: decode(h.value)), ?)",
                        [target]).fetchone()[0]
    read = con.execute(f"SELECT count(*) FROM read_parquet('{files}')").fetchone()[0]
    rows.append(("DuckDB SQL, in process (copies of the id)", time.monotonic() - t,
                 resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, read, found))
    print(f"\n{read:,} archived records, {os.cpu_count()} cores")
    print(f"{'contender':46} {'wall s':>8} {'peak RSS MiB':>13} {'records read':>13} {'copies':>7}")
    for name, secs, peak, n, copies in rows:
        print(f"{name:46} {secs:8.1f} {peak / 2**20:13.0f} {n:13,} {copies:7}")
    return 0


def bench(args: argparse.Namespace) -> int:
    from samples.generator import GenSpec, generate

    out = args.work / f"state-{args.records}"
    topic = f"trace-bench-{args.records}-{int(time.time())}"
    t = time.monotonic()
    truth = generate(GenSpec(args.records, out, kafka=args.kafka, topic=topic))
    print(f"generated {truth['records']} records in {time.monotonic() - t:.1f} s", flush=True)
    time.sleep(2.0)  # the late batch starts clearly after the bulk
    target, late_start = produce_late(args.kafka, topic, args.late)
    total = truth["records"] + args.late
    since = (late_start - dt.timedelta(seconds=1)).isoformat()

    rows = []
    for engine in args.engines.split(","):
        secs, peak, read, copies = trace(out / "eoctl.toml", args.jars, target, ["--full-scan"], engine)
        rows.append((f"eoctl --engine {engine} trace --full-scan", secs, peak, read, copies))
        secs, peak, read, copies = trace(out / "eoctl.toml", args.jars, target, ["--since", since], engine)
        rows.append((f"eoctl --engine {engine} trace --since T", secs, peak, read, copies))
    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # noqa: E731
    secs, read, copies = consumer_loop(args.kafka, topic, target, None)
    rows.append(("confluent-kafka loop, whole topic", secs, rss(), read, copies))
    secs, read, copies = consumer_loop(args.kafka, topic, target, late_start - dt.timedelta(seconds=1))
    rows.append(("confluent-kafka loop, offsets_for_times(T)", secs, rss(), read, copies))

    print(f"\n{total:,} records ({args.late} late), 8 partitions, {os.cpu_count()} cores; target has 2 copies")
    print(f"{'contender':46} {'wall s':>8} {'peak RSS MiB':>13} {'records read':>13} {'copies':>7}")
    for name, secs, peak, read, copies in rows:
        print(f"{name:46} {secs:8.1f} {peak / 2**20:13.0f} {read:13,} {copies:7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
