"""Benchmark: `eoctl audit --since-last` against a full audit, after appending k records to a topic
archive of N, in one process and one Spark session (the same warm JVM for both).

    EOCTL_JARS_DIR=$PWD/.cache/jars/spark python bench/incremental_bench.py --records 2000000 --work /tmp/incr-bench
    EOCTL_JARS_DIR=$PWD/.cache/jars/spark python bench/incremental_bench.py --records 1000000 --start-broker

The state is `samples/generator.py`'s (8 partitions, 10% of each in flight). A full audit is
recorded first (its working copy becomes the record index). Then, for each k: k records are
appended as a new Parquet file (new messages, plus a few redeliveries of old ones across the
boundary), the consumer's committed offsets move on by as many (the in-flight share stays 10%),
an incremental audit runs and is recorded, and a full audit runs (not recorded). Each run's time
is split at the first check: reading the source and writing the working copy, then the checks.
Both must report the same counts. With `--kafka`/`--start-broker` the state is a live topic: the
k records are produced to it (the redeliveries copied from the topic's own records) and the
consumer group's offsets are committed on by as many.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CODES = ["EO101", "EO102", "EO103", "EO104", "EO105", "EO201", "EO202", "EO203", "EO301", "EO501", "EO502"]


def append(out: Path, k: int, name: str) -> None:
    """k records after each partition's last offset: k - 10 new messages, 10 redeliveries."""
    import duckdb

    archive = out / "topics" / "orders"
    db = duckdb.connect()
    db.execute(f"create table ends as select \"partition\" as p, max(\"offset\") + 1 as e "
               f"from read_parquet('{archive}/*.parquet') group by 1")
    parts = db.execute("select count(*) from ends").fetchone()[0]
    h = "{{'key': '{0}', 'value': encode({1})}}"
    headers = ", ".join(h.format(key, val) for key, val in (
        ("eo-message-id", "'late-' || i"), ("eo-token-id", "'late-tok-' || i"), ("eo-producer", "'late'"),
        ("eo-sequence", "cast(i as varchar)")))
    db.execute(f"""create table new as select 'orders' as topic, cast(i % {parts} as integer) as "partition",
                   cast(i // {parts} as bigint) as rank, now() as "timestamp", encode('late-' || i) as key,
                   encode('v') as value, [{headers}] as headers from range({k - 10}) t(i)""")
    # redeliveries: old records, unchanged, at new offsets
    db.execute(f"""insert into new select topic, "partition", {k} + row_number() over () as rank, now(), key, value,
                   headers from read_parquet('{archive}/*.parquet') where "offset" = 5 limit 10""")
    db.execute(f"""copy (select topic, n."partition", e + row_number() over (partition by n."partition" order by rank)
                   - 1 as "offset", "timestamp", key, value, headers from new n join ends on p = n."partition")
                   to '{archive / name}' (format parquet)""")
    added = dict(db.execute('select "partition", count(*) from new group by 1').fetchall())
    path = archive / "_committed_offsets.json"
    committed = json.loads(path.read_text())
    for p, c in committed["orders"].items():
        committed["orders"][p] = c + added.get(int(p), 0)
    path.write_text(json.dumps(committed))


def append_live(bootstrap: str, topic: str, k: int) -> None:
    """The same k records on a live topic: k - 10 new messages, 10 copies of old records."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from samples.generator import ENDPOINT

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": ENDPOINT, "enable.auto.commit": False})
    parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 5) for p in parts])
    old = []
    while len(old) < 10:
        m = consumer.poll(10)
        if m is not None and not m.error():
            old.append(m)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "queue.buffering.max.messages": 1_000_000})
    added = dict.fromkeys(parts, 0)
    for i in range(k - 10):
        p = parts[i % len(parts)]
        headers = [("eo-message-id", f"late-{i}"), ("eo-token-id", f"late-tok-{i}"), ("eo-producer", "late"),
                   ("eo-sequence", str(i))]
        while True:
            try:
                producer.produce(topic, key=f"late-{i}".encode(), value=b"v", partition=p,
                                 headers=[(h, v.encode()) for h, v in headers])
                break
            except BufferError:
                producer.poll(0.1)
        added[p] += 1
    for m in old:
        producer.produce(topic, key=m.key(), value=m.value(), partition=m.partition(), headers=m.headers())
        added[m.partition()] += 1
    if producer.flush(120):
        raise RuntimeError("appended records could not all be delivered")
    committed = consumer.committed([TopicPartition(topic, p) for p in parts], timeout=10)
    consumer.commit(offsets=[TopicPartition(topic, tp.partition, tp.offset + added[tp.partition])
                             for tp in committed], asynchronous=False)
    consumer.close()


def timed(spark, config, options) -> tuple[dict, float, float, dict, object]:
    """(counts, seconds to read the records, seconds for the checks, scan summary, the report)."""
    from eoctl.audit import run_audit

    marks: list[tuple[str, float]] = []
    start = time.monotonic()
    report = run_audit(spark, config, options, CODES, lambda m: marks.append((m, time.monotonic())))
    end = time.monotonic()
    first_check = next(t for m, t in marks if m.startswith("EO"))
    counts = {c: r["count"] for c, r in report.summary().items()}
    return counts, first_check - start, end - first_check, report.run["scan"], report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/eoctl-incr-bench"))
    ap.add_argument("--appends", default="0.01,0.1", help="fractions of --records appended, one round each")
    ap.add_argument("--kafka", help="bootstrap servers: a live topic instead of an archive")
    ap.add_argument("--start-broker", action="store_true", help="a live topic on the test bed's broker")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "bench"))
    from measure import with_broker

    return with_broker(args, bench)


def bench(args: argparse.Namespace) -> int:

    from eoctl.checks.context import AuditOptions
    from eoctl.config import load_config
    from eoctl.engine import start_session
    from eoctl.incremental import record
    from samples.generator import GenSpec, generate

    out = args.work / f"state-{args.records}{'-live' if args.kafka else ''}"
    topic = f"incr-bench-{args.records}-{int(time.time())}" if args.kafka else "orders"
    t = time.monotonic()
    truth = generate(GenSpec(args.records, out, kafka=args.kafka, topic=topic))
    print(f"generated {truth['records']:,} records in {time.monotonic() - t:.1f} s", flush=True)
    config = load_config(out / "eoctl.toml")
    spark = start_session(config.engine)

    rows = []
    counts, read, checks, scan, report = timed(spark, config, AuditOptions(keep_index=True))
    t = time.monotonic()
    record(spark, config, report)
    rows.append(("full, recorded (the first index)", scan, read, checks, time.monotonic() - t, True))
    total = truth["records"]
    for i, frac in enumerate(float(f) for f in args.appends.split(",")):
        k = int(args.records * frac)
        if args.kafka:
            append_live(args.kafka, topic, k)
        else:
            append(out, k, f"appended-{i}.parquet")
        total += k
        inc_counts, inc_read, inc_checks, inc_scan, inc_report = timed(
            spark, config, AuditOptions(since_last=True, keep_index=True))
        t = time.monotonic()
        record(spark, config, inc_report)
        rec = time.monotonic() - t
        full_counts, full_read, full_checks, full_scan, _ = timed(spark, config, AuditOptions())
        same = inc_counts == full_counts
        rows.append((f"+{k:,} ({frac:.0%}): --since-last, recorded", inc_scan, inc_read, inc_checks, rec, same))
        rows.append((f"+{k:,} ({frac:.0%}): full, not recorded", full_scan, full_read, full_checks, 0.0, same))
        print(f"after +{k:,}: {total:,} records; counts equal: {same}", flush=True)
    spark.stop()

    where = f"live topic {topic}, 8 partitions" if args.kafka else "archive, 8 partitions"
    print(f"\n{args.records:,} records generated ({where}), {os.cpu_count()} cores, checks {', '.join(CODES)}")
    print(f"{'run':44} {'from source':>12} {'from index':>11} {'read+copy s':>12} {'checks s':>9} "
          f"{'record s':>9} {'total s':>8} {'same counts':>12}")
    for name, scan, read, checks, rec, same in rows:
        print(f"{name:44} {scan['new_records']:12,} {scan['indexed_records']:11,} {read:12.1f} {checks:9.1f} "
              f"{rec:9.1f} {read + checks + rec:8.1f} {str(same):>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
