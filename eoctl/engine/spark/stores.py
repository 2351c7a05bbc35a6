"""Store tables, sinks and blob prefixes on the Spark engine: each read once per run (SparkStores), a
PostgreSQL table through JDBC, a DuckDB store's through its Parquet snapshot, files through
Spark's readers, blobs listed by executors.

Large JDBC tables are read in parallel: with a numeric `partition_column`, Spark issues
`num_partitions` range queries between the column's min and max (asked of the database first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from eoctl.config.model import Config, DuckDBStore, MySQLStore, PostgresStore, SinkConfig, TableSource
from eoctl.errors import SourceError
from eoctl.expr.blobs import prefix_path
from eoctl.stores.connection import describe, store_named
from eoctl.stores.layout import EndpointTable, StoreLayout
from eoctl.stores.snapshots import duckdb_snapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


_FILE_DEFAULTS = {"csv": {"header": "true", "inferSchema": "true"}}


#: Connector/J's properties for every eoctl read: times as UTC (DATETIME holds UTC wall times, as
#: eoctl's sessions write them), rows streamed a fetch at a time (else the driver holds the table),
#: TINYINT(1) and BIT(1) as booleans
_MYSQL_JDBC = {"connectionTimeZone": "UTC", "forceConnectionTimeZoneToSession": "true", "useCursorFetch": "true",
               "tinyInt1isBit": "true", "zeroDateTimeBehavior": "CONVERT_TO_NULL"}


def jdbc_options(store: PostgresStore | MySQLStore) -> dict[str, str]:
    """Spark JDBC url, driver and connection properties of a store (secrets included; never log)."""
    if isinstance(store, MySQLStore):
        from urllib.parse import urlencode

        # Spark's MySQL dialect (backquoted names, its types) knows jdbc:mysql URLs, MariaDB too
        opts = {"url": f"jdbc:mysql://{store.host}:{store.port}/{store.database}?"
                       + urlencode({**_MYSQL_JDBC, **store.options}),
                "driver": "com.mysql.cj.jdbc.Driver", "user": store.user, "fetchsize": "10000"}
        if store.password is not None:
            opts["password"] = store.password.get_secret_value()
        return opts
    opts = {
        "url": f"jdbc:postgresql://{store.host}:{store.port}/{store.database}",
        "driver": "org.postgresql.Driver",
        "user": store.user,
    }
    if store.password is not None:
        opts["password"] = store.password.get_secret_value()
    if store.sslmode:
        opts["sslmode"] = store.sslmode
    opts.update(store.options)
    return opts


def read_store_table(
    spark: SparkSession,
    store: DuckDBStore | PostgresStore | MySQLStore,
    table: str,
    *,
    partition_column: str | None = None,
    num_partitions: int = 8,
) -> DataFrame:
    """A store table: PostgreSQL and MySQL through Spark JDBC, partitioned by `partition_column`
    when given; DuckDB through a Parquet snapshot (see duckdb_snapshot), which Spark splits by
    itself, so the partitioning arguments apply to the servers only."""
    from pyspark.sql.utils import AnalysisException

    if isinstance(store, DuckDBStore):
        return spark.read.parquet(duckdb_snapshot(store, table))
    import sqlglot
    from sqlglot import exp

    from eoctl.stores import sql

    opts = jdbc_options(store)
    # Spark's own statements on MySQL keep the server's sql_mode: sqlglot's plain MySQL, names in
    # backquotes there (no bound value: a `%` is a `%`)
    dialect = "mysql" if isinstance(store, MySQLStore) else "postgres"
    source: exp.Expression = sql.table(store.schema_name, table)
    if isinstance(store, MySQLStore):  # a BINARY(16) id read as its UUID's text, as the DuckDB engine's copy reads it
        from eoctl.stores.snapshots import mysql_uuid_select

        select = mysql_uuid_select(store, table)
        if select is not None:  # the select list as sqlglot wrote it, read back as nodes
            items = sqlglot.parse_one("select " + select, read="mysql").expressions
            source = exp.select(*items).from_(source).subquery("eoctl_read")
    name = source.sql(dialect=dialect)
    try:
        if partition_column is None:
            return spark.read.format("jdbc").options(**opts).option("dbtable", name).load()
        bounds_sql = sql.statement("select min(:c) as lo, max(:c) as hi from :t", c=sql.column(partition_column),
                                   t=source).sql(dialect=dialect)
        bounds = (
            spark.read.format("jdbc")
            .options(**opts)
            .option("query", bounds_sql)
            .load()
            .first()
        )
        lo, hi = (bounds["lo"], bounds["hi"]) if bounds is not None else (None, None)
        reader = spark.read.format("jdbc").options(**opts).option("dbtable", name)
        if lo is None:  # empty table: one partition is all there is
            return reader.load()
        return (
            reader.option("partitionColumn", partition_column)
            .option("lowerBound", str(lo))
            .option("upperBound", str(hi + 1 if isinstance(hi, int) else hi))
            .option("numPartitions", str(num_partitions))
            .load()
        )
    except AnalysisException as exc:
        raise SourceError(f"table {table} in {describe(store)} cannot be read: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # py4j wraps JDBC's SQLException
        if type(exc).__name__ not in ("Py4JJavaError", "IllegalArgumentException", "SparkConnectGrpcException"):
            raise
        raise SourceError(f"table {table} in {describe(store)} cannot be read: {_java_message(exc)}") from None


def read_endpoint_table(spark: SparkSession, t: EndpointTable, sent: bool = False) -> DataFrame:
    """An endpoint's rows of its tokens/outbox/intents table (the owner filter is pushed down to
    the store), with canonical column names; a table without an owner column gives the endpoint's
    name in the store as that column. Of an outbox that keeps sent rows: the pending rows, or with
    `sent` the sent ones (the condition of eoctl.stores.layout.sent_node)."""
    from pyspark.sql import functions as F

    df = read_store_table(spark, t.store, t.table)
    if t.owner_column is not None:
        df = df.where(F.col(f"`{t.owner_column}`") == F.lit(t.owner))
    if t.keeps_sent:
        column = F.col(f"`{t.sent_column}`")
        text = column.cast("string")
        is_sent = column.isNotNull() & (text.isin(*t.sent_values) if t.sent_values else ~text.isin("false", "0"))
        df = df.where(is_sent if sent else ~is_sent)
    return df.select([
        F.lit(t.owner).alias(canonical) if canonical == t.owner_canonical and t.owner_column is None
        else F.col(f"`{actual}`").alias(canonical)
        for canonical, actual in t.columns.items()])


def read_file_table(spark: SparkSession, fmt: str, path: str, options: dict[str, str] | None = None) -> DataFrame:
    from pyspark.sql.utils import AnalysisException

    opts = {**_FILE_DEFAULTS.get(fmt, {}), **(options or {})}
    try:
        return spark.read.format(fmt).options(**opts).load(path)
    except AnalysisException as exc:
        raise SourceError(f"{fmt} dataset {path} cannot be read: {str(exc).splitlines()[0]}") from None


def read_table(spark: SparkSession, config: Config, source: TableSource) -> DataFrame:
    """Read a configured table source (file dataset or store table)."""
    if source.path is not None:
        assert source.format is not None  # guaranteed by TableSource validation
        return read_file_table(spark, source.format, source.path, source.options)
    assert source.store is not None and source.table is not None
    return read_store_table(
        spark,
        store_named(config, source.store),
        source.table,
        partition_column=source.partition_column,
        num_partitions=source.num_partitions,
    )


def _java_message(exc: Exception) -> str:
    java = getattr(exc, "java_exception", None)
    text = str(java.getMessage()) if java is not None else str(exc)
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__


class SparkStores:
    """The store tables, sinks and blob prefixes of a Spark run, each read once and kept until
    release()."""

    def __init__(self, spark: SparkSession, config: Config, layout: StoreLayout | None = None) -> None:
        from eoctl.stores.layout import StoreLayout

        self.spark = spark
        self.config = config
        self.layout = layout or StoreLayout(config)  # which rows of each table are whose
        self._persisted: list[DataFrame] = []
        self._frames: dict[tuple, DataFrame | None] = {}

    def _once(self, key: tuple, read: Callable[[], DataFrame | None], persist: bool = True) -> DataFrame | None:
        """Read once (`persist`: and kept, computed by the first query that reads it)."""
        if key not in self._frames:
            df = read()
            if df is not None and persist:
                df = df.persist()
                self._persisted.append(df)
            self._frames[key] = df
        return self._frames[key]

    def table(self, endpoint: str, kind: str) -> DataFrame | None:
        """An endpoint's tokens/outbox/intents table with canonical column names, or None; `kind`
        outbox_sent: the sent rows of an outbox that keeps them (outbox: the pending ones)."""
        from eoctl.engine.spark.stores import read_endpoint_table

        def read() -> DataFrame | None:
            t = self.layout.table(endpoint, "outbox" if kind == "outbox_sent" else kind)
            if t is None or (kind == "outbox_sent" and not t.keeps_sent):
                return None
            return read_endpoint_table(self.spark, t, sent=kind == "outbox_sent")
        return self._once(("table", endpoint, kind), read)

    def sink(self, endpoint: str, sink: SinkConfig) -> DataFrame:
        """A sink table. Parquet and ORC sinks are not cached: reading just the columns a check
        needs costs less than caching every column."""
        from eoctl.engine.spark.stores import read_table

        df = self._once(("sink", endpoint, sink.name), lambda: read_table(self.spark, self.config, sink),
                        persist=sink.format not in ("parquet", "orc"))
        assert df is not None
        return df

    def blobs(self, endpoint: str, with_hash: bool) -> DataFrame:
        """name (relative to the prefix), size, modified, actual_sha256 (NULL unless `with_hash`:
        hashing reads every blob) of every blob under the endpoint's prefix, listed by executors
        (Spark's binaryFile source)."""
        uri = self.config.endpoints[endpoint].blobs
        assert uri is not None
        df = self._once(("blobs", endpoint, with_hash), lambda: list_blobs(self.spark, uri, with_hash))
        assert df is not None
        return df

    def release(self) -> None:
        for df in self._persisted:
            df.unpersist()
        self._persisted.clear()
        self._frames.clear()


def list_blobs(spark: SparkSession, uri: str, with_hash: bool) -> DataFrame:
    """Every blob under `uri`: name (relative to the prefix), size, modified, actual_sha256."""
    from pyspark.sql import functions as F
    from pyspark.sql.utils import AnalysisException

    from eoctl.blobfs import linked_folders

    prefix = prefix_path(uri)
    try:
        # gc-blobs (or the pipeline) may move a blob away between Spark's listing and its read:
        # the audit then sees it gone, as a listing a moment later would, instead of failing.
        files = (spark.read.format("binaryFile").option("recursiveFileLookup", "true")
                 .option("ignoreMissingFiles", "true").load(uri))
    except AnalysisException as exc:
        raise SourceError(f"blob prefix {uri} cannot be listed: {str(exc).splitlines()[0]}") from None
    # the prefix as a value, never pasted into SQL (a configured path may hold a quote)
    rel = F.col("path").substr(F.instr("path", prefix) + len(prefix), F.lit(2 ** 31 - 1))
    # Hadoop's local listing goes through symbolic links to folders; eoctl does not (a blob there
    # lives outside the prefix, and the DuckDB engine's listing does not): their files are left out
    for folder in linked_folders(uri):
        files = files.where(~rel.startswith(folder + "/"))
    sha = F.sha2("content", 256) if with_hash else F.lit(None).cast("string")
    return files.select(rel.alias("name"), F.col("length").alias("size"), F.col("modificationTime").alias("modified"),
                        sha.alias("actual_sha256"))
