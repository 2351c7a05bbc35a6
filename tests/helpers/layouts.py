"""The recorded chaos sample laid out as real pipelines lay out their stores: every endpoint's rows in
one shared set of tables (DuckDB or PostgreSQL), or a store without intents tables."""

from __future__ import annotations

import uuid

from eoctl.config import load_config
from tests.helpers.chaos import ChaosRun

ENDPOINTS = ("shop", "billing", "shipping")
TABLES = ("eo_tokens", "eo_outbox", "eo_intents")

_POSTGRES_DDL = {
    "eo_tokens": "token_id varchar primary key, message_id varchar not null, destination varchar not null, "
                 "attempt_id varchar not null, created_at timestamptz not null",
    "eo_outbox": "endpoint varchar not null, incoming_message_id varchar not null, incoming_token_id varchar not null, "
                 "attempt_id varchar not null, outgoing jsonb not null, tokens_committed_at timestamptz, "
                 "created_at timestamptz not null, updated_at timestamptz not null, version bigint not null, "
                 "primary key (endpoint, incoming_message_id)",
    "eo_intents": "intent_id varchar primary key, endpoint varchar not null, incoming_message_id varchar not null, "
                  "attempt_id varchar not null, kind varchar not null, ref varchar not null, "
                  "created_at timestamptz not null",
    "shipments": "shipment_id varchar not null, order_id bigint not null, invoice_id varchar not null, "
                 "source_message_id varchar not null, applied_at timestamptz not null",
}


def _rows(chaos: ChaosRun, schema: str, table: str) -> list[tuple]:
    import duckdb

    with duckdb.connect(chaos.store_target, read_only=True) as db:
        return db.execute(f"select * from {schema}.{table}").fetchall()


def shared_tables(chaos: ChaosRun, kind: str, postgres=None) -> ChaosRun:
    """`chaos` (a recorded copy) with every endpoint's tokens, outbox and intents in ONE table each,
    in schema `shared` of the copy's DuckDB file or of a new PostgreSQL database; the sink moves
    along. The endpoint-per-schema tables are dropped, so nothing can read them by mistake."""
    import duckdb

    folder = chaos.config_path.parent
    if kind == "duckdb":
        with duckdb.connect(chaos.store_target) as db:
            db.execute("create schema shared")
            for table in TABLES:
                db.execute(f"create table shared.{table} as " + " union all ".join(
                    f"select * from {ep}.{table}" for ep in ENDPOINTS))
                for ep in ENDPOINTS:
                    db.execute(f"drop table {ep}.{table}")
        stores = ('[stores.shared]\ntype = "duckdb"\npath = "state.duckdb"\nschema = "shared"\n\n'
                  '[stores.sinks]\ntype = "duckdb"\npath = "state.duckdb"\nschema = "shipping"\n')
        environ: dict[str, str] = {}
    else:
        import psycopg

        name = f"shared_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
            conn.execute(f"create database {name}")
        with psycopg.connect(postgres.conninfo(dbname=name), autocommit=True) as conn:
            conn.execute("create schema shared")
            conn.execute("create schema sinks")
            for table in TABLES:
                conn.execute(f"create table shared.{table} ({_POSTGRES_DDL[table]})")
                rows = [r for ep in ENDPOINTS for r in _rows(chaos, ep, table)]
                _insert(conn, f"shared.{table}", rows, json_column=4 if table == "eo_outbox" else None)
            conn.execute(f"create table sinks.shipments ({_POSTGRES_DDL['shipments']})")
            _insert(conn, "sinks.shipments", _rows(chaos, "shipping", "shipments"))
        stores = "".join(
            f'[stores.{store}]\ntype = "postgres"\nport = {postgres.port}\ndatabase = "{name}"\nuser = "{postgres.user}"\n'
            f'password = "${{EOCTL_TEST_PGPASSWORD}}"\nschema = "{store}"\n\n' for store in ("shared", "sinks"))
        environ = {"EOCTL_TEST_PGPASSWORD": postgres.password}
    text = chaos.config_path.read_text()
    config = stores + "\n" + text[text.index("[endpoints.shop]"):]
    config = config.replace('store = "shipping"\ntable = "shipments"', 'store = "sinks"\ntable = "shipments"')
    for ep in ENDPOINTS:
        config = config.replace(f'store = "{ep}"\n', 'store = "shared"\n')
    path = folder / "eoctl-shared.toml"
    path.write_text(config)
    return ChaosRun(load_config(path, environ=environ), path, environ, chaos.ledger, kind,
                    chaos.store_target if kind == "duckdb" else postgres.conninfo(dbname=name), chaos.blobs)


def _insert(conn, table: str, rows: list[tuple], json_column: int | None = None) -> None:
    if not rows:
        return
    marks = ", ".join("cast(%s as jsonb)" if i == json_column else "%s" for i in range(len(rows[0])))
    with conn.cursor() as cur:
        cur.executemany(f"insert into {table} values ({marks})", rows)


def drop_intents(chaos: ChaosRun) -> ChaosRun:
    """`chaos` with its intents tables dropped: a pipeline without register-cleanup."""
    if chaos.store_kind == "duckdb":
        import duckdb

        with duckdb.connect(chaos.store_target) as db:
            for schema in (*ENDPOINTS, "shared"):
                db.execute(f"drop table if exists {schema}.eo_intents")
    else:
        import psycopg

        with psycopg.connect(chaos.store_target, autocommit=True) as conn:
            conn.execute("drop table if exists shared.eo_intents")
    return chaos
