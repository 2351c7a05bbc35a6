"""A scalable generator of pipeline states with a chosen mix of anomalies and their ground truth.

    python -m samples.generator --records 10000000 --out /tmp/gen10m
    python -m samples.generator --records 1000000 --out /tmp/gen1m --kafka 127.0.0.1:9092 --topic orders

One endpoint, `billing`, consumes topic `orders` from a producer `shop` (whose prepared blobs the
records publish), keeps its tokens, outbox and intents in a DuckDB file, and writes its effects to
a Parquet sink.
Everything is built by DuckDB SQL over `range(N)` (vectorized; nothing is looped per record in
Python but the few blob files), written as a topic archive or produced to a live Kafka topic.

Ground truth: `ground_truth.json` has, per finding code, the count of what was injected, and
`truth/<CODE>.parquet` the identifiers (message id, token id, blob name, key or partition).
Units: EO101 per redelivered copy, EO102 per message id, EO103 per (producer, sequence), EO104 per
gap, EO105 per record, EO201/EO203 per token, EO202/EO402/EO403 per record, EO204 per partition,
EO301 per entry, EO302 per ghost message, EO303 per sent outbox row past the retention (billing's
outbox keeps sent rows: sent_at, a week), EO401 per blob, EO501 per source message id, EO502 per key, EO503 per
processed message without an invoice (the sink has every_message).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

#: default anomaly rates (fraction of base records); every code of the catalog that data can show
DEFAULT_MIX = {
    "EO101": 0.002, "EO102": 0.0005, "EO103": 0.0005, "EO104": 0.0005, "EO105": 0.0005,
    "EO201": 0.001, "EO202": 0.0005, "EO203": 0.001, "EO301": 0.0002, "EO302": 0.0002,
    "EO303": 0.0002, "EO401": 0.0002, "EO402": 0.0002, "EO403": 0.0002, "EO501": 0.001, "EO502": 0.0005,
    "EO503": 0.0005,
}
# Codes drawn per base record, in this order, over disjoint slices of one uniform draw.
_RECORD_CODES = ("EO101", "EO102", "EO103", "EO104", "EO202", "EO203", "EO301", "EO302",
                 "EO402", "EO403", "EO501", "EO502", "EO503")
# Codes that add things no base record owns (counts are rate * N).
_EXTRA_CODES = ("EO105", "EO201", "EO303", "EO401")
#: billing's outbox keeps sent rows (sent_at) this long: EO303 past it; as many young sent rows as old
RETENTION = dt.timedelta(days=7)

NOW = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.timezone.utc)
OLD = NOW - dt.timedelta(days=3)  # older than any sane grace period
TOPIC, PRODUCER, ENDPOINT = "orders", "shop", "billing"


@dataclass
class GenSpec:
    records: int
    out: Path
    partitions: int = 8
    processed: float = 0.9  # fraction of each partition below the committed offset
    blob_every: int = 1000  # one record in this many publishes a prepared blob
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    seed: int = 7
    log_start_gap: bool = False  # EO204: partition 0's committed offset below its log start
    kafka: str | None = None
    topic: str = TOPIC


def _check(spec: GenSpec) -> None:
    unknown = set(spec.mix) - set(DEFAULT_MIX)
    if unknown:
        raise ValueError(f"unknown codes in mix: {', '.join(sorted(unknown))}")
    if sum(spec.mix.get(c, 0) for c in _RECORD_CODES) >= 1:
        raise ValueError("the per-record rates must add up to less than 1")


def _headers_sql(with_blob: str) -> str:
    h = "{'key': '%s', 'value': encode(%s)}"
    base = ", ".join([h % ("eo-message-id", "message_id"), h % ("eo-token-id", "token_id"),
                      h % ("eo-producer", "producer"), h % ("eo-sequence", "cast(sequence as varchar)"),
                      h % ("eo-attempt-id", "attempt_id"), h % ("eo-causation-id", "causation_id")])
    blob = h % ("eo-blobs", """'[{"uri": "' || blob_name || '", "sha256": "' || blob_sha || '"}]'""")
    return f"case when {with_blob} then [{base}, {blob}] else [{base}] end"


def generate(spec: GenSpec) -> dict:
    """Write the state and its ground truth under spec.out; returns the ground truth."""
    import duckdb

    _check(spec)
    t0 = time.monotonic()
    shutil.rmtree(spec.out, ignore_errors=True)
    for sub in ("topics/orders", "sinks/invoices", "blobs/shop", "truth"):
        (spec.out / sub).mkdir(parents=True)
    db = duckdb.connect(str(spec.out / "state.duckdb"))
    db.execute("set preserve_insertion_order = false")
    N, P = spec.records, spec.partitions

    # --- base records: partition i % P, offset i // P, committed offset per partition ----------
    bounds, acc = [], 0.0
    for code in _RECORD_CODES:
        acc += spec.mix.get(code, 0.0)
        bounds.append((code, acc))
    draw = f"(hash(i, {spec.seed}) % 1000000000) / 1e9"
    case = "case " + " ".join(f"when u < {b!r} then '{c}'" for c, b in bounds) + " end"
    db.execute(f"""
        create temp table committed as
        select p as "partition", cast(floor((({N} - p + {P} - 1) // {P}) * {spec.processed}) as bigint) as committed
        from range({P}) t(p)""")
    db.execute(f"""
        create temp table base as
        with d as (select i, {draw} as u from range({N}) t(i))
        select i, cast(i % {P} as integer) as "partition", i // {P} as "offset", {case} as code
        from d""")
    db.execute(f"""
        create temp table recs as
        select b.i, b."partition", b."offset", b.code, b."offset" < c.committed as processed,
               'm-' || b.i as message_id, 't-' || b.i || '-' || {spec.seed} as token_id,
               '{PRODUCER}' as producer,
               b.i + 1 + sum(case when b.code = 'EO104' then 1 else 0 end) over (order by b.i) as sequence,
               'a-' || b.i as attempt_id, 'req-' || b.i as causation_id,
               timestamptz '{OLD.isoformat()}' + b.i * interval 1 millisecond as ts,
               b.i % {spec.blob_every} = 0 or b.code in ('EO402', 'EO403') as has_blob,
               'b-' || b.i || '.txt' as blob_name
        from base b join committed c using ("partition")""")
    # Anomalies that need a status: a silent loss is in flight; leaked tokens and stuck entries
    # belong to processed records. Draws that land on the wrong status are plain records.
    db.execute("""update recs set code = null where (code = 'EO202' and processed)
                  or (code in ('EO203', 'EO301', 'EO501', 'EO502', 'EO503', 'EO101', 'EO102') and not processed)""")

    # --- extra records appended at the end of their partition (so they are in flight) ---------
    db.execute(f"""
        create temp table extras as
        select r."partition", r.code, r.message_id,
               case when r.code = 'EO101' then r.token_id else r.token_id || '-' || r.code end as token_id,
               r.producer, r.sequence, r.attempt_id, r.causation_id, false as has_blob, r.blob_name, r.ts
        from recs r where r.code in ('EO101', 'EO102')
        union all
        -- a ghost was sent before its committed sibling (the attempt crashed before committing)
        select r."partition", r.code, r.message_id || '-' || r.code, r.token_id || '-' || r.code, r.producer,
               r.sequence, r.attempt_id || '-' || r.code,
               -- a reused sequence comes from another incoming message; a ghost from the same one
               case when r.code = 'EO302' then r.causation_id else r.causation_id || '-' || r.code end,
               false, r.blob_name,
               case when r.code = 'EO302' then r.ts - interval 1 second else r.ts end
        from recs r where r.code in ('EO103', 'EO302')""")
    n_noheader = round(spec.mix.get("EO105", 0) * N)
    db.execute(f"""
        create temp table all_recs as
        select "partition", "offset", message_id, token_id, producer, sequence, attempt_id, causation_id,
               has_blob, blob_name, false as no_headers, ts from recs
        union all
        select e."partition", m.next_offset + row_number() over (partition by e."partition" order by e.message_id) - 1,
               e.message_id, e.token_id, e.producer, e.sequence, e.attempt_id, e.causation_id, e.has_blob,
               e.blob_name, false, e.ts
        from extras e join (select "partition", max("offset") + 1 as next_offset from recs group by 1) m using ("partition")
        """)
    if n_noheader:
        db.execute(f"""
            insert into all_recs
            select cast(j % {P} as integer), m.next_offset + j // {P}, 'noheader-' || j, null, null, null, null, null,
                   false, null, true, timestamptz '{OLD.isoformat()}'
            from range({n_noheader}) t(j)
            join (select "partition", max("offset") + 1 as next_offset from all_recs group by 1) m
              on m."partition" = j % {P}""")

    # --- topic archive --------------------------------------------------------------------------
    blob_sha = "sha256(case when code = 'EO403' then 'tampered ' else 'invoice ' end || i)"
    db.execute(f"""create temp table blob_meta as select blob_name, {blob_sha} as blob_sha, code
                   from recs where has_blob""")
    archive_sql = f"""
        select '{spec.topic}' as topic, a."partition", a."offset",
               a.ts as "timestamp",
               encode(coalesce(a.message_id, '')) as key,
               encode('{{"order_id": "' || coalesce(a.message_id, '') || '"}}') as value,
               case when a.no_headers then [] else {_headers_sql('a.has_blob')} end as headers
        from all_recs a left join blob_meta using (blob_name)"""
    if spec.kafka is None:
        db.execute(f"""copy ({archive_sql}) to '{spec.out / "topics/orders"}'
                       (format parquet, per_thread_output true, overwrite_or_ignore true)""")

    committed = {str(p): c for p, c in db.execute('select "partition", committed from committed').fetchall()}
    log_start = {}
    if spec.log_start_gap and spec.kafka is None:
        # partition 0's first records were lost to retention before the consumer committed them
        committed["0"] = 0
        log_start = {"0": 1}
        db.execute(f"""copy ({archive_sql} where a."partition" <> 0 or a."offset" >= 1)
                       to '{spec.out / "topics/orders"}' (format parquet, per_thread_output true,
                       overwrite_or_ignore true, filename_pattern 'trimmed_{{i}}')""")
        for f in (spec.out / "topics/orders").glob("data_*.parquet"):
            f.unlink()
    (spec.out / "topics/orders/_committed_offsets.json").write_text(json.dumps({spec.topic: committed}))

    # --- store: tokens, outbox, intents ---------------------------------------------------------
    db.execute("create schema billing")
    db.execute("""create table billing.eo_tokens (token_id varchar primary key, message_id varchar not null,
                  destination varchar not null, attempt_id varchar not null, created_at timestamptz not null)""")
    n_orphans = round(spec.mix.get("EO201", 0) * N)
    db.execute(f"""
        insert into billing.eo_tokens
        select token_id, message_id, '{ENDPOINT}', attempt_id, timestamptz '{NOW.isoformat()}' - interval 1 minute
        from recs where not processed and coalesce(code, '') <> 'EO202'
        union all  -- copies under new tokens are in flight with their token; a plain redelivery has none
        select token_id, message_id, '{ENDPOINT}', attempt_id, timestamptz '{NOW.isoformat()}' - interval 1 minute
        from extras where code <> 'EO101'
        union all
        select token_id, message_id, '{ENDPOINT}', attempt_id, timestamptz '{OLD.isoformat()}'
        from recs where code in ('EO203', 'EO301')
        union all
        select 'orphan-' || j, 'gone-' || j, '{ENDPOINT}', 'dead-' || j, timestamptz '{OLD.isoformat()}'
        from range({n_orphans}) t(j)""")
    db.execute("""create table billing.eo_outbox (endpoint varchar not null, incoming_message_id varchar not null,
                  incoming_token_id varchar not null, attempt_id varchar not null, outgoing json not null,
                  tokens_committed_at timestamptz, created_at timestamptz not null, updated_at timestamptz not null,
                  version bigint not null, sent_at timestamptz, primary key (endpoint, incoming_message_id))""")
    db.execute(f"""
        insert into billing.eo_outbox
        select '{ENDPOINT}', message_id, token_id, attempt_id, '[]', null,
               timestamptz '{OLD.isoformat()}', timestamptz '{OLD.isoformat()}', 1, null
        from recs where code = 'EO301'""")
    # sent rows the outbox keeps: past the retention (EO303), and as many within it (by the clock of
    # the generation: an audit within the retention's week after it counts them young)
    n_sent = round(spec.mix.get("EO303", 0) * N)
    past, young = NOW - RETENTION - dt.timedelta(days=3), dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
    for prefix, at in (("sent-old-", past), ("sent-young-", young)):
        db.execute(f"""
            insert into billing.eo_outbox
            select '{ENDPOINT}', '{prefix}' || j, '{prefix}tok-' || j, '{prefix}att-' || j, '[]',
                   timestamptz '{at.isoformat()}', timestamptz '{at.isoformat()}', timestamptz '{at.isoformat()}', 2,
                   timestamptz '{at.isoformat()}'
            from range({n_sent}) t(j)""")
    db.execute("""create table billing.eo_intents (intent_id varchar primary key, endpoint varchar not null,
                  incoming_message_id varchar not null, attempt_id varchar not null, kind varchar not null,
                  ref varchar not null, created_at timestamptz not null)""")
    db.execute(f"""
        insert into billing.eo_intents
        select 'intent-orphan-' || j, '{ENDPOINT}', 'gone-' || j, 'dead-' || j, 'token', 'orphan-' || j,
               timestamptz '{OLD.isoformat()}'
        from range({n_orphans}) t(j) where j % 2 = 0""")

    # --- sink -------------------------------------------------------------------------------------
    sink_sql = """
        select order_id, source_message_id, amount,
               timestamp '2026-01-01' + to_microseconds(row_number() over ()) as applied_at
        from (select i as order_id, message_id as source_message_id, 100 + i % 50 as amount from recs
              where processed and coalesce(code, '') <> 'EO503'  -- EO503: processed, its effect lost
              union all select i, message_id, 100 + i % 50 from recs where code = 'EO501'
              union all select i, message_id || '-conflict', 999 from recs where code = 'EO502')"""
    db.execute(f"""copy ({sink_sql}) to '{spec.out / "sinks/invoices"}'
                   (format parquet, per_thread_output true, overwrite_or_ignore true)""")

    # --- blobs (bounded: one per blob_every records, plus orphans) --------------------------------
    for (i, name, code) in db.execute(
            "select i, blob_name, code from recs where has_blob and coalesce(code, '') <> 'EO402'").fetchall():
        (spec.out / "blobs/shop" / name).write_text(f"invoice {i}")
    old = OLD.timestamp()
    for j in range(round(spec.mix.get("EO401", 0) * N)):
        path = spec.out / "blobs/shop" / f"orphan-{j}.txt"
        path.write_text(f"garbage {j}")
        os.utime(path, (old, old))

    # --- live Kafka -------------------------------------------------------------------------------
    if spec.kafka is not None:
        _produce(db, archive_sql, spec, committed)

    # --- ground truth -------------------------------------------------------------------------------
    truth_sql = {
        "EO101": "select message_id, token_id from extras where code = 'EO101'",
        "EO102": "select message_id from recs where code = 'EO102'",
        # a ghost reuses the sequence its committed sibling carries, as in the reference pipeline
        "EO103": "select producer, sequence from recs where code in ('EO103', 'EO302')",
        "EO104": "select producer, sequence - 1 as missing_sequence from recs where code = 'EO104'",
        "EO105": "select message_id from all_recs where no_headers",
        "EO201": f"select 'orphan-' || j as token_id from range({n_orphans}) t(j)",
        "EO202": "select message_id from recs where code = 'EO202'",
        "EO203": "select token_id from recs where code = 'EO203'",
        "EO301": "select message_id as incoming_message_id from recs where code = 'EO301'",
        "EO302": "select message_id from extras where code = 'EO302'",
        "EO303": f"select 'sent-old-' || j as incoming_message_id from range({n_sent}) t(j)",
        "EO401": f"select 'orphan-' || j || '.txt' as blob_name from range({round(spec.mix.get('EO401', 0) * N)}) t(j)",
        "EO402": "select message_id, blob_name from recs where code = 'EO402'",
        "EO403": "select message_id, blob_name from recs where code = 'EO403'",
        "EO501": "select message_id as source_message_id from recs where code = 'EO501'",
        "EO502": "select i as order_id from recs where code = 'EO502'",
        "EO503": "select message_id from recs where code = 'EO503'",
    }
    truth: dict = {"records": db.execute("select count(*) from all_recs").fetchone()[0], "base_records": N,
                   "partitions": P, "committed_offsets": committed, "codes": {}}
    for code, sql in truth_sql.items():
        path = spec.out / "truth" / f"{code}.parquet"
        db.execute(f"copy ({sql}) to '{path}' (format parquet)")
        truth["codes"][code] = {"count": db.execute(f"select count(*) from ({sql})").fetchone()[0],
                                "ids": f"truth/{code}.parquet"}
    if log_start:
        truth["codes"]["EO204"] = {"count": 1, "partitions": [0], "log_start": log_start}
    truth["seconds"] = round(time.monotonic() - t0, 1)
    db.execute("checkpoint")
    db.close()
    (spec.out / "ground_truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    (spec.out / "eoctl.toml").write_text(_config(spec))
    return truth


def _produce(db, archive_sql: str, spec: GenSpec, committed: dict[str, int]) -> None:
    """Produce the records to a fresh topic in offset order, then commit the endpoint's group."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": spec.kafka})
    for f in admin.create_topics([NewTopic(spec.topic, spec.partitions, 1)]).values():
        f.result(60)
    producer = Producer({"bootstrap.servers": spec.kafka, "enable.idempotence": True, "linger.ms": 20,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    cur = db.execute(f'select "partition", key, value, headers from ({archive_sql}) order by "partition", "offset"')
    while batch := cur.fetchmany(50_000):
        for partition, key, value, headers in batch:
            while True:
                try:
                    producer.produce(spec.topic, value=value, key=key, partition=partition,
                                     headers=[(h["key"], h["value"]) for h in headers])
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("records could not all be delivered")
    consumer = Consumer({"bootstrap.servers": spec.kafka, "group.id": ENDPOINT})
    consumer.commit(offsets=[TopicPartition(spec.topic, int(p), o) for p, o in committed.items()], asynchronous=False)
    consumer.close()


def _config(spec: GenSpec) -> str:
    if spec.kafka:
        source = (f'kafka = "main"\ngroup = "{ENDPOINT}"\n\n[kafka.main]\nbootstrap_servers = "{spec.kafka}"\n')
    else:
        source = 'archive = "topics/orders"\n'
    return f"""# Generated by: python -m samples.generator --records {spec.records} (see ground_truth.json)
[stores.billing]
type = "duckdb"
path = "state.duckdb"
schema = "billing"

[endpoints.shop]  # the producer: it prepares the blobs its records publish
blobs = "blobs/shop"

[endpoints.billing]
store = "billing"

[endpoints.billing.outbox]  # it keeps a row once sent (sent_at set) for a week
sent_column = "sent_at"
retention = "7d"

[[endpoints.billing.sinks]]
name = "invoices"
format = "parquet"
path = "sinks/invoices"
message_id_column = "source_message_id"
key_columns = ["order_id"]
value_columns = ["source_message_id", "amount"]
watermark_column = "applied_at"
every_message = true  # every processed message writes an invoice: one without is EO503

[endpoints.billing.input]
topics = ["{spec.topic}"]
{source}
[history]  # beside the state (default: the user's state folder)
path = "eoctl-history.duckdb"
"""


def _parse_mix(text: str) -> dict[str, float]:
    mix = dict(DEFAULT_MIX)
    for part in filter(None, text.split(",")):
        code, _, rate = part.partition("=")
        mix[code.strip().upper()] = float(rate)
    return mix


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--processed", type=float, default=0.9)
    ap.add_argument("--blob-every", type=int, default=1000)
    ap.add_argument("--mix", default="", help="CODE=RATE,... overriding the default rates (0 disables)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--log-start-gap", action="store_true", help="inject EO204 (archive only)")
    ap.add_argument("--kafka", help="bootstrap servers: produce to a live topic instead of an archive")
    ap.add_argument("--topic", default=TOPIC)
    args = ap.parse_args(argv)
    truth = generate(GenSpec(args.records, args.out, args.partitions, args.processed, args.blob_every,
                             _parse_mix(args.mix), args.seed, args.log_start_gap, args.kafka, args.topic))
    counts = ", ".join(f"{c}={v['count']}" for c, v in truth["codes"].items())
    print(f"{truth['records']} records in {truth['seconds']}s -> {args.out}\n{counts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
