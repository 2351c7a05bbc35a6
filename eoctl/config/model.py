"""The configuration model: one validated object, loaded once and passed down.

Every protocol name (headers, tables, columns) has the reference protocol's default from
DESIGN.md §2 and can be remapped, so an existing pipeline is audited without changing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

# ---------------------------------------------------------------------------------------------
# Paths in the file are relative to the file's own folder, so a configuration works from any cwd.


def _resolve_path(value: str, info: ValidationInfo) -> str:
    base = (info.context or {}).get("base_dir")
    if base is None or "://" in value or value.startswith("/"):
        return value
    return str((Path(base) / value).resolve())


def _resolve_uri(value: str, info: ValidationInfo) -> str:
    """Local paths and `file:` URIs resolve against the config folder; other schemes pass."""
    if value.startswith("file://"):
        return "file://" + _resolve_path(value[len("file://") :], info)
    if "://" in value:
        return value
    return "file://" + _resolve_path(value, info)


LocalPath = Annotated[str, AfterValidator(_resolve_path)]


def state_dir() -> Path:
    """eoctl's folder of the user's state: $XDG_STATE_HOME/eoctl, else ~/.local/state/eoctl."""
    import os

    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "eoctl"


def default_history_path(config_file: Path | None) -> Path:
    """One findings history per configuration file, in the user's state folder, named after the
    file's folder and a digest of its absolute path (two configurations never share one)."""
    import hashlib

    if config_file is None:
        return state_dir() / "default" / "eoctl-history.duckdb"
    resolved = config_file.resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    return state_dir() / f"{resolved.parent.name or 'root'}-{digest}" / "eoctl-history.duckdb"
Uri = Annotated[str, AfterValidator(_resolve_uri)]


class Strict(BaseModel):
    """Unknown keys are rejected: a typo must never silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --------------------------------------------------------------------------------- engine


class EngineConfig(Strict):
    kind: Literal["spark", "duckdb"] = Field(
        "spark", description="spark: the pipeline's engine, local or a cluster; duckdb: in process, one machine, "
        "no JVM (docs/engines.md)")
    memory_limit: str | None = Field(
        None, description="DuckDB engine: memory it may use before spilling to disk (e.g. 2GB); default "
        "DuckDB's, 80% of RAM")
    kafka_readers: int | None = Field(
        None, ge=1, description="DuckDB engine: processes reading a live topic at once; default one per core "
        "(up to the partitions) for 200,000 records or more, else one")
    master: str = Field("local[*]", description="Spark master: local[*], spark://host:port, yarn, k8s://...")
    remote: str | None = Field(None, description="Spark Connect URL (sc://host:port); replaces master")
    app_name: str = Field("eoctl", description="Spark application name")
    jars_dir: LocalPath | None = Field(
        None, description="folder of connector/JDBC jars for machines without Maven access"
    )
    connector_version: str | None = Field(
        None, description="Spark version of the Kafka connector to load; default: installed pyspark's"
    )
    postgres_jdbc_version: str = Field(
        "42.7.14", description="PostgreSQL JDBC driver (org.postgresql:postgresql), for Spark")
    mysql_jdbc_version: str = Field("9.5.0", description="MySQL Connector/J (com.mysql:mysql-connector-j), for "
                                                         "MySQL and MariaDB stores")
    duckdb_jdbc_version: str = Field("2.0.0.1", description="DuckDB JDBC driver (org.duckdb:duckdb_jdbc), for Spark")
    packages: list[str] = Field(default_factory=list, description="extra Maven coordinates")
    scratch_dir: str | None = Field(
        None,
        description="where the audit keeps its working copy of the records, as Parquet (a URI every "
        "executor can reach, e.g. hdfs:///tmp/eoctl); default: a temporary folder with a local master, "
        "Spark's cache otherwise",
    )
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark settings")
    class_archive: bool = Field(
        True, description="Spark, local driver: map the classes an earlier run loaded from an archive in the "
        "cache folder (starts ~1.5-2 s sooner, and the first job ~1.5 s); the first run records it")


# ---------------------------------------------------------------------------------- kafka


class KafkaConnection(Strict):
    bootstrap_servers: str = Field(description="host:port[,host:port...] of the brokers")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="how the clients connect (SASL_* need the sasl_* keys)")
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="SASL mechanism")
    sasl_username: str | None = Field(None, description="SASL user name")
    sasl_password: SecretStr | None = Field(None, description="SASL password; write it as ${ENV_VAR}: never printed")
    ssl_ca_location: LocalPath | None = Field(None, description="PEM file of trusted CA certificates")
    timeout_seconds: float = Field(10.0, gt=0, description="seconds a metadata or offset request may take")
    # The two Kafka clients name some settings differently, so each gets its own table.
    client_properties: dict[str, str] = Field(
        default_factory=dict, description="extra confluent-kafka (librdkafka) settings"
    )
    spark_properties: dict[str, str] = Field(
        default_factory=dict, description="extra Java client settings for Spark's reader, without 'kafka.'"
    )

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaConnection:
        if self.security_protocol.startswith("SASL") and not (
            self.sasl_mechanism and self.sasl_username and self.sasl_password
        ):
            raise ValueError(
                f"security_protocol {self.security_protocol} needs sasl_mechanism, sasl_username "
                "and sasl_password"
            )
        return self


# --------------------------------------------------------------------------------- stores


class DuckDBStore(Strict):
    type: Literal["duckdb"] = Field(description="the store's kind")
    path: LocalPath = Field(description="the DuckDB database file")
    schema_name: str = Field("main", alias="schema", description="the schema holding the tables")
    lock_wait_seconds: float = Field(
        60, ge=0,
        description="DuckDB lets one process at a time write a file (and none read it meanwhile): how long "
                    "eoctl waits for its turn, saying so on stderr, before it gives up with exit 3")


class PostgresStore(Strict):
    type: Literal["postgres"] = Field(description="the store's kind")
    host: str = Field("127.0.0.1", description="server host")
    port: int = Field(5432, gt=0, lt=65536, description="server port")
    database: str = Field(description="database name")
    user: str = Field(description="user name")
    password: SecretStr | None = Field(None, description="password; write it as ${ENV_VAR}: never printed")
    sslmode: str | None = Field(None, description="libpq sslmode (disable, require, verify-full, ...)")
    schema_name: str = Field("public", alias="schema", description="the schema holding the tables")
    options: dict[str, str] = Field(default_factory=dict, description="extra libpq/JDBC parameters")


class MySQLStore(Strict):
    """A MySQL or MariaDB database (MySQL's schema is its database)."""

    type: Literal["mysql"] = Field(description="the store's kind (MySQL or MariaDB)")
    host: str = Field("127.0.0.1", description="server host")
    port: int = Field(3306, gt=0, lt=65536, description="server port")
    database: str = Field(description="database (MySQL's schema) holding the tables")
    user: str = Field(description="user name")
    password: SecretStr | None = Field(None, description="password; write it as ${ENV_VAR}: never printed")
    options: dict[str, str] = Field(
        default_factory=dict,
        description="extra connection parameters: PyMySQL's connect() keywords (e.g. ssl_ca, connect_timeout) "
                    "and, for Spark, JDBC URL properties (e.g. sslMode)")

    @property
    def schema_name(self) -> str:
        return self.database


Store = Annotated[Union[DuckDBStore, PostgresStore, MySQLStore], Field(discriminator="type")]


# ------------------------------------------------------------------------------- protocol


class HeaderNames(Strict):
    message_id: str = "eo-message-id"
    token_id: str = "eo-token-id"
    producer: str = "eo-producer"
    sequence: str = "eo-sequence"
    causation_id: str = "eo-causation-id"
    attempt_id: str = "eo-attempt-id"
    blobs: str = "eo-blobs"


class TokenColumns(Strict):
    token_id: str = "token_id"
    message_id: str = "message_id"
    destination: str = "destination"
    attempt_id: str = "attempt_id"
    created_at: str = "created_at"


class OutboxColumns(Strict):
    endpoint: str = "endpoint"
    incoming_message_id: str = "incoming_message_id"
    incoming_token_id: str = "incoming_token_id"
    attempt_id: str = "attempt_id"
    outgoing: str = "outgoing"
    tokens_committed_at: str = "tokens_committed_at"
    created_at: str = "created_at"
    updated_at: str = "updated_at"
    version: str = "version"


class IntentColumns(Strict):
    intent_id: str = "intent_id"
    endpoint: str = "endpoint"
    incoming_message_id: str = "incoming_message_id"
    attempt_id: str = "attempt_id"
    kind: str = "kind"
    ref: str = "ref"
    created_at: str = "created_at"


class TokensTable(Strict):
    store: str | None = Field(None, description="store name; default: the endpoint's store")
    present: bool = Field(True, description="false (written `tokens = false`, `outbox = false`, `intents = false`): "
                                            "the endpoint has no such table, as one without a store")
    table: str = Field("eo_tokens", description="table name (schema-qualified names come from the store's schema)")
    columns: TokenColumns = Field(
        TokenColumns(), description="the column names, where they differ from the reference protocol's")


#: a duration as the configuration and the flags take it: 90s, 15m, 24h, 7d (a bare number is seconds)
DURATION_PATTERN = r"\d+(\.\d+)?[smhd]?"
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


#: the longest duration taken, in days (100 years): `now - duration` must be a time every engine
#: and store holds (Python's datetime ends at year 1, 739,000 days back from today)
MAX_DURATION_DAYS = 36500


def duration_of(text: str) -> Any:
    """A duration string DURATION_PATTERN matches (lower case) as a timedelta."""
    import datetime as dt

    unit = text[-1] if text[-1] in _UNIT_SECONDS else "s"
    return dt.timedelta(seconds=float(text.rstrip("smhd")) * _UNIT_SECONDS[unit])


def checked_duration(text: str) -> str:
    """`text` as the canonical duration string (lower case, stripped); ValueError, saying what is
    expected, when it is not one or is longer than MAX_DURATION_DAYS."""
    import re

    value = text.strip().lower()
    if not re.fullmatch(DURATION_PATTERN, value):
        raise ValueError(f"expected a duration like 90s, 15m, 24h or 7d, got {text!r}")
    unit = value[-1] if value[-1] in _UNIT_SECONDS else "s"
    if float(value.rstrip("smhd")) * _UNIT_SECONDS[unit] > MAX_DURATION_DAYS * 86400:
        raise ValueError(f"too long (at most {MAX_DURATION_DAYS}d), got {text!r}")
    return value


class OutboxTable(Strict):
    store: str | None = Field(None, description="store name; default: the endpoint's store")
    present: bool = Field(True, description="false (written `tokens = false`, `outbox = false`, `intents = false`): "
                                            "the endpoint has no such table, as one without a store")
    table: str = Field("eo_outbox", description="table name")
    columns: OutboxColumns = Field(
        OutboxColumns(), description="the column names, where they differ from the reference protocol's")
    sent_column: str | None = Field(
        None, min_length=1,
        description="for an outbox that keeps a row once its messages are sent (NServiceBus OutboxData, a status "
                    "or sent_at column): the column telling sent rows from pending ones. A row is sent when it is "
                    "true or not null (a flag, a dispatched-at time), or, with sent_values, when it holds one of "
                    "them; only the other rows are pending (stuck, replayed, holding tokens)")
    sent_values: list[str] | None = Field(
        None, min_length=1,
        description="values of sent_column that mean sent, for a status column (e.g. [\"SENT\", \"DONE\"]); "
                    "compared as text")
    retention: str | None = Field(
        None, description="how long sent rows may stay (by updated_at) before the audit reports them and "
                          "`eoctl gc-outbox` deletes them (90s, 15m, 24h, 7d)")

    @field_validator("retention")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        return None if value is None else checked_duration(value)

    @model_validator(mode="after")
    def _sent_needs_column(self) -> OutboxTable:
        for key in ("sent_values", "retention"):
            if getattr(self, key) is not None and self.sent_column is None:
                raise ValueError(f"{key} needs sent_column (the column that tells sent rows from pending ones)")
        return self

    @property
    def keeps_sent(self) -> bool:
        """The table keeps rows once sent: only rows sent_column does not mark are pending."""
        return self.sent_column is not None


class IntentsTable(Strict):
    store: str | None = Field(None, description="store name; default: the endpoint's store")
    present: bool = Field(True, description="false (written `tokens = false`, `outbox = false`, `intents = false`): "
                                            "the endpoint has no such table, as one without a store")
    table: str = Field("eo_intents", description="table name")
    columns: IntentColumns = Field(
        IntentColumns(), description="the column names, where they differ from the reference protocol's")


# ------------------------------------------------------------------------ topics and tables

Isolation = Literal["read_committed", "read_uncommitted"]


def _offsets_map(value: Any) -> Any:
    """TOML keys are strings; partitions are ints. `{orders = {"0" = 42}}` -> {"orders": {0: 42}}."""
    if isinstance(value, dict):
        out: dict[str, dict[int, int]] = {}
        for topic, parts in value.items():
            if not isinstance(parts, dict):
                raise ValueError(f"committed offsets of topic {topic!r} must be a table partition = offset")
            try:
                out[topic] = {int(p): int(o) for p, o in parts.items()}
            except (TypeError, ValueError):
                raise ValueError(
                    f"committed offsets of topic {topic!r} must map partition numbers to integer offsets"
                ) from None
        return out
    return value


class TopicInput(Strict):
    """Where an endpoint's incoming records are: a live Kafka topic or a topic archive."""

    topics: list[str] = Field(min_length=1, description="the topics the endpoint consumes")
    kafka: str | None = Field(None, description="name of a [kafka.NAME] connection (live topics)")
    group: str | None = Field(None, description="the endpoint's consumer group (live topics)")
    isolation: Isolation = Field(
        "read_committed",
        description="live topics: read_committed skips aborted transactions' records, as a transactional consumer does")
    archive: LocalPath | None = Field(None, description="folder of archived records (Kafka record schema)")
    archive_format: Literal["parquet", "json"] = Field("parquet", description="archive only: the archive's files")
    committed_offsets: Annotated[
        dict[str, dict[int, int]] | LocalPath | None, Field(union_mode="left_to_right")
    ] = Field(None, description="archive only: {topic = {partition = offset}} or a JSON file path")

    _coerce_offsets = field_validator("committed_offsets", mode="before")(_offsets_map)

    @model_validator(mode="after")
    def _one_kind(self) -> TopicInput:
        if bool(self.kafka) == bool(self.archive):
            raise ValueError("set exactly one of 'kafka' (a live topic) or 'archive' (a topic archive)")
        if self.kafka and not self.group:
            raise ValueError("a live Kafka input needs 'group', the endpoint's consumer group")
        if self.archive and self.group:
            raise ValueError("'group' applies to live Kafka input; an archive takes 'committed_offsets'")
        return self


class TableSource(Strict):
    """A table readable by Spark: a file dataset, or a table in a configured store."""

    format: Literal["parquet", "orc", "json", "csv"] | None = Field(
        None, description="a file dataset's format (with path)")
    path: LocalPath | None = Field(None, description="a file dataset's folder or URI (with format)")
    options: dict[str, str] = Field(default_factory=dict, description="Spark reader options")
    store: str | None = Field(None, description="a table's store (with table)")
    table: str | None = Field(None, description="a table in that store (with store)")
    partition_column: str | None = Field(None, description="numeric column for partitioned JDBC reads")
    num_partitions: int = Field(8, ge=1, description="partitions of a partitioned JDBC read")

    @model_validator(mode="after")
    def _one_kind(self) -> TableSource:
        file_like = self.path is not None
        store_like = self.store is not None or self.table is not None
        if file_like == store_like:
            raise ValueError("set either 'path' and 'format' (files) or 'store' and 'table' (a store table)")
        if file_like and self.format is None:
            raise ValueError("a file dataset needs 'format': parquet, orc, json or csv")
        if store_like and not (self.store and self.table):
            raise ValueError("a store table needs both 'store' and 'table'")
        return self


class SinkConfig(TableSource):
    name: str = Field(description="the sink's name in findings and reports")
    message_id_column: str = Field(description="column holding the source message id")
    key_columns: list[str] = Field(default_factory=list, description="idempotency-key columns")
    value_columns: list[str] = Field(
        default_factory=list, description="columns that must agree for one key (default: all others)"
    )
    every_message: bool = Field(
        False, description="every message the endpoint processed (below its committed offset, with protocol "
                           "headers) must have a row here: the audit reports one without (its effect is lost downstream)")
    watermark_column: str | None = Field(
        None, description="a column every write of a row sets to a value above all earlier ones (an ingestion "
                          "time, an increasing id): with it, audit --since-last reads only rows written since "
                          "the last recorded run, and the rows of the keys they touch")

    @property
    def configured_columns(self) -> list[str]:
        """Every column the configuration names: the sink must have each."""
        return [column for _, column in self.columns_by_key]

    @property
    def columns_by_key(self) -> list[tuple[str, str]]:
        """(key, column) for every column the configuration names, so an error can name the key to set."""
        return [("message_id_column", self.message_id_column), *(("key_columns", c) for c in self.key_columns),
                *(("value_columns", c) for c in self.value_columns),
                *([("watermark_column", self.watermark_column)] if self.watermark_column else [])]


class EndpointConfig(Strict):
    store: str | None = Field(None, description="store holding this endpoint's tokens, outbox, intents")
    name_in_store: str | None = Field(
        None, min_length=1,
        description="the endpoint's name in the pipeline where it differs from the name of this entry: in "
                    "shared tables (outbox and intents `endpoint`, tokens `destination`) and in its messages' "
                    "eo-producer header")
    input: TopicInput | None = Field(
        None, description="where the endpoint's incoming records are (none: a producer that consumes nothing)")
    tokens: TokensTable = Field(
        TokensTable(), description="the token store: `[endpoints.NAME.tokens]`, or `tokens = false`")
    outbox: OutboxTable = Field(
        OutboxTable(), description="the outbox: `[endpoints.NAME.outbox]`, or `outbox = false`")
    intents: IntentsTable = Field(
        IntentsTable(), description="the intents table: `[endpoints.NAME.intents]`, or `intents = false`")
    blobs: Uri | None = Field(None, description="URI prefix of prepared blobs (file://, s3://, ...)")
    blob_options: dict[str, str] = Field(default_factory=dict, description="fsspec storage options")
    sinks: list[SinkConfig] = Field(
        default_factory=list,
        description="the tables and folders the endpoint's effects land in (`[[endpoints.NAME.sinks]]`)")

    @field_validator("tokens", "outbox", "intents", mode="before")
    @classmethod
    def _absent(cls, value: Any) -> Any:
        """`outbox = false`: an endpoint without that table (a consumer with no outbox, a producer
        with no tokens of its own), read as nothing, never as a missing table."""
        if value is False:
            return {"present": False}
        return {} if value is True else value

    def store_of(self, table: TokensTable | OutboxTable | IntentsTable) -> str | None:
        if not table.present:
            return None
        return table.store or self.store


class ProtocolConfig(Strict):
    headers: HeaderNames = Field(
        HeaderNames(), description="the names of the protocol's message headers, where they differ")


class OpsConfig(Strict):
    """Bookkeeping of the commands that change things (gc-tokens, gc-blobs, gc-outbox, replay-outbox)."""

    store: str | None = Field(
        None, description="store holding the lease and the run log; default: the first endpoint's store")
    quarantine: str = Field(
        ".eoctl-quarantine",
        description="folder under each blob prefix where gc-blobs moves blobs before they are purged "
                    "(a leading dot keeps Spark's listing, and so the audit, from seeing them)")
    lease_ttl_seconds: int = Field(
        600, ge=30, description="a lease whose holder stopped renewing it for this long may be taken over")

    @field_validator("quarantine")
    @classmethod
    def _relative_folder(cls, value: str) -> str:
        parts = value.strip("/").split("/")
        if value.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"quarantine {value!r} must be a folder below each blob prefix (not the prefix itself "
                             "nor outside it), like .eoctl-quarantine")
        if not parts[0].startswith((".", "_")):  # else the audit and gc-blobs would list quarantined blobs
            raise ValueError(f"quarantine {value!r} must start with '.' or '_' (hidden from blob listings), "
                             "like .eoctl-quarantine")
        return "/".join(parts)


class HistoryConfig(Strict):
    """Where every audit run is recorded for `eoctl findings` (and `audit --since-last`)."""

    @field_validator("path", mode="after")
    @classmethod
    def _default_path(cls, value: str | None, info: ValidationInfo) -> str:
        # Not beside the configuration: for /etc/eoctl/eoctl.toml that would be /etc, and a
        # read-only audit must not need to write there.
        if value is not None:
            return value
        source = (info.context or {}).get("source")
        return str(default_history_path(Path(source) if source else None))

    path: LocalPath | None = Field(
        None, validate_default=True, description="DuckDB file of the findings history (relative to this file); default: in the user's "
        "state folder ($XDG_STATE_HOME/eoctl, else ~/.local/state/eoctl), one per configuration file")
    store: str | None = Field(None, description="record in this [stores.*] entry instead (e.g. PostgreSQL)")
    records: LocalPath | None = Field(
        None,
        description="folder (or URI every executor can reach) of the record indexes that `audit --since-last` "
        "continues from; default: beside the history file, e.g. eoctl-history.records",
    )


class AuditConfig(Strict):
    """The audit's defaults, for every run of this configuration (a flag given wins)."""

    grace: str = Field(
        "24h", description="orphan tokens and blobs younger than this are not findings (90s, 15m, 24h, 7d)")
    stuck_after: str = Field("15m", description="outbox entries pending longer are stuck")
    transaction_timeout: str = Field("15m", description="open Kafka transactions older than this hang")

    @field_validator("grace", "stuck_after", "transaction_timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        return checked_duration(value)


class ReportConfig(Strict):
    """How reports refer to the findings guide."""

    docs_url: str | None = Field(
        None, min_length=1,
        description="where your team reads docs/findings.md (e.g. https://git.example.com/ops/eoctl/blob/main/"
                    "docs/findings.md): Markdown reports link each finding to its section there; without it they "
                    "carry the guide's words (cause, fix, how to verify) inline, since a relative link breaks "
                    "in a ticket")


class Config(Strict):
    """The whole configuration. `source` is where it was loaded from (not a file key)."""

    engine: EngineConfig = EngineConfig()
    protocol: ProtocolConfig = ProtocolConfig()
    kafka: dict[str, KafkaConnection] = Field(default_factory=dict)
    stores: dict[str, Store] = Field(default_factory=dict)
    endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)
    ops: OpsConfig = OpsConfig()
    history: HistoryConfig = Field(default_factory=dict, validate_default=True)  # type: ignore[arg-type]
    report: ReportConfig = ReportConfig()
    audit: AuditConfig = AuditConfig()
    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        """The file the configuration was loaded from (None when built in code)."""
        return self._source

    @model_validator(mode="after")
    def _remember_source(self, info: ValidationInfo) -> Config:
        source = (info.context or {}).get("source")
        self._source = Path(source) if source else None
        return self

    @model_validator(mode="after")
    def _references_exist(self) -> Config:
        if self.ops.store is not None and self.ops.store not in self.stores:
            raise ValueError(f"ops.store names {self.ops.store!r}, which is not a [stores.*] entry")
        if self.history.store is not None and self.history.store not in self.stores:
            raise ValueError(f"history.store names {self.history.store!r}, which is not a [stores.*] entry")
        if self.history.store is not None and self.stores[self.history.store].type == "mysql":
            raise ValueError(f"history.store names {self.history.store!r}, a MySQL store: the findings history "
                             "lives in a DuckDB file (the default) or PostgreSQL")
        for name, ep in self.endpoints.items():
            where = f"endpoints.{name}"
            if ep.input and ep.input.kafka and ep.input.kafka not in self.kafka:
                raise ValueError(f"{where}.input.kafka names {ep.input.kafka!r}, which is not a [kafka.*] connection")
            for key, table in (("tokens", ep.tokens), ("outbox", ep.outbox), ("intents", ep.intents)):
                store = ep.store_of(table)
                if store is not None and store not in self.stores:
                    raise ValueError(f"{where}.{key} uses store {store!r}, which is not a [stores.*] entry")
            for i, sink in enumerate(ep.sinks):
                if sink.store is not None and sink.store not in self.stores:
                    raise ValueError(f"{where}.sinks[{i}] uses store {sink.store!r}, which is not a [stores.*] entry")
        return self

    def control_store(self) -> str:
        """The store of the lease and the run log of the commands that change things."""
        if self.ops.store:
            return self.ops.store
        for ep in self.endpoints.values():
            if ep.store:
                return ep.store
        from eoctl.errors import UsageError

        raise UsageError("no store for the lease and run log: set ops.store or an endpoint's store")

    def warnings(self) -> list[str]:
        """What a valid configuration lacks for eoctl to do anything (config check and doctor say
        it): no endpoint, or no endpoint with anything to read."""
        if not self.endpoints:
            return ["no endpoints are configured: every command has nothing to read (add an [endpoints.NAME] "
                    "with its store, input or sinks; `eoctl config init` writes a starter)"]
        idle = [n for n, ep in self.endpoints.items() if ep.store is None and ep.input is None and not ep.sinks
                and not ep.blobs and all(getattr(ep, k).store is None for k in ("tokens", "outbox", "intents"))]
        return [f"endpoint {n} has no store, input, sinks or blobs: nothing of it is read" for n in idle]

    def names_in_pipeline(self) -> dict[str, str]:
        """Each endpoint's name in the pipeline (name_in_store, default its own: its tables' owner
        column, its eo-producer header) -> the configuration's name of it."""
        return {ep.name_in_store or name: name for name, ep in self.endpoints.items()}

    def producing(self, producer: str | None) -> str | None:
        """The endpoint whose messages carry `producer` in their eo-producer header: the one whose
        name in the pipeline (name_in_store, default its own) it is."""
        return next((n for n, ep in self.endpoints.items() if (ep.name_in_store or n) == producer), None)

    def sink_key(self, sink: SinkConfig) -> str:
        """The key path of a sink's entry (`endpoints.billing.sinks[0]`), for an error to name."""
        for name, ep in self.endpoints.items():
            for i, s in enumerate(ep.sinks):
                if s is sink:
                    return f"endpoints.{name}.sinks[{i}]"
        return f"the sink {sink.name}'s entry"

    def endpoint(self, name: str) -> EndpointConfig:
        try:
            return self.endpoints[name]
        except KeyError:
            from eoctl.errors import UsageError

            known = ", ".join(sorted(self.endpoints)) or "none configured"
            raise UsageError(f"unknown endpoint {name!r} (configured: {known})") from None
