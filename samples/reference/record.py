"""Record a chaos run as a sample that needs no server: topic archives, the DuckDB state, blobs,
the ledger and an eoctl.toml.

    python -m samples.reference.record --out samples/chaos [--bootstrap HOST:PORT] [--orders 40]

Without --bootstrap it starts the test bed's own Kafka broker (tests/helpers/kafka_broker.py; needs
Java and Maven) for the duration of the run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from samples.reference.chaos import default_plan, run
from samples.reference.spec import RunSpec

HEADER = """\
# The chaos sample: a recorded run of the reference pipeline (shop -> billing -> shipping) in which
# faults were injected on purpose; ledger.jsonl lists each one and the findings it must produce.
# Produced by: python -m samples.reference.record --out samples/chaos   (see README.md)
# Paths are relative to this file. Blob names in eo-blobs headers are relative to the producing
# endpoint's blob prefix.

"""


def duckdb_stores(path: str) -> str:
    """One [stores.*] entry per endpoint schema of one DuckDB file."""
    return "\n".join(f'[stores.{ep}]\ntype = "duckdb"\npath = "{path}"\nschema = "{ep}"\n'
                     for ep in ("shop", "billing", "shipping"))


def chaos_config(*, stores: str, blobs: str, orders_input: str, invoices_input: str) -> str:
    """The eoctl.toml of a reference-pipeline run; the inputs are the TOML lines of each [...input]
    table (topics and where they are: an archive or a live connection)."""
    return f"""{stores}
[endpoints.shop]
store = "shop"

[endpoints.billing]
store = "billing"
blobs = "{blobs}"

[endpoints.billing.input]
{orders_input}

[endpoints.shipping]
store = "shipping"

[endpoints.shipping.input]
{invoices_input}

[[endpoints.shipping.sinks]]
name = "shipments"
store = "shipping"
table = "shipments"
message_id_column = "source_message_id"
key_columns = ["order_id"]
value_columns = ["invoice_id", "source_message_id"]
watermark_column = "applied_at"  # set on every insert: --since-last reads only newer rows

[history]  # the sample keeps its findings history beside it (default: the user's state folder)
path = "eoctl-history.duckdb"
"""


#: a recorded run's audit defaults (eoctl.toml [audit])
RECORDED_AUDIT = '''
[audit]  # a recorded run: its blobs' file times are the checkout's (git sets them), not the run's,
grace = "0s"  # so age is no signal here; a pipeline's own config keeps the default 24h or its own
'''

CONFIG = HEADER + chaos_config(stores=duckdb_stores("state.duckdb"), blobs="blobs/billing",
                               orders_input='topics = ["orders"]\narchive = "topics/orders"',
                               invoices_input='topics = ["invoices"]\narchive = "topics/invoices"') + RECORDED_AUDIT


def archive_topic(bootstrap: str, topic: str, group: str, dest: Path, name: str) -> int:
    """Copy every record of `topic` into dest/part-0.parquet (Kafka record schema, topic renamed
    to `name`) and the group's committed offsets into dest/_committed_offsets.json."""
    import duckdb
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    rows, committed = [], {}
    for p in parts:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        if hi > lo:
            consumer.assign([TopicPartition(topic, p, lo)])
            while True:
                msg = consumer.poll(10)
                if msg is None or msg.error():
                    raise RuntimeError(f"cannot read {topic}/{p}: {msg and msg.error()}")
                _, ts = msg.timestamp()
                rows.append((name, p, msg.offset(), ts, msg.key(), msg.value(),
                             [{"key": k, "value": v} for k, v in msg.headers() or []]))
                if msg.offset() >= hi - 1:
                    break
    for tp in consumer.committed([TopicPartition(topic, p) for p in parts], timeout=30):
        if tp.offset >= 0:
            committed[str(tp.partition)] = tp.offset
    consumer.close()

    dest.mkdir(parents=True, exist_ok=True)
    db = duckdb.connect()
    db.execute("""create table r (topic varchar, "partition" integer, "offset" bigint, ts_ms bigint, key blob,
                  value blob, headers struct(key varchar, value blob)[])""")
    db.executemany("insert into r values (?, ?, ?, ?, ?, ?, ?)", rows)
    db.execute(f"""copy (select topic, "partition", "offset", to_timestamp(ts_ms / 1000.0) as "timestamp",
                   key, value, headers from r order by "partition", "offset")
                   to '{dest / 'part-0.parquet'}' (format parquet)""")
    (dest / "_committed_offsets.json").write_text(json.dumps({name: committed}, indent=2) + "\n")
    return len(rows)


def record(out: Path, bootstrap: str, orders: int) -> None:
    with tempfile.TemporaryDirectory(prefix="eoctl-record-") as tmp:
        spec = RunSpec("duckdb", str(Path(tmp) / "state.duckdb"), bootstrap, tmp, "rec-", orders, default_plan())
        ledger, kills = run(spec)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for endpoint, topic in (("billing", "orders"), ("shipping", "invoices")):
            n = archive_topic(bootstrap, spec.topics[topic], spec.group(endpoint), out / "topics" / topic, topic)
            print(f"{topic}: {n} records archived", file=sys.stderr)
        shutil.copy(spec.store_target, out / "state.duckdb")
        shutil.copytree(spec.blobs_dir, out / "blobs" / "billing")
        shutil.copy(spec.ledger_path, out / "ledger.jsonl")
        (out / "eoctl.toml").write_text(CONFIG)
        print(f"{orders} orders, {len(ledger.entries)} faults, worker killed {kills} times -> {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bootstrap")
    ap.add_argument("--orders", type=int, default=40)
    args = ap.parse_args(argv)
    if args.bootstrap:
        record(args.out, args.bootstrap, args.orders)
        return 0
    from tests.helpers.kafka_broker import KafkaBroker

    broker = KafkaBroker()
    broker.start()
    try:
        record(args.out, broker.bootstrap, args.orders)
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
