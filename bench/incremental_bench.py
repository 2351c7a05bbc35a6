"""Benchmark: `eoctl audit --since-last` against a full audit, after appending k records to a topic
archive of N, in one process (on Spark, one session: the same warm JVM for both).

    EOCTL_JARS_DIR=$PWD/.cache/jars/spark python bench/incremental_bench.py --records 2000000 --work /tmp/incr-bench
    EOCTL_JARS_DIR=$PWD/.cache/jars/spark python bench/incremental_bench.py --records 1000000 --start-broker
    python bench/incremental_bench.py --records 2000000 --engine duckdb
    # a large state measured again and again: prepared once (generated, recorded, appended to),
    # then --since-last (not recorded) beside a full audit, as often as wanted (--rounds pairs,
    # alternating which runs first: the first run of a Spark session warms the JVM for the second)
    python bench/incremental_bench.py --records 100000000 --in-flight 100000 --engine duckdb --appends 0.01 \
        --memory-limit 1.5GB --prepare-only --work /tmp/incr100m
    python bench/incremental_bench.py --engine duckdb --measure /tmp/incr100m/state-100000000-100000-duckdb
    # the same, each run in a process of its own, as cron starts them (timed from the process's start)
    python bench/incremental_bench.py --engine duckdb --measure /tmp/incr100m/state-100000000-100000-duckdb --processes

The state is `samples/generator.py`'s (8 partitions, 10% of each in flight). A full audit is
recorded first (its working copy becomes the record index). Then, for each k: k records are
appended as a new Parquet file (new messages, plus 10 redeliveries of old ones across the
boundary) and the new messages' tokens are added to the token store (they are in flight: the
consumer has not reached them), half of them and 10 old rows are applied to the sink (a new file,
later `applied_at`: the sink's watermark column), an incremental audit runs and is recorded, and a full audit runs
(not recorded). Each run's time is split into reading the source (and writing the working copy),
the indexed records the checks read again (incremental), the checks, and keeping the record
index; beside each incremental run, its share of the full audit's time and the peak RSS of the
process (and the JVM's, on Spark). Both must report the same findings: every code, every
evidence identity. With
`--kafka`/`--start-broker` the state is a live topic: the k records are produced to it (the
redeliveries copied from the topic's own records). With `--commit`, the consumer also processed
as many records between the runs (committed offsets moved on, their tokens deleted, sink rows
written): the records EO503 reads again then include the newly processed ones, as in a pipeline
that runs the audit from cron.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: the checks of issue 46's measurement, with EO503 (the generator's invoices sink has
#: every_message); `--codes all` runs every check (EO302's ranking then dominates the full audit)
CODES = ["EO101", "EO102", "EO103", "EO104", "EO105", "EO201", "EO202", "EO203", "EO301", "EO501", "EO502", "EO503"]


def append(out: Path, k: int, name: str, tag: str) -> None:
    """k records after each partition's last offset: k - 10 new messages (ids, tokens and producer
    named after `tag`), 10 redeliveries."""
    import duckdb

    archive = out / "topics" / "orders"
    db = duckdb.connect()
    db.execute(f"create table ends as select \"partition\" as p, max(\"offset\") + 1 as e "
               f"from read_parquet('{archive}/*.parquet') group by 1")
    parts = db.execute("select count(*) from ends").fetchone()[0]
    h = "{{'key': '{0}', 'value': encode({1})}}"
    headers = ", ".join(h.format(key, val) for key, val in (
        ("eo-message-id", f"'{tag}-' || i"), ("eo-token-id", f"'{tag}-tok-' || i"), ("eo-producer", f"'{tag}'"),
        ("eo-sequence", "cast(i as varchar)")))
    db.execute(f"""create table new as select 'orders' as topic, cast(i % {parts} as integer) as "partition",
                   cast(i // {parts} as bigint) as rank, now() as "timestamp", encode('{tag}-' || i) as key,
                   encode('v') as value, [{headers}] as headers from range({k - 10}) t(i)""")
    # redeliveries: old records, unchanged, at new offsets
    db.execute(f"""insert into new select topic, "partition", {k} + row_number() over () as rank, now(), key, value,
                   headers from read_parquet('{archive}/*.parquet') where "offset" = 5 limit 10""")
    db.execute(f"""copy (select topic, n."partition", e + row_number() over (partition by n."partition" order by rank)
                   - 1 as "offset", "timestamp", key, value, headers from new n join ends on p = n."partition")
                   to '{archive / name}' (format parquet)""")
    add_tokens(out, k - 10, tag)
    add_sink_rows(out, k - 10, tag)


def commit(out: Path, k: int, tag: str) -> int:
    """The consumer processed about k more records since the last run, as a cron pipeline's does
    in an hour: each partition's committed offset moves k / P records on (at most to its end), the
    processed records' tokens are deleted, and their messages without a sink row gain one (a new
    sink file, after every other). Returns how many records it processed."""
    import json

    import duckdb

    from eoctl.sources.archive import COMMITTED_OFFSETS_FILE

    archive = out / "topics" / "orders"
    sink = out / "sinks" / "invoices"
    offsets_file = archive / COMMITTED_OFFSETS_FILE
    (topic, committed), = json.loads(offsets_file.read_text()).items()
    db = duckdb.connect(str(out / "state.duckdb"))
    ends = dict(db.execute(f"select cast(\"partition\" as varchar), max(\"offset\") + 1 "
                           f"from read_parquet('{archive}/*.parquet') group by 1").fetchall())
    moved = {p: min(ends[p], c + k // len(ends)) for p, c in committed.items()}
    db.execute("create temp table bounds (p integer, lo bigint, hi bigint)")
    db.executemany("insert into bounds values (?, ?, ?)", [(int(p), committed[p], moved[p]) for p in moved])
    mid = "list_filter(headers, lambda h: h.key = 'eo-message-id')"
    db.execute(f"""create temp table processed as
                   select distinct decode({mid}[1].value) as message_id
                   from read_parquet('{archive}/*.parquet') r
                   join bounds b on r."partition" = b.p and r."offset" >= b.lo and r."offset" < b.hi
                   where len({mid}) > 0""")
    db.execute("delete from billing.eo_tokens where message_id in (select message_id from processed)")
    base = int(time.time()) * 1_000_000 + k  # order ids neither earlier rows nor add_sink_rows's have
    db.execute(f"""copy (
        select {base} + row_number() over () as order_id, message_id as source_message_id, 100 as amount,
               now()::timestamp + to_microseconds({k + 2} + row_number() over ()) as applied_at
        from processed anti join read_parquet('{sink}/*.parquet') s on s.source_message_id = processed.message_id
    ) to '{sink / f"processed-{tag}.parquet"}' (format parquet)""")
    db.close()
    offsets_file.write_text(json.dumps({topic: moved}))
    return sum(moved[p] - committed[p] for p in moved)


def copy_state(source: Path, out: Path) -> dict:
    """A generated state copied to `out`: the files a run only adds to (topic archive, sink, blobs)
    linked, the ones it changes (the store, the configuration) copied; its ground truth."""
    import json
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(source, out, copy_function=os.link,
                    ignore=shutil.ignore_patterns("eoctl-history*", "state.duckdb*", "eoctl.toml"))
    for name in ("state.duckdb", "eoctl.toml"):
        shutil.copy(source / name, out / name)
    return json.loads((out / "ground_truth.json").read_text())


def add_tokens(out: Path, n: int, tag: str) -> None:
    """The appended new messages are in flight: the consumer's token store holds their tokens, as
    the sender registered them (without, each would be a silent loss, EO202)."""
    import duckdb

    from samples.generator import ENDPOINT

    with duckdb.connect(str(out / "state.duckdb")) as db:
        db.execute(f"""insert into billing.eo_tokens select '{tag}-tok-' || i, '{tag}-' || i, '{ENDPOINT}', '{tag}',
                       now() - interval 1 minute from range({n}) t(i)""")


def add_sink_rows(out: Path, n: int, tag: str) -> None:
    """Half of the appended new messages were applied to the sink (their consumer has not
    committed yet), and 10 old sink rows were applied again (EO501 across the watermark): a new
    sink file, written after every other (a later applied_at)."""
    import duckdb

    sink = out / "sinks" / "invoices"
    base = int(time.time()) * 1_000_000  # order ids no earlier row has
    duckdb.connect().execute(f"""copy (
        select {base} + i as order_id, '{tag}-' || i as source_message_id, 100 as amount,
               now()::timestamp + to_microseconds(i) as applied_at from range({n // 2}) t(i)
        union all select order_id, source_message_id, amount, now()::timestamp + to_microseconds({n} + 1)
        from (from read_parquet('{sink}/*.parquet') order by hash(source_message_id || '{tag}') limit 10)
    ) to '{sink / f"applied-{tag}.parquet"}' (format parquet)""")


def append_live(bootstrap: str, topic: str, k: int, tag: str) -> None:
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
    for i in range(k - 10):
        p = parts[i % len(parts)]
        headers = [("eo-message-id", f"{tag}-{i}"), ("eo-token-id", f"{tag}-tok-{i}"), ("eo-producer", tag),
                   ("eo-sequence", str(i))]
        while True:
            try:
                producer.produce(topic, key=f"{tag}-{i}".encode(), value=b"v", partition=p,
                                 headers=[(h, v.encode()) for h, v in headers])
                break
            except BufferError:
                producer.poll(0.1)
    for m in old:
        producer.produce(topic, key=m.key(), value=m.value(), partition=m.partition(), headers=m.headers())
    if producer.flush(120):
        raise RuntimeError("appended records could not all be delivered")
    consumer.close()


#: phases of a run, each from its first progress message to the next phase's
PHASES = (("read", "reading the records"), ("again", "reading the indexed"), ("topic checks", "EO1"),
          ("store checks", "EO2"), ("sink checks", "EO5"), ("index", "keeping"))


def timed(spark, config, options) -> tuple[dict, dict[str, float], dict, object, int]:
    """(findings, seconds per phase, scan summary, the report, peak RSS bytes of this process and
    its children while it ran); `spark` None: the DuckDB engine. Findings: (code, endpoint, where)
    -> (count, sorted evidence identities), what the findings history compares runs by."""
    import threading

    from measure import tree_rss

    from eoctl import history
    from eoctl.audit import run_audit

    marks: list[tuple[str, float]] = []
    mark = lambda m: marks.append((m, time.monotonic()))  # noqa: E731
    engine = config.engine.model_copy(update={"kind": "spark" if spark else "duckdb"})
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(os.getpid()))
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        report = run_audit(config.model_copy(update={"engine": engine}), options, CODES, spark, mark)
    finally:
        done.set()
        sampler.join()
    marks.append(("end", time.monotonic()))
    starts = []
    for phase, prefix in PHASES:
        at = next((i for i, (m, _) in enumerate(marks) if m.startswith(prefix)), None)
        if at is not None:
            starts.append((phase, at))
    starts.sort(key=lambda pa: pa[1])
    seconds = dict.fromkeys((p for p, _ in PHASES), 0.0)
    seconds["read"] = marks[starts[0][1]][1] - marks[0][1] if starts else 0.0  # from the start
    for (phase, at), nxt in zip(starts, [a for _, a in starts[1:]] + [len(marks) - 1]):
        seconds[phase] += marks[nxt][1] - marks[at][1]
    found = {(f.code, f.endpoint, f.where): (f.count, sorted(history.item_key(f.code, r) for r in f.evidence))
             for f in report.findings}
    return found, seconds, report.run["scan"], report, peak[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/eoctl-incr-bench"))
    ap.add_argument("--appends", default="0.01,0.1",
                    help="records appended, one round each: fractions of --records (below 1) or counts")
    ap.add_argument("--in-flight", type=int, help="records in flight in the generated state (default: 10%% of "
                    "--records); the token store holds about as many tokens")
    ap.add_argument("--kafka", help="bootstrap servers: a live topic instead of an archive")
    ap.add_argument("--start-broker", action="store_true", help="a live topic on the test bed's broker")
    ap.add_argument("--codes", help="`all`, or codes separated by commas (default: the twelve of CODES)")
    ap.add_argument("--memory-limit", help="[engine] memory_limit of the DuckDB engine (e.g. 1.5GB)")
    ap.add_argument("--from-state", type=Path, help="a state samples/generator.py wrote before (--records and "
                    "--in-flight as it was written with), copied instead of generated again (100M records: 6 min)")
    ap.add_argument("--commit", action="store_true", help="after each append, the consumer processes as many "
                    "records as were appended, as a cron pipeline does between runs (commit: committed offsets "
                    "moved, tokens deleted, sink rows written); archive states only")
    ap.add_argument("--prepare-only", action="store_true", help="stop after the full recorded audit and the first "
                    "append: the state under --work is then ready for --measure")
    ap.add_argument("--measure", type=Path, help="a state --prepare-only left: only --since-last (keeping its index, "
                    "not recorded, so it can be measured again) and a full audit, side by side")
    ap.add_argument("--rounds", type=int, default=2, help="with --measure: pairs of runs, the first pair "
                    "--since-last then full, the next full then --since-last, and so on (on Spark the first run "
                    "of a session pays for the JVM's warm-up: compare the runs of the same round)")
    ap.add_argument("--processes", action="store_true", help="with --measure: each run in a process of its own, "
                    "as cron starts them, timed from the process's start (the interpreter, the imports, on Spark "
                    "the session, which maps eoctl's class archive or records one, as the CLI does)")
    ap.add_argument("--child", choices=("since-last", "full"), help=argparse.SUPPRESS)  # one run of --processes
    ap.add_argument("--engine", choices=("spark", "duckdb"), default="spark",
                    help="the engine of every run (each engine keeps its own state folder under --work)")
    args = ap.parse_args()
    if args.commit and (args.kafka or args.start_broker):
        ap.error("--commit moves an archive's committed offsets; a live topic's group is not moved")
    if args.codes:
        from eoctl.audit import select_codes

        CODES[:] = select_codes(None if args.codes == "all" else [args.codes], None)
    sys.path.insert(0, str(REPO / "bench"))
    from measure import with_broker

    return with_broker(args, bench)


def bench(args: argparse.Namespace) -> int:

    from eoctl.config import load_config
    from eoctl.engine.spark import start_session
    from eoctl.incremental import record
    from eoctl.options import AuditOptions
    from samples.generator import GenSpec, generate

    if args.measure and args.child:
        return one_run(args)
    if args.measure and args.processes:
        return measure_processes(args)
    if args.measure:
        return measure(args)
    out = args.work / (f"state-{args.records}-{args.in_flight}{'-live' if args.kafka else ''}"
                       f"{'-commit' if args.commit else ''}-{args.engine}")
    topic = f"incr-bench-{args.records}-{int(time.time())}" if args.kafka else "orders"
    t = time.monotonic()
    processed = 1 - args.in_flight / args.records if args.in_flight is not None else 0.9
    if args.from_state:
        truth = copy_state(args.from_state, out)
        print(f"copied the state of {truth['records']:,} records in {time.monotonic() - t:.1f} s", flush=True)
    else:
        truth = generate(GenSpec(args.records, out, kafka=args.kafka, topic=topic, processed=processed))
        print(f"generated {truth['records']:,} records in {time.monotonic() - t:.1f} s", flush=True)
    if args.memory_limit:
        toml = out / "eoctl.toml"
        toml.write_text(toml.read_text() + f'\n[engine]\nmemory_limit = "{args.memory_limit}"\n')
    config = load_config(out / "eoctl.toml", overrides={"kind": args.engine})
    spark = start_session(config.engine) if args.engine == "spark" else None  # started once: one warm JVM

    rows = []
    found, seconds, scan, report, peak = timed(spark, config, AuditOptions(keep_index=True))
    t = time.monotonic()
    record(spark, config, report)
    seconds["index"] += time.monotonic() - t
    rows.append(("full, recorded (the first index)", scan, seconds, True, peak, None))
    total = truth["records"]
    for i, value in enumerate(float(f) for f in args.appends.split(",")):
        k = int(args.records * value) if value < 1 else int(value)
        share = f"{k / total:.1%}"
        tag = f"late{i}-{int(time.time())}"
        if args.kafka:
            append_live(args.kafka, topic, k, tag)
            add_tokens(out, k - 10, tag)
            add_sink_rows(out, k - 10, tag)
        else:
            append(out, k, f"appended-{tag}.parquet", tag)
        if args.commit:
            print(f"committed: the consumer processed {commit(out, k, tag):,} more records", flush=True)
        total += k
        if args.prepare_only:
            print(f"prepared: {out} ({total:,} records, {k:,} of them not indexed); measure it with --measure {out}")
            return 0
        inc_found, inc_seconds, inc_scan, inc_report, inc_peak = timed(
            spark, config, AuditOptions(since_last=True, keep_index=True))
        t = time.monotonic()
        record(spark, config, inc_report)
        inc_seconds["index"] += time.monotonic() - t
        full_found, full_seconds, full_scan, _, full_peak = timed(spark, config, AuditOptions())
        same = inc_found == full_found
        ratio = sum(inc_seconds.values()) / sum(full_seconds.values())
        rows.append((f"+{k:,} ({share}): --since-last, recorded", inc_scan, inc_seconds, same, inc_peak, ratio))
        rows.append((f"+{k:,} ({share}): full, not recorded", full_scan, full_seconds, same, full_peak, None))
        states = inc_scan.get("states", {})
        print(f"after +{k:,}: {total:,} records; same findings (every code, every evidence identity): {same}; "
              f"states kept: {sum(s['rows'] for s in states.values()):,} rows, "
              f"{sum(s['bytes'] for s in states.values()) / 2**20:.1f} MiB "
              f"({', '.join(n + ' ' + format(s['rows'], ',') for n, s in states.items())}); "
              f"EO503 read {inc_scan.get('effects', 'no sink with every_message')}", flush=True)
    if spark is not None:
        spark.stop()

    where = f"live topic {topic}, 8 partitions" if args.kafka else "archive, 8 partitions"
    print_table(args, f"{args.records:,} records generated ({where})", rows, args.memory_limit)
    return 0


def round_order(round_: int) -> tuple[str, str]:
    """The runs of a --measure round: --since-last first in odd rounds, the full audit first in
    even ones (the first run of a Spark session pays for the JVM's warm-up)."""
    return ("since-last", "full") if round_ % 2 else ("full", "since-last")


def measured_run(spark, config, kind: str) -> tuple[dict, dict[str, float], dict, object, int]:
    """One run of --measure, neither recorded (timed()): `kind` "since-last" keeps its part of the
    index, then deletes it (no history row names it: never read), or "full"."""
    from eoctl import incremental
    from eoctl.options import AuditOptions

    since = kind == "since-last"
    result = timed(spark, config, AuditOptions(since_last=True, keep_index=True) if since else AuditOptions())
    if since:
        incremental.discard(spark, incremental.run_folder(config, result[3].run["id"]))
    return result


def measure(args: argparse.Namespace) -> int:
    """--measure: the state --prepare-only left, --since-last beside a full audit (neither recorded)."""
    from eoctl.config import load_config
    from eoctl.engine.spark import start_session

    config = load_config(args.measure / "eoctl.toml", overrides={"kind": args.engine})
    spark = start_session(config.engine) if args.engine == "spark" else None
    rows = []
    for round_ in range(1, args.rounds + 1):
        runs = {}
        for kind in round_order(round_):
            runs[kind] = measured_run(spark, config, kind)
        (found, seconds, scan, _, peak), (full_found, full_seconds, full_scan, _, full_peak) = (
            runs["since-last"], runs["full"])
        same = found == full_found
        ratio = sum(seconds.values()) / sum(full_seconds.values())
        order = "first" if round_ % 2 else "second"
        rows += [(f"{round_}: --since-last ({order}; not recorded)", scan, seconds, same, peak, ratio),
                 (f"{round_}: full (not recorded)", full_scan, full_seconds, same, full_peak, None)]
    if spark is not None:
        spark.stop()
    print_table(args, f"the state of {args.measure}", rows, config.engine.memory_limit)
    return 0


def one_run(args: argparse.Namespace) -> int:
    """A child of --processes: one run of the state, started as the CLI starts it; its figures as
    one JSON line, the last of stdout."""
    import json

    from eoctl.config import load_config

    config = load_config(args.measure / "eoctl.toml", overrides={"kind": args.engine})
    spark, classes, t = None, "", time.monotonic()
    if args.engine == "spark":
        from eoctl.engine.spark import class_archive, start_session, stop_session

        spark = start_session(config.engine, record_classes=True)
        options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
        classes = "recorded" if class_archive.recording() else "mapped" if "SharedArchiveFile" in options else "none"
    session = time.monotonic() - t
    found, seconds, scan, _, _ = measured_run(spark, config, args.child)
    if spark is not None:
        class_archive.save(spark)  # what the CLI does after a run that succeeded
        stop_session(spark, end_jvm=True)
    # sorted by their text: a finding's `where` may be None beside another's text
    print(json.dumps({"found": sorted(([list(k), list(v)] for k, v in found.items()), key=json.dumps),
                      "seconds": seconds, "scan": {k: scan[k] for k in ("new_records", "indexed_records")},
                      "session": session, "classes": classes}))
    return 0


def measure_processes(args: argparse.Namespace) -> int:
    """--measure --processes: each run a process of this script (one_run), its time the process's."""
    import json

    from measure import run_measured

    from eoctl.config import load_config

    config = load_config(args.measure / "eoctl.toml", overrides={"kind": args.engine})
    rows = []
    for round_ in range(1, args.rounds + 1):
        runs = {}
        for kind in round_order(round_):
            argv = [sys.executable, __file__, "--measure", str(args.measure), "--engine", args.engine, "--child", kind]
            wall, peak, code, out, err = run_measured(argv + (["--codes", args.codes] if args.codes else []),
                                                      dict(os.environ), REPO)
            if code:
                print(f"the {kind} run failed (exit {code}):\n{err[-3000:]}", file=sys.stderr)
                return code
            runs[kind] = (json.loads(out.strip().splitlines()[-1]), wall, peak)
        (inc, inc_wall, inc_peak), (full, full_wall, full_peak) = runs["since-last"], runs["full"]
        same = inc["found"] == full["found"]
        ratio = sum(inc["seconds"].values()) / sum(full["seconds"].values())
        for name, run, wall, peak, share in ((f"{round_}: --since-last", inc, inc_wall, inc_peak, ratio),
                                             (f"{round_}: full", full, full_wall, full_peak, None)):
            if run["classes"]:
                name += f" (classes {run['classes']})"
            process = (wall, run["session"], inc_wall / full_wall if share is not None else None)
            rows.append((name, run["scan"], run["seconds"], same, peak, share, process))
    print_table(args, f"the state of {args.measure}, each run in a process of its own", rows,
                config.engine.memory_limit)
    return 0


def print_table(args: argparse.Namespace, what: str, rows: list, memory_limit: str | None) -> None:
    """One row per run: (name, scan, seconds per phase, same findings, peak RSS, share of the full
    audit's time[, (the process's seconds, its session's, its share of the full audit's process)])."""
    memory = f", memory_limit {memory_limit}" if memory_limit else ""
    print(f"\n{what}, engine {args.engine}{memory}, {os.cpu_count()} cores, checks {', '.join(CODES)}")
    head = "".join(f" {p + ' s':>15}" for p, _ in PHASES)
    processes = any(len(r) > 6 for r in rows)
    extra = f" {'session s':>9} {'process s':>9} {'of full':>8}" if processes else ""
    print(f"{'run':44} {'from source':>12} {'from index':>11}{head} {'total s':>8} {'of full':>8}{extra} "
          f"{'peak MiB':>9} {'same findings':>14}")
    for name, scan, seconds, same, peak, ratio, *process in rows:
        cells = "".join(f" {seconds[p]:15.1f}" for p, _ in PHASES)
        if process:
            wall, session, share = process[0]
            cells_extra = f" {session:9.1f} {wall:9.1f} {f'{share:.0%}' if share is not None else '':>8}"
        else:
            cells_extra = ""
        print(f"{name:44} {scan['new_records']:12,} {scan['indexed_records']:11,}{cells} "
              f"{sum(seconds.values()):8.1f} {f'{ratio:.0%}' if ratio is not None else '':>8}{cells_extra} "
              f"{peak / 2**20:9.0f} {str(same):>14}")


if __name__ == "__main__":
    sys.exit(main())
