"""Write the `basic` sample: a small, fault-free pipeline state that eoctl can read with no server.

    python samples/basic/generate.py

Endpoint `billing` consumes topic `orders` (archived to Parquet in the Kafka record schema) and
writes invoices to a Parquet sink. Of 20 order messages, 15 are processed (below the committed
offset; their effects are in the sink, their tokens are gone) and 5 are in flight (their tokens
are in the DuckDB token store). Deterministic: the same files on every run.
The chaos pipeline of samples/ (issue 3) records real faults; this sample only has to be valid.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
MESSAGES, COMMITTED = 20, 15


def main() -> None:
    for sub in ("topics", "sinks", "blobs"):
        shutil.rmtree(HERE / sub, ignore_errors=True)
    (HERE / "state.duckdb").unlink(missing_ok=True)
    (HERE / "topics" / "orders").mkdir(parents=True)
    (HERE / "sinks").mkdir()
    (HERE / "blobs" / "billing").mkdir(parents=True)
    (HERE / "blobs" / "billing" / "README").write_text("prepared invoices of endpoint billing go here\n")

    db = duckdb.connect(str(HERE / "state.duckdb"))
    db.execute(f"""
        create temp table msgs as
        select i,
               'order-' || lpad(i::varchar, 4, '0')                        as message_id,
               'tok-' || md5('orders/' || i::varchar)                      as token_id,
               'attempt-' || md5('shop/' || i::varchar)                    as attempt_id,
               timestamptz '2026-11-01 12:00:00+00' + i * interval 1 minute as ts
        from range({MESSAGES}) t(i)
    """)
    db.execute(f"""
        copy (
          select 'orders' as topic, 0::int as partition, i::bigint as "offset", ts as "timestamp",
                 encode('order-' || i::varchar) as key,
                 encode('{{"order_id": ' || i::varchar || ', "amount": ' || (10 + i)::varchar || '}}') as value,
                 [{{'key': 'eo-message-id', 'value': encode(message_id)}},
                  {{'key': 'eo-token-id', 'value': encode(token_id)}},
                  {{'key': 'eo-producer', 'value': encode('shop')}},
                  {{'key': 'eo-sequence', 'value': encode((i + 1)::varchar)}},
                  {{'key': 'eo-attempt-id', 'value': encode(attempt_id)}}] as headers
          from msgs order by i
        ) to '{HERE / "topics" / "orders" / "part-0.parquet"}' (format parquet)
    """)
    (HERE / "topics" / "orders" / "_committed_offsets.json").write_text(
        json.dumps({"orders": {"0": COMMITTED}}, indent=2) + "\n"
    )
    db.execute(f"""
        copy (
          select 'invoice-' || i::varchar as invoice_id, i as order_id, message_id as source_message_id,
                 10 + i as amount, ts + interval 5 second as applied_at
          from msgs where i < {COMMITTED} order by i
        ) to '{HERE / "sinks" / "invoices.parquet"}' (format parquet)
    """)
    db.execute("""
        create table eo_tokens (token_id varchar primary key, message_id varchar not null,
            destination varchar not null, attempt_id varchar not null, created_at timestamptz not null)
    """)
    db.execute(f"""
        insert into eo_tokens select token_id, message_id, 'billing', attempt_id, ts - interval 1 second
        from msgs where i >= {COMMITTED}
    """)
    db.execute("""
        create table eo_outbox (endpoint varchar not null, incoming_message_id varchar not null,
            incoming_token_id varchar not null, attempt_id varchar, outgoing json not null,
            tokens_committed_at timestamptz, created_at timestamptz not null,
            updated_at timestamptz not null, version bigint not null,
            primary key (endpoint, incoming_message_id))
    """)
    db.execute("""
        create table eo_intents (intent_id varchar primary key, endpoint varchar not null,
            incoming_message_id varchar not null, attempt_id varchar not null, kind varchar not null,
            ref varchar not null, created_at timestamptz not null)
    """)
    db.execute("checkpoint")
    db.close()


if __name__ == "__main__":
    main()
