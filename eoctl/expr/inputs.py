"""The tables checks read, as unbound Ibis tables an engine provides under these names.

- `records`: the working copy (eoctl.expr.records.records_table);
- `tokens`, `outbox`, `intents`: every audited endpoint's rows of that store table, with canonical
  column names (eoctl.stores.layout) and `ep`, eoctl's name of the endpoint they were read for;
- `log_starts`: each input partition's first offset (an archive's lowest, a topic's log start);
- `transactions`: partitions of live inputs with a hanging transaction (broker metadata);
- `sink_<i>`, `blobs_<i>`: a sink's rows and a blob prefix's listing (name, size, modified,
  actual_sha256), one per configured sink and blob prefix (Scope.sink_view, Scope.blob_view).

A check takes a Scope (what is configured and audited, which tables exist, the options) and
returns expressions; the engine names its views after these tables, so the SQL it runs is the one
a test can print.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ibis

if TYPE_CHECKING:
    import ibis.expr.types as ir

    from eoctl.config.model import Config, EndpointConfig, SinkConfig
    from eoctl.options import AuditOptions

#: canonical columns of each store table, as every engine gives them (ids as text, times in UTC)
STORE_SCHEMAS = {
    "tokens": {"token_id": "string", "message_id": "string", "destination": "string", "attempt_id": "string",
               "created_at": "timestamp"},
    "outbox": {"endpoint": "string", "incoming_message_id": "string", "incoming_token_id": "string",
               "attempt_id": "string", "outgoing": "string", "tokens_committed_at": "timestamp",
               "created_at": "timestamp", "updated_at": "timestamp", "version": "int64"},
    "intents": {"intent_id": "string", "endpoint": "string", "incoming_message_id": "string",
                "attempt_id": "string", "kind": "string", "ref": "string", "created_at": "timestamp"},
}
LOG_STARTS_SCHEMA = {"ep": "string", "topic": "string", "partition": "int32", "log_start": "int64"}
#: partitions of live inputs whose open transaction is older than the timeout (the broker's word)
TRANSACTIONS_SCHEMA = {"ep": "string", "topic": "string", "partition": "int32", "last_stable_offset": "int64",
                       "high_watermark": "int64", "first_unstable_timestamp": "timestamp", "age_seconds": "int64"}
#: lines of JSON archives that are not records (EO106), per endpoint
UNDECODABLE_SCHEMA = {"ep": "string", "file": "string", "line": "int64", "problem": "string", "text": "string"}
BLOB_LISTING_SCHEMA = {"name": "string", "size": "int64", "modified": "timestamp", "actual_sha256": "string"}


def store_table(kind: str) -> ir.Table:
    return ibis.table(ibis.schema({"ep": "string", **STORE_SCHEMAS[kind]}), name=kind)


def log_starts_table() -> ir.Table:
    return ibis.table(ibis.schema(LOG_STARTS_SCHEMA), name="log_starts")


def transactions_table() -> ir.Table:
    return ibis.table(ibis.schema(TRANSACTIONS_SCHEMA), name="transactions")


def undecodable_table() -> ir.Table:
    return ibis.table(ibis.schema(UNDECODABLE_SCHEMA), name="undecodable")


@dataclass
class Scope:
    """What one audit looks at: the configuration, its options, the audited endpoints, which of
    their store tables exist, and each sink's columns (an engine reads them before planning)."""

    config: Config
    options: AuditOptions
    #: (endpoint, kind) of every store table that exists
    tables: set[tuple[str, str]] = field(default_factory=set)
    #: (endpoint, sink name) -> the sink's schema
    sink_schemas: dict[tuple[str, str], ibis.Schema] = field(default_factory=dict)
    #: which rows of each store table are whose (eoctl.stores.layout.StoreLayout), once looked up
    layout: Any = None

    @property
    def endpoints(self) -> dict[str, EndpointConfig]:
        names = self.options.endpoints or list(self.config.endpoints)
        return {n: self.config.endpoint(n) for n in names}

    def has(self, endpoint: str, kind: str) -> bool:
        return (endpoint, kind) in self.tables

    def has_any(self, kind: str) -> bool:
        return any(k == kind for _, k in self.tables)

    def ago(self, delta: dt.timedelta) -> ir.TimestampScalar:
        """`delta` before the audit's now, as UTC wall time (what the working copy holds)."""
        return ibis.timestamp((self.options.now - delta).astimezone(dt.timezone.utc).replace(tzinfo=None))

    def sink_view(self, endpoint: str, sink: SinkConfig) -> str:
        sinks = [(n, s.name) for n, ep in self.endpoints.items() for s in ep.sinks]
        return f"sink_{sinks.index((endpoint, sink.name))}"

    def sink(self, endpoint: str, sink: SinkConfig) -> ir.Table:
        return ibis.table(self.sink_schemas[(endpoint, sink.name)], name=self.sink_view(endpoint, sink))

    def blob_view(self, endpoint: str) -> str:
        return f"blobs_{list(self.endpoints).index(endpoint)}"

    def blobs(self, endpoint: str) -> ir.Table:
        return ibis.table(ibis.schema(BLOB_LISTING_SCHEMA), name=self.blob_view(endpoint))

    def topics(self, endpoint: str) -> str:
        ep = self.endpoints[endpoint]
        return ", ".join(ep.input.topics) if ep.input else endpoint


@dataclass(frozen=True)
class Hit:
    """One check's evidence at one place: what the runner counts, samples and keeps."""

    code: str
    endpoint: str
    where: str
    evidence: ir.Table
