"""Benchmark: `eoctl audit` against the same checks written as DuckDB SQL (and, for a live topic,
a plain confluent-kafka + dict script), on the same generated data, side by side in one run.

    python bench/audit_bench.py --records 10000000 --work /tmp/bench
    python bench/audit_bench.py --records 1000000 --work /tmp/bench-kafka --kafka 127.0.0.1:9092
    python bench/audit_bench.py --records 1000000 --work /tmp/bench-kafka --start-broker

Checks compared: topics (EO101-EO105), tokens (EO201-EO203), outbox (EO301, EO303), sinks (EO501-EO503).
Wall time and peak RSS are measured per contender: eoctl's driver (the Python process and the
Spark JVM it starts, summed, sampled every 100 ms) and this process for the in-process baselines.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from measure import run_measured, with_broker  # noqa: E402

CODES = ["EO101", "EO102", "EO103", "EO104", "EO105", "EO201", "EO202", "EO203", "EO301", "EO303", "EO501", "EO502",
         "EO503"]


def run_eoctl(config: Path, jars: str | None, engine: str = "spark", tree: Path = REPO) -> tuple[float, int, dict]:
    """(wall seconds, peak RSS bytes, count per code) of the audit of CODES, run as a user runs it
    from `tree` (the working directory: `python -m eoctl` imports that tree's package)."""
    env = {**os.environ, **({"EOCTL_JARS_DIR": jars} if jars else {})}
    args = [sys.executable, "-m", "eoctl", "--config", str(config), "--engine", engine, "--format", "json", "audit",
            "--fail-on", "critical", "--evidence-rows", "100", *[a for c in CODES for a in ("--select", c)]]
    elapsed, peak, code, stdout, stderr = run_measured(args, env, tree)
    if code not in (0, 1):
        raise RuntimeError(f"eoctl audit from {tree} failed ({code}): {stderr[-2000:]}")
    out = json.loads(stdout)
    return elapsed, peak, {c: r["count"] for c, r in out["summary"].items()}


def run_duckdb(out: Path) -> tuple[float, dict]:
    """The same checks as DuckDB SQL over the same files."""
    import duckdb

    start = time.monotonic()
    db = duckdb.connect()
    db.execute(f"attach '{out / 'state.duckdb'}' as st (read_only)")
    offsets = json.loads((out / "topics/orders/_committed_offsets.json").read_text())["orders"]
    db.execute("create table committed (p int, c bigint)")
    db.executemany("insert into committed values (?, ?)", [(int(p), c) for p, c in offsets.items()])
    h = lambda k: f"list_filter(headers, lambda x: x.key = '{k}')[1].value.decode()"  # noqa: E731
    db.execute(f"""create table r as select "partition", "offset", {h('eo-message-id')} as mid, {h('eo-token-id')} as tok,
        {h('eo-producer')} as producer, try_cast({h('eo-sequence')} as bigint) as seq,
        "offset" < c.c as processed
        from read_parquet('{out}/topics/orders/*.parquet') join committed c on c.p = "partition" """)
    db.execute(f"create view sink as select * from read_parquet('{out}/sinks/invoices/*.parquet')")
    # the outbox keeps sent rows (sent_at): only the others are pending
    db.execute("create view pending as select * from st.billing.eo_outbox where sent_at is null")
    q = {
        "EO101": "select count(*) from (select mid, tok from r where mid is not null group by all having count(*) > 1)",
        "EO102": "select count(*) from (select mid from r where mid is not null group by 1 having count(distinct tok) > 1)",
        "EO103": "select count(*) from (select producer, seq from r where seq is not null group by all having count(distinct mid) > 1)",
        "EO104": "select count(*) from (select seq, lead(seq) over (partition by producer order by seq) n from (select distinct producer, seq from r where seq is not null)) where n > seq + 1",
        "EO105": "select count(*) from r where mid is null or tok is null",
        "EO201": """select count(*) from st.billing.eo_tokens t where created_at < now() - interval 24 hour
                    and token_id not in (select tok from r where tok is not null)
                    and token_id not in (select incoming_token_id from pending)""",
        "EO202": """select count(*) from r where not processed and mid is not null
                    and tok not in (select token_id from st.billing.eo_tokens)
                    and mid not in (select mid from r where processed)
                    and mid not in (select incoming_message_id from pending)
                    and mid not in (select source_message_id from sink)""",
        "EO203": """select count(*) from (select distinct tok from r where processed) p join st.billing.eo_tokens t on t.token_id = p.tok
                    where t.token_id not in (select incoming_token_id from pending)""",
        "EO301": "select count(*) from pending where created_at < now() - interval 15 minute",
        "EO303": """select count(*) from st.billing.eo_outbox where sent_at is not null
                    and updated_at < now() - interval 7 day""",
        "EO501": "select count(*) from (select source_message_id from sink group by 1 having count(*) > 1)",
        "EO502": "select count(*) from (select order_id from sink group by 1 having count(distinct (source_message_id, amount)) > 1)",
        "EO503": """select count(distinct mid) from r where processed and mid is not null and tok is not null
                    and mid not in (select source_message_id from sink)
                    and mid not in (select incoming_message_id from pending)""",
    }
    counts = {c: db.execute(sql).fetchone()[0] for c, sql in q.items()}
    return time.monotonic() - start, {c: n for c, n in counts.items() if n}


def run_plain_kafka(bootstrap: str, topic: str) -> tuple[float, dict]:
    """Topic checks with a plain confluent-kafka consumer and Python dicts (the 3 a.m. script)."""
    from collections import defaultdict

    from confluent_kafka import Consumer, TopicPartition

    start = time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-plain", "enable.auto.commit": False})
    parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    tokens_by_mid: dict[str, set] = defaultdict(set)
    copies: dict[tuple, int] = defaultdict(int)
    mids_by_seq: dict[tuple, set] = defaultdict(set)
    no_headers = 0
    remaining = {p for p, e in ends.items() if e > 0}
    while remaining:
        for msg in consumer.consume(10000, timeout=1):
            if msg.error():
                continue
            h = {k: v.decode() for k, v in msg.headers() or []}
            mid, tok = h.get("eo-message-id"), h.get("eo-token-id")
            if mid is None or tok is None:
                no_headers += 1
            else:
                tokens_by_mid[mid].add(tok)
                copies[(mid, tok)] += 1
                if "eo-sequence" in h:
                    mids_by_seq[(h.get("eo-producer"), int(h["eo-sequence"]))].add(mid)
            if msg.offset() >= ends[msg.partition()] - 1:
                remaining.discard(msg.partition())
    consumer.close()
    counts = {"EO101": sum(n > 1 for n in copies.values()), "EO102": sum(len(t) > 1 for t in tokens_by_mid.values()),
              "EO103": sum(len(m) > 1 for m in mids_by_seq.values()), "EO105": no_headers}
    return time.monotonic() - start, {c: n for c, n in counts.items() if n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/eoctl-bench"))
    ap.add_argument("--kafka", help="bootstrap servers: also run the live-topic comparison")
    ap.add_argument("--jars", default=os.environ.get("EOCTL_JARS_DIR"), help="EOCTL_JARS_DIR for eoctl")
    ap.add_argument("--start-broker", action="store_true", help="run the live-topic comparison on the test bed's broker")
    ap.add_argument("--engines", default="spark", help="eoctl's engines to run, in order: spark, duckdb or both")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the in-process baseline (at 100M only the engine's memory is the question)")
    ap.add_argument("--memory-limit", help="[engine] memory_limit for the DuckDB engine (e.g. 1.5GB)")
    args = ap.parse_args()
    return with_broker(args, bench)


def bench(args: argparse.Namespace) -> int:
    from samples.generator import GenSpec, generate

    out = args.work / f"state-{args.records}"
    t = time.monotonic()
    topic = f"bench-{args.records}-{int(t)}" if args.kafka else "orders"  # a fresh live topic each run
    truth = generate(GenSpec(args.records, out, kafka=args.kafka, topic=topic))
    print(f"generated {truth['records']} records in {time.monotonic() - t:.1f} s", flush=True)
    expected = {c: v["count"] for c, v in truth["codes"].items() if c in CODES and v["count"]}

    config = out / "eoctl.toml"
    if args.memory_limit:
        text = config.read_text()
        assert "[engine]" not in text
        config.write_text(text + f'\n[engine]\nmemory_limit = "{args.memory_limit}"\n')
    rows = []
    for engine in args.engines.split(","):
        e_time, e_rss, e_counts = run_eoctl(config, args.jars, engine)
        label = "Spark local[*]" if engine == "spark" else f"DuckDB engine, memory_limit {args.memory_limit or 'default'}"
        rows.append((f"eoctl audit ({label})", e_time, e_rss, e_counts == expected))
    if args.kafka:
        p_time, p_counts = run_plain_kafka(args.kafka, topic)
        topic_expected = {c: n for c, n in expected.items() if c in ("EO101", "EO102", "EO103", "EO105")}
        rows.append(("confluent-kafka + dicts (topic checks only)", p_time,
                     resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, p_counts == topic_expected))
    elif not args.no_baseline:
        d_time, d_counts = run_duckdb(out)
        rows.append(("DuckDB SQL, same files", d_time, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                     d_counts == expected))
    print(f"\n{truth['records']:,} records, {os.cpu_count()} cores, checks {', '.join(CODES)}")
    print(f"{'contender':48} {'wall s':>8} {'peak RSS MiB':>13} {'matches truth':>14}")
    for name, secs, rss, ok in rows:
        print(f"{name:48} {secs:8.1f} {rss / 2**20:13.0f} {str(ok):>14}")
    for name, secs, _rss, _ok in rows[:-1] if not args.no_baseline else ():
        print(f"ratio {name} / baseline: {secs / rows[-1][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
