"""The recorded chaos sample's state loaded into MySQL (a MariaDB server the tests start): one
database per endpoint, as the sample has one DuckDB schema per endpoint, with the types a MySQL
pipeline gives such tables (VARCHAR ids, DATETIME(6) in UTC, JSON outgoing messages)."""

from __future__ import annotations

import datetime as dt

from eoctl.config import load_config
from tests.helpers.chaos import ChaosRun

ENDPOINTS = ("shop", "billing", "shipping")
DDL = {
    "eo_tokens": "token_id varchar(255) primary key, message_id varchar(255) not null, destination varchar(255) "
                 "not null, attempt_id varchar(255) not null, created_at datetime(6) not null",
    "eo_outbox": "endpoint varchar(255) not null, incoming_message_id varchar(255) not null, incoming_token_id "
                 "varchar(255) not null, attempt_id varchar(255) not null, outgoing json not null, "
                 "tokens_committed_at datetime(6), created_at datetime(6) not null, updated_at datetime(6) not null, "
                 "version bigint not null, primary key (endpoint, incoming_message_id)",
    "eo_intents": "intent_id varchar(255) primary key, endpoint varchar(255) not null, incoming_message_id "
                  "varchar(255) not null, attempt_id varchar(255) not null, kind varchar(16) not null, "
                  "ref varchar(255) not null, created_at datetime(6) not null",
}


#: the id columns a pipeline may keep as a UUID's 16 bytes (BINARY(16), as UUID_TO_BIN makes them)
BINARY_IDS = {"eo_tokens": ("token_id", "message_id", "attempt_id"),
              "eo_outbox": ("incoming_message_id", "incoming_token_id", "attempt_id"),
              "eo_intents": ("intent_id", "incoming_message_id", "attempt_id")}


def _binary_ddl(table: str) -> str:
    ddl = DDL[table]
    for column in BINARY_IDS[table]:
        ddl = ddl.replace(f"{column} varchar(255)", f"{column} binary(16)")
    return ddl


def _value(v):
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return v


def mysql_copy(chaos: ChaosRun, server, password_env: str = "EOCTL_TEST_MYSQL_PASSWORD",
               binary_ids: bool = False) -> ChaosRun:
    """`chaos` (a recorded copy) with its tokens, outbox, intents and sink tables in MySQL databases
    `shop`, `billing` and `shipping` of `server` (made anew: the tests run one at a time), and a
    configuration (eoctl-mysql.toml beside the sample's) whose stores are type "mysql"; the password
    comes from the environment. The DuckDB file stays, unread; the run's store is the server
    (samples.reference.store.Store.open("mysql", ...) reads it as the sample's schemas).
    `binary_ids`: the protocol tables' ids (BINARY_IDS) kept as BINARY(16)."""
    import uuid

    import duckdb

    conn = server.connect()
    try:
        with duckdb.connect(chaos.store_target, read_only=True) as db, conn.cursor() as cur:
            for ep in ENDPOINTS:
                cur.execute(f"drop database if exists {ep}")
                cur.execute(f"create database {ep}")
                tables = [t for (t,) in db.execute("select table_name from information_schema.tables "
                                                   "where table_schema = ?", [ep]).fetchall()]
                for table in tables:
                    if table in DDL:
                        cur.execute(f"create table {ep}.{table} ({_binary_ddl(table) if binary_ids else DDL[table]})")
                    else:  # business tables: their columns as text, numbers and times
                        cols = db.execute(f"describe {ep}.{table}").fetchall()
                        types = {"BIGINT": "bigint", "INTEGER": "int", "DOUBLE": "double", "BOOLEAN": "boolean"}
                        ddl = ", ".join(f"{c} " + (types.get(t) or ("datetime(6)" if t.startswith("TIMESTAMP")
                                                                    else "varchar(255)")) for c, t, *_ in cols)
                        cur.execute(f"create table {ep}.{table} ({ddl})")
                    rows = db.execute(f"select * from {ep}.{table}").fetchall()
                    if binary_ids and table in BINARY_IDS:
                        names = [c for (c,) in db.execute(f"select column_name from (describe {ep}.{table})").fetchall()]
                        at = {names.index(c) for c in BINARY_IDS[table]}
                        rows = [tuple(uuid.UUID(v).bytes if i in at and v is not None else v for i, v in enumerate(r))
                                for r in rows]
                    if rows:
                        marks = ", ".join(["%s"] * len(rows[0]))
                        cur.executemany(f"insert into {ep}.{table} values ({marks})",
                                        [tuple(_value(v) for v in r) for r in rows])
    finally:
        conn.close()
    stores = "".join(
        f'[stores.{ep}]\ntype = "mysql"\nport = {server.port}\ndatabase = "{ep}"\nuser = "{server.user}"\n'
        f'password = "${{{password_env}}}"\n\n' for ep in ENDPOINTS)
    text = chaos.config_path.read_text()
    path = chaos.config_path.parent / "eoctl-mysql.toml"
    path.write_text(stores + text[text.index("[endpoints.shop]"):])
    environ = {password_env: server.password}
    target = f"mysql://{server.user}:{server.password}@127.0.0.1:{server.port}"
    return ChaosRun(load_config(path, environ=environ), path, environ, chaos.ledger, "mysql", target,
                    chaos.blobs, chaos.spec)
