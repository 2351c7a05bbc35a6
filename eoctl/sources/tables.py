"""Tables as Spark DataFrames: file datasets, PostgreSQL tables through JDBC, DuckDB tables through
a Parquet snapshot; and the Parquet snapshots the DuckDB engine reads store tables from.

Large JDBC tables are read in parallel: with a numeric `partition_column`, Spark issues
`num_partitions` range queries between the column's min and max (asked of the database first).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
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


def jdbc_options(store: PostgresStore) -> dict[str, str]:
    """Spark JDBC url, driver and connection properties of a store (secrets included; never log)."""
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


# DuckDB types Spark reads from Parquet as they are; others are written as ones it reads.
_DUCKDB_SPARK_NATIVE = {
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "DOUBLE", "DATE", "VARCHAR", "BLOB",
    "TIMESTAMP WITH TIME ZONE",
}
# (path, schema, table) -> (the DuckDB file's and its WAL's (size, mtime) when copied, the copy)
_snapshots: dict[tuple[str, str, str], tuple[tuple, str]] = {}


def _file_signature(path: str) -> tuple:
    out = []
    for p in (path, path + ".wal"):
        try:
            st = os.stat(p)
            out.append((st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


def duckdb_snapshot(store: DuckDBStore, table: str) -> str:
    """A Parquet copy of a DuckDB table in the run's temporary folder, made once while the file
    is unchanged; Spark reads the copy (the DuckDB engine copies into its own database instead:
    eoctl.engine.duckdb_audit).

    Why not Spark's JDBC reader on the file: DuckDB lets one process write a file and no other
    open it meanwhile, so executors holding the file through a long scan locked out gc and the
    pipeline, and a JDBC open during another's write failed the whole Spark job. A copy takes the
    file for one short, waiting, read-only statement (stores.connection), and every pass of a run
    sees the same rows (values as copy_duckdb_table keeps them).
    """
    from eoctl.scratch import subdir
    from eoctl.stores.connection import connect

    key = (str(store.path), store.schema_name, table)
    signature = _file_signature(str(store.path))
    known = _snapshots.get(key)
    if known is not None and known[0] == signature and os.path.exists(known[1]):
        return known[1]
    target = subdir("duckdb") / f"{uuid.uuid4().hex[:12]}-{store.schema_name}.{table}.parquet"
    with connect(store) as conn:
        signature = _file_signature(str(store.path))  # as of the open: no writer can change it now
        copy_duckdb_table(conn, store, table,
                          lambda sql: f"copy ({sql}) to '{target}' (format parquet, compression zstd)")
    _snapshots[key] = (signature, str(target))
    return str(target)


def sql_utc_instant(column: str) -> str:
    """DuckDB SQL of a TIMESTAMP `column` (a UTC wall time) as the instant it names (TIMESTAMP WITH
    TIME ZONE), as timezone('UTC', ...) gives it, whatever the session's zone: by its microseconds
    since the epoch, where timezone() goes through ICU's calendar, about 20x slower (0.56 s of CPU
    per 10M values here). The infinities keep timezone()'s values. (The way back: eoctl.engine.
    duckdb.sql_utc_wall_time.)"""
    return (f"CASE WHEN isfinite({column}) THEN make_timestamptz(epoch_us({column})) "
            f"ELSE timezone('UTC', {column}) END")


def copy_duckdb_table(conn, store: DuckDBStore, table: str, into: Callable[[str], str],
                      catalog: str | None = None) -> None:
    """Copy a DuckDB store table with `conn`, which has the store's file open (or attached as
    `catalog`): `into(select)` is the statement that writes the copy. Every value is kept
    readable by both engines: timestamps without a zone are taken as UTC, and types Spark has no
    reader for (UUID, JSON, HUGEINT, LIST, ...) become text. SourceError (one line) when the table
    is not there or cannot be read."""
    where = " and table_catalog = ?" if catalog else ""
    cols = conn.execute(
        "select column_name, data_type from information_schema.columns "
        f"where table_schema = ? and table_name = ?{where} order by ordinal_position",
        [store.schema_name, table, *([catalog] if catalog else [])],
    ).fetchall()
    if not cols:
        raise SourceError(f"table {table} does not exist in {describe(store)} (schema {store.schema_name})")
    exprs = _copied_columns(cols, lambda t: t in _DUCKDB_SPARK_NATIVE or t.startswith("DECIMAL"),
                            {"TIMESTAMP": sql_utc_instant("{col}")}, "cast({col} as varchar)")
    source = f"{quote_ident(catalog)}.{qualified(store, table)}" if catalog else qualified(store, table)
    try:
        conn.execute(into(f"select {', '.join(exprs)} from {source}"))
    except Exception as exc:  # duckdb.Error: a damaged file shows here, not at the open
        raise SourceError(f"table {table} in {describe(store)} cannot be read: "
                          f"{str(exc).strip().splitlines()[0][:300]}") from None


# PostgreSQL types the Parquet copy keeps as they are (Arrow reads them natively through ADBC);
# every other type (uuid, json, jsonb, interval, arrays, enums, ...) is copied as its text.
_POSTGRES_NATIVE = {
    "smallint", "integer", "bigint", "boolean", "real", "double precision", "text", "character varying",
    "character", "date", "timestamp without time zone", "timestamp with time zone", "bytea",
}


def postgres_snapshot(store: PostgresStore, table: str) -> str:
    """A Parquet copy of a PostgreSQL table in the run's temporary folder, for the DuckDB engine:
    one read-only query streamed through ADBC in Arrow batches (ADBC: the Arrow project's
    PostgreSQL driver, binary COPY into Arrow in C++, so a large table is never Python objects
    and never whole in memory). Numbers with a scale (numeric) become double precision."""
    import adbc_driver_manager
    import adbc_driver_postgresql.dbapi as pg
    import pyarrow.parquet as pq

    from eoctl.scratch import subdir
    from eoctl.secrets import mask_text
    from eoctl.stores.connection import connect

    with connect(store) as conn, conn.cursor() as cur:  # the columns, and a reachable server first
        cur.execute("select column_name, data_type from information_schema.columns "
                    "where table_schema = %s and table_name = %s order by ordinal_position",
                    (store.schema_name, table))
        cols = cur.fetchall()
    if not cols:
        raise SourceError(f"table {table} does not exist in {describe(store)} (schema {store.schema_name})")
    exprs = _copied_columns(cols, _POSTGRES_NATIVE.__contains__, {"numeric": "{col}::double precision"},
                            "{col}::text")
    target = subdir("postgres") / f"{uuid.uuid4().hex[:12]}-{store.schema_name}.{table}.parquet"
    try:
        with pg.connect(_postgres_uri(store)) as conn, conn.cursor() as cur:
            cur.execute(f"select {', '.join(exprs)} from {qualified(store, table)}")
            reader = cur.fetch_record_batch()
            with pq.ParquetWriter(str(target), reader.schema, compression="zstd") as writer:
                for batch in reader:
                    writer.write_batch(batch)
    except adbc_driver_manager.Error as exc:
        reason = mask_text(str(exc).strip().splitlines()[0][:300]) if str(exc).strip() else type(exc).__name__
        raise SourceError(f"table {table} in {describe(store)} cannot be read: {reason}") from None
    return str(target)


def _postgres_uri(store: PostgresStore) -> str:
    """The libpq URI of a store (it holds the password: never log it)."""
    from urllib.parse import quote, urlencode

    from eoctl.stores.connection import postgres_conninfo

    params = postgres_conninfo(store)
    auth = quote(params.pop("user"), safe="")
    password = params.pop("password", None)
    if password is not None:
        auth += ":" + quote(password, safe="")
    host, port, dbname = params.pop("host"), params.pop("port"), params.pop("dbname")
    return f"postgresql://{auth}@{quote(host, safe='')}:{port}/{quote(dbname, safe='')}?{urlencode(params)}"


def _copied_columns(cols: list[tuple[str, str]], native, special: dict[str, str], as_text: str) -> list[str]:
    """The select list of a table's copy: a column of a `native` type as it is, a `special` type
    through its expression, any other as text (`as_text`); each keeps its name."""
    out = []
    for name, dtype in cols:
        col = quote_ident(name)
        if dtype in special:
            out.append(f"{special[dtype].format(col=col)} as {col}")
        elif native(dtype):
            out.append(col)
        else:
            out.append(f"{as_text.format(col=col)} as {col}")
    return out


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
    """A store table: PostgreSQL through Spark JDBC, partitioned by `partition_column` when
    given; DuckDB through a Parquet snapshot (see duckdb_snapshot), which Spark splits by itself,
    so the partitioning arguments apply to PostgreSQL only."""
    from pyspark.sql.utils import AnalysisException

    if isinstance(store, DuckDBStore):
        return spark.read.parquet(duckdb_snapshot(store, table))
    opts = jdbc_options(store)
    name = qualified(store, table)
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
