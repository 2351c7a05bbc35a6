"""The reference pipeline's transactional store: tokens, outbox, intents and business tables.

One database (a DuckDB file, the embedded default, or PostgreSQL) holds one schema per endpoint
(`shop`, `billing`, `shipping`), each with the tables of DESIGN.md §2:

    eo_tokens(token_id PK, message_id, destination, attempt_id, created_at)
    eo_outbox(endpoint, incoming_message_id, incoming_token_id, attempt_id, outgoing JSON,
              tokens_committed_at, created_at, updated_at, version)     PK (endpoint, incoming_message_id)
    eo_intents(intent_id PK, endpoint, incoming_message_id, attempt_id, kind, ref, created_at)

Business tables: `billing.invoices` (billing's state) and `shipping.shipments` (the sink).
SQL is written once with `%s` placeholders; DuckDB gets `?`.
"""

from __future__ import annotations

import datetime as dt
import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

ENDPOINTS = ("shop", "billing", "shipping")


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class ConcurrencyConflict(Exception):
    """Optimistic concurrency: the entry changed (or vanished) since this attempt loaded it."""


@dataclass
class OutboxEntry:
    endpoint: str
    incoming_message_id: str
    incoming_token_id: str
    attempt_id: str
    outgoing: list[dict[str, Any]]
    tokens_committed_at: dt.datetime | None
    version: int

    @property
    def has_tokens(self) -> bool:
        return self.tokens_committed_at is not None


class Store:
    """A thin DB-API wrapper: `tx()` opens one transaction; `q()` runs a statement in it."""

    def __init__(self, kind: str, conn: Any) -> None:
        self.kind = kind
        self.conn = conn

    # ------------------------------------------------------------------------------ plumbing

    @classmethod
    def open(cls, kind: str, target: str) -> Store:
        if kind == "duckdb":
            import duckdb

            return cls(kind, duckdb.connect(target))
        if kind == "postgres":
            import psycopg

            return cls(kind, psycopg.connect(target, autocommit=True))
        if kind == "mysql":  # target: mysql://user:password@host:port (a database per endpoint)
            from urllib.parse import unquote, urlsplit

            import pymysql

            url = urlsplit(target)
            return cls(kind, pymysql.connect(host=url.hostname, port=url.port, user=unquote(url.username or ""),
                                             password=unquote(url.password or ""), autocommit=True,
                                             init_command="SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, "
                                                          "',ANSI_QUOTES'), time_zone = '+00:00'"))
        raise ValueError(f"unknown store kind {kind!r}")

    def close(self) -> None:
        self.conn.close()

    def q(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        if self.kind == "duckdb":
            cur = self.conn.execute(sql.replace("%s", "?"), list(params))
        elif self.kind == "mysql":
            cur = self.conn.cursor()
            cur.execute(sql, tuple(params) or None)
        else:
            cur = self.conn.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []

    @contextmanager
    def tx(self) -> Iterator[Store]:
        if self.kind == "duckdb":
            self.conn.execute("begin transaction")
            try:
                yield self
            except BaseException:
                self.conn.execute("rollback")
                raise
            self.conn.execute("commit")
        else:
            with self.conn.transaction():
                yield self

    # -------------------------------------------------------------------------------- schema

    def create_schema(self) -> None:
        json_type = "json" if self.kind == "duckdb" else "jsonb"
        with self.tx():
            for ep in ENDPOINTS:
                self.q(f"create schema if not exists {ep}")
                self.q(f"""create table if not exists {ep}.eo_tokens (
                    token_id varchar primary key, message_id varchar not null, destination varchar not null,
                    attempt_id varchar not null, created_at timestamptz not null)""")
                self.q(f"""create table if not exists {ep}.eo_outbox (
                    endpoint varchar not null, incoming_message_id varchar not null,
                    incoming_token_id varchar not null, attempt_id varchar not null, outgoing {json_type} not null,
                    tokens_committed_at timestamptz, created_at timestamptz not null,
                    updated_at timestamptz not null, version bigint not null,
                    primary key (endpoint, incoming_message_id))""")
                self.q(f"""create table if not exists {ep}.eo_intents (
                    intent_id varchar primary key, endpoint varchar not null, incoming_message_id varchar not null,
                    attempt_id varchar not null, kind varchar not null, ref varchar not null,
                    created_at timestamptz not null)""")
            self.q("""create table if not exists billing.invoices (
                order_id bigint primary key, invoice_id varchar not null, amount bigint not null,
                blob_name varchar not null, source_message_id varchar not null, attempt_id varchar not null)""")
            # The sink: no unique constraint on source_message_id, so a double apply is visible.
            self.q("""create table if not exists shipping.shipments (
                shipment_id varchar not null, order_id bigint not null, invoice_id varchar not null,
                source_message_id varchar not null, applied_at timestamptz not null)""")

    # -------------------------------------------------------------------------------- tokens

    def create_tokens(self, destination: str, tokens: list[tuple[str, str, str]]) -> None:
        """tokens: (token_id, message_id, attempt_id) created in the destination's token store."""
        with self.tx():
            for token_id, message_id, attempt_id in tokens:
                self.q(f"insert into {destination}.eo_tokens values (%s, %s, %s, %s, %s)",
                       (token_id, message_id, destination, attempt_id, now()))

    def has_token(self, endpoint: str, token_id: str) -> bool:
        return bool(self.q(f"select 1 from {endpoint}.eo_tokens where token_id = %s", (token_id,)))

    def remove_token(self, endpoint: str, token_id: str) -> None:
        with self.tx():
            self.q(f"delete from {endpoint}.eo_tokens where token_id = %s", (token_id,))

    # -------------------------------------------------------------------------------- outbox

    def load_entry(self, endpoint: str, incoming_message_id: str) -> OutboxEntry | None:
        rows = self.q(
            f"select incoming_token_id, attempt_id, outgoing, tokens_committed_at, version "
            f"from {endpoint}.eo_outbox where endpoint = %s and incoming_message_id = %s",
            (endpoint, incoming_message_id),
        )
        if not rows:
            return None
        token, attempt, outgoing, committed_at, version = rows[0]
        outgoing = json.loads(outgoing) if isinstance(outgoing, str) else outgoing
        return OutboxEntry(endpoint, incoming_message_id, token, attempt, outgoing, committed_at, version)

    def insert_entry(self, entry: OutboxEntry) -> None:
        """Insert a new entry; a concurrent attempt that inserted first makes this a conflict."""
        ts = now()
        try:
            self.q(
                f"insert into {entry.endpoint}.eo_outbox values (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (entry.endpoint, entry.incoming_message_id, entry.incoming_token_id, entry.attempt_id,
                 json.dumps(entry.outgoing), None, ts, ts, 1),
            )
        except Exception as exc:  # unique violation: another attempt committed this entry first
            if "constraint" in str(exc).lower() or "duplicate" in str(exc).lower():
                raise ConcurrencyConflict(str(exc)) from None
            raise
        entry.version = 1

    def commit_tokens(self, entry: OutboxEntry) -> None:
        """The token checkpoint: persist the outgoing token ids with a version check."""
        ts = now()
        rows = self.q(
            f"update {entry.endpoint}.eo_outbox set outgoing = %s, tokens_committed_at = %s, updated_at = %s, "
            f"version = version + 1 where endpoint = %s and incoming_message_id = %s and version = %s "
            f"returning version",
            (json.dumps(entry.outgoing), ts, ts, entry.endpoint, entry.incoming_message_id, entry.version),
        )
        if not rows:
            raise ConcurrencyConflict(f"entry {entry.incoming_message_id} changed since version {entry.version}")
        entry.version, entry.tokens_committed_at = rows[0][0], ts

    def delete_entry(self, entry: OutboxEntry) -> None:
        rows = self.q(
            f"delete from {entry.endpoint}.eo_outbox where endpoint = %s and incoming_message_id = %s "
            f"and version = %s returning version",
            (entry.endpoint, entry.incoming_message_id, entry.version),
        )
        if not rows:
            raise ConcurrencyConflict(f"entry {entry.incoming_message_id} changed since version {entry.version}")

    # ------------------------------------------------------------------------------- intents

    def register_intent(self, endpoint: str, incoming_message_id: str, attempt_id: str, kind: str, ref: str) -> None:
        import uuid

        with self.tx():
            self.q(f"insert into {endpoint}.eo_intents values (%s, %s, %s, %s, %s, %s, %s)",
                   (str(uuid.uuid4()), endpoint, incoming_message_id, attempt_id, kind, ref, now()))

    def intents_of(self, endpoint: str, incoming_message_id: str) -> list[tuple[str, str, str]]:
        """(attempt_id, kind, ref) of every intent registered while processing this message."""
        return self.q(
            f"select attempt_id, kind, ref from {endpoint}.eo_intents where incoming_message_id = %s "
            f"order by created_at",
            (incoming_message_id,),
        )

    def delete_intents(self, endpoint: str, incoming_message_id: str) -> None:
        self.q(f"delete from {endpoint}.eo_intents where incoming_message_id = %s", (incoming_message_id,))
