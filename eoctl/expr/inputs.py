"""The tables checks read, as unbound Ibis tables an engine provides under these names.

- `records`: the working copy (eoctl.expr.records.records_table);
- `tokens`, `outbox`, `intents`: every audited endpoint's rows of that store table, with canonical
  column names (eoctl.stores.layout) and `ep`, eoctl's name of the endpoint they were read for;
- `log_starts`: each input partition's first offset (an archive's lowest, a topic's log start);
- `transactions`: partitions of live inputs with a hanging transaction (broker metadata);
- `state_<name>`: continuing an incremental audit, a state the recorded run kept
  (eoctl.expr.incremental);
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


def state_view(name: str) -> str:
    """The view of a state the recorded run kept (eoctl.expr.incremental)."""
    return f"state_{name}"


def state_table(name: str, schema) -> ir.Table:
    return ibis.table(ibis.schema(schema), name=state_view(name))


def log_starts_table() -> ir.Table:
    return ibis.table(ibis.schema(LOG_STARTS_SCHEMA), name="log_starts")


def transactions_table() -> ir.Table:
    return ibis.table(ibis.schema(TRANSACTIONS_SCHEMA), name="transactions")


def undecodable_table() -> ir.Table:
    return ibis.table(ibis.schema(UNDECODABLE_SCHEMA), name="undecodable")


def check_sink_columns(config: Config, sink: SinkConfig, columns: list[str]) -> None:
    """A Misconfigured (exit 6) naming the first configured column the sink lacks, the key that
    names it, and the columns it has: the sentence of a store table's (stores.layout.missing_column)."""
    from eoctl.errors import Misconfigured
    from eoctl.stores.layout import missing_column

    wrong = missing_column(f"sink {sink.name}", columns,
                           [(f"{config.sink_key(sink)}.{key}", needed) for key, needed in sink.columns_by_key])
    if wrong is not None:
        raise Misconfigured(wrong)


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
    #: tables whose owner column holds other names but never the endpoint's (StoreLayout.misnamed):
    #: their endpoints are not judged by any check (a configuration problem, not a finding); a
    #: misnamed outbox leaves no endpoint judged (eoctl.stores.layout.refused)
    misnamed: list[Any] = field(default_factory=list)
    #: (endpoint, sink name) -> the view a check reads instead of the sink's rows (an incremental
    #: audit's EO501 and EO502: eoctl.expr.sink_states)
    narrowed_sinks: dict[tuple[str, str], str] = field(default_factory=dict)
    #: EO503 reads the kept tables of the messages without a row and of each hour's processed
    #: messages (a run that keeps states or continues: eoctl.expr.incremental)
    kept_effects: bool = False
    #: the engine kept pending_outgoing_rows as a table (eoctl.expr.outbox.PENDING_OUTGOING)
    kept_pending: bool = False
    #: the engine read the largest pending entries' messages into STREAMED_OUTGOING (eoctl.expr.outbox)
    streamed_outgoing: bool = False

    @property
    def selected(self) -> list[str]:
        """The endpoints the run reads (--endpoint, default all), judged or not: views are named
        by their place in it."""
        return self.options.endpoints or list(self.config.endpoints)

    @property
    def endpoints(self) -> dict[str, EndpointConfig]:
        """The endpoints the checks judge: the selected ones, but those with a misnamed table."""
        from eoctl.stores.layout import refused as refused_endpoints

        refused = refused_endpoints(self.misnamed, self.selected) if self.misnamed else set()
        return {n: self.config.endpoint(n) for n in self.selected if n not in refused}

    def refuse_misnamed(self) -> None:
        """Look up (once the layout is) which selected endpoints' tables are misnamed."""
        self.misnamed = self.layout.misnamed(self.selected)

    def _pipeline_names(self) -> dict[str, str]:
        """eoctl's endpoint name -> its name in the pipeline (`name_in_store`), where they differ."""
        return {n: ep.name_in_store for n, ep in self.config.endpoints.items()
                if ep.name_in_store and ep.name_in_store != n}

    def as_producer(self, endpoint: ir.StringValue) -> ir.StringValue:
        """A column of eoctl's endpoint names as the names the pipeline gives them: what the
        `eo-producer` header of their messages carries (as their rows in shared tables do)."""
        names = self._pipeline_names()
        return endpoint.substitute(names) if names else endpoint

    def as_endpoint(self, producer: ir.StringValue) -> ir.StringValue:
        """A column of `eo-producer` values as eoctl's endpoint names (the inverse of as_producer)."""
        names = {v: k for k, v in self._pipeline_names().items()}
        return producer.substitute(names) if names else producer

    def has(self, endpoint: str, kind: str) -> bool:
        return (endpoint, kind) in self.tables and endpoint in self.endpoints

    def has_any(self, kind: str) -> bool:
        return any(k == kind for _, k in self.tables)

    def ago(self, delta: dt.timedelta) -> ir.TimestampScalar:
        """`delta` before the audit's now, as UTC wall time (what the working copy holds)."""
        return ibis.timestamp((self.options.now - delta).astimezone(dt.timezone.utc).replace(tzinfo=None))

    def sink_view(self, endpoint: str, sink: SinkConfig) -> str:
        sinks = [(n, s.name) for n in self.selected for s in self.config.endpoint(n).sinks]
        return f"sink_{sinks.index((endpoint, sink.name))}"

    def sink(self, endpoint: str, sink: SinkConfig) -> ir.Table:
        """The sink's rows the checks read: narrowed to the touched ones when a run continues."""
        name = self.narrowed_sinks.get((endpoint, sink.name)) or self.sink_view(endpoint, sink)
        return ibis.table(self.sink_schemas[(endpoint, sink.name)], name=name)

    def whole_sink(self, endpoint: str, sink: SinkConfig) -> ir.Table:
        """Every row of the sink, never narrowed (what its states count)."""
        return ibis.table(self.sink_schemas[(endpoint, sink.name)], name=self.sink_view(endpoint, sink))

    def blob_view(self, endpoint: str) -> str:
        return f"blobs_{self.selected.index(endpoint)}"

    def blobs(self, endpoint: str) -> ir.Table:
        return ibis.table(ibis.schema(BLOB_LISTING_SCHEMA), name=self.blob_view(endpoint))

    def topics(self, endpoint: str) -> str:
        ep = self.endpoints[endpoint]
        return ", ".join(ep.input.topics) if ep.input else endpoint


@dataclass(frozen=True)
class Hit:
    """One check's evidence at one place (an endpoint, and where in it: a topic, a table, a sink):
    what the runner counts, samples and keeps under the check's code."""

    endpoint: str
    where: str
    evidence: ir.Table
