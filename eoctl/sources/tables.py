"""Tables as Spark DataFrames: file datasets, and store tables (PostgreSQL, DuckDB) through JDBC.

Large JDBC tables are read in parallel: with a numeric `partition_column`, Spark issues
`num_partitions` range queries between the column's min and max (asked of the database first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eoctl.config.model import Config, DuckDBStore, PostgresStore, TableSource
from eoctl.errors import SourceError, UsageError
from eoctl.stores.connection import describe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from eoctl.stores.layout import EndpointTable

_FILE_DEFAULTS = {"csv": {"header": "true", "inferSchema": "true"}}


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualified(store: DuckDBStore | PostgresStore, table: str) -> str:
    return f"{quote_ident(store.schema_name)}.{quote_ident(table)}"


def jdbc_options(store: DuckDBStore | PostgresStore) -> dict[str, str]:
    """Spark JDBC url, driver and connection properties of a store (secrets included; never log)."""
    if isinstance(store, DuckDBStore):
        # Read-only so Spark's reads never take DuckDB's single writer lock.
        return {"url": f"jdbc:duckdb:{store.path}", "driver": "org.duckdb.DuckDBDriver", "duckdb.read_only": "true"}
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


# Spark's generic JDBC dialect knows these DuckDB types; others are projected to ones it knows.
_DUCKDB_SPARK_NATIVE = {
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "DOUBLE", "DATE", "TIMESTAMP",
    "VARCHAR", "BLOB",
}


def _duckdb_projection(store: DuckDBStore, table: str) -> str:
    """A select over a DuckDB table that Spark's JDBC reader can map (UTC timestamps, text for the rest)."""
    from eoctl.stores.connection import connect

    with connect(store) as conn:
        cols = conn.execute(
            "select column_name, data_type from information_schema.columns "
            "where table_schema = ? and table_name = ? order by ordinal_position",
            [store.schema_name, table],
        ).fetchall()
    if not cols:
        raise SourceError(f"table {table} does not exist in {describe(store)} (schema {store.schema_name})")
    exprs = []
    for name, dtype in cols:
        col = quote_ident(name)
        if dtype == "TIMESTAMP WITH TIME ZONE":
            exprs.append(f"timezone('UTC', {col}) as {col}")
        elif dtype.startswith("DECIMAL") or dtype in _DUCKDB_SPARK_NATIVE:
            exprs.append(col)
        else:  # UUID, JSON, HUGEINT, LIST, STRUCT, ...: text keeps every value readable
            exprs.append(f"cast({col} as varchar) as {col}")
    return f"(select {', '.join(exprs)} from {qualified(store, table)}) as t"


def store_named(config: Config, name: str) -> DuckDBStore | PostgresStore:
    try:
        return config.stores[name]
    except KeyError:
        raise UsageError(f"unknown store {name!r} (configured: {', '.join(sorted(config.stores)) or 'none'})") from None


def read_store_table(
    spark: SparkSession,
    store: DuckDBStore | PostgresStore,
    table: str,
    *,
    partition_column: str | None = None,
    num_partitions: int = 8,
) -> DataFrame:
    """A store table through Spark JDBC; partitioned by `partition_column` when given."""
    from pyspark.sql.utils import AnalysisException

    opts = jdbc_options(store)
    name = _duckdb_projection(store, table) if isinstance(store, DuckDBStore) else qualified(store, table)
    try:
        if partition_column is None:
            return spark.read.format("jdbc").options(**opts).option("dbtable", name).load()
        col = quote_ident(partition_column)
        bounds = (
            spark.read.format("jdbc")
            .options(**opts)
            .option("query", f"select min({col}) as lo, max({col}) as hi from {name}")
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


def read_endpoint_table(spark: SparkSession, t: EndpointTable) -> DataFrame:
    """An endpoint's rows of its tokens/outbox/intents table (the owner filter is pushed down to
    the store), with canonical column names; a table without an owner column gives the endpoint's
    name in the store as that column."""
    from pyspark.sql import functions as F

    df = read_store_table(spark, t.store, t.table)
    if t.owner_column is not None:
        df = df.where(F.col(f"`{t.owner_column}`") == F.lit(t.owner))
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
