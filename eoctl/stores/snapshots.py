"""Store tables copied whole for an engine to read: a DuckDB store's table as a Parquet snapshot
(what Spark reads, the store held for one read-only statement) or into another DuckDB
database; a PostgreSQL table streamed into Parquet (what the DuckDB engine reads)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

from eoctl.config.model import DuckDBStore, MySQLStore, PostgresStore
from eoctl.errors import SourceError
from eoctl.stores.connection import describe, id_sql, sql_literal

# DuckDB types Spark reads from Parquet as they are; others are written as ones it reads.
_DUCKDB_SPARK_NATIVE = {
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "DOUBLE", "DATE", "VARCHAR", "BLOB",
    "TIMESTAMP WITH TIME ZONE",
}


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
    eoctl.engine.duckdb.run).

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
    target = subdir("duckdb") / _copy_name(store.schema_name, table)
    with connect(store) as conn:
        signature = _file_signature(str(store.path))  # as of the open: no writer can change it now
        copy_duckdb_table(conn, store, table,
                          lambda sql: f"copy ({sql}) to {sql_literal(str(target))} (format parquet, compression zstd)")
    _snapshots[key] = (signature, str(target))
    return str(target)


def _copy_name(schema: str, table: str) -> str:
    """A copy's file name: unique, and naming its table in the characters a path and a SQL literal
    take as they are (a configured name may hold a quote, a slash or a control character)."""
    import re

    return f"{uuid.uuid4().hex[:12]}-" + re.sub(r"[^A-Za-z0-9_-]", "_", f"{schema}.{table}")[:80] + ".parquet"


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
    from eoctl.stores import sql

    exprs = _copied_columns(cols, lambda t: t in _DUCKDB_SPARK_NATIVE or t.startswith("DECIMAL"),
                            {"TIMESTAMP": lambda c: sql.fragment(sql_utc_instant(":c"), c=c)},
                            lambda c: sql.fragment("cast(:c as varchar)", c=c))
    source = sql.table(store.schema_name, table)
    if catalog:
        source.set("catalog", sql.ident(catalog))
    select = sql.statement("select :cols from :t", cols=exprs, t=source).sql(dialect="duckdb")
    try:
        conn.execute(into(select))
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
    from eoctl.stores import sql

    exprs = _copied_columns(cols, _POSTGRES_NATIVE.__contains__,
                            {"numeric": lambda c: sql.fragment("cast(:c as double precision)", c=c)},
                            lambda c: sql.fragment("cast(:c as text)", c=c))
    # ADBC's session, not eoctl's: no bound values, so a `%` in a name is a `%`
    select = sql.statement("select :cols from :t", cols=exprs, t=sql.table(store.schema_name, table)).sql(dialect="postgres")
    target = subdir("postgres") / _copy_name(store.schema_name, table)
    try:
        with pg.connect(_postgres_uri(store)) as conn, conn.cursor() as cur:
            cur.execute(select)
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
    params.pop("options")  # connectorx's client takes no libpq `options`; its reads compare no times
    if "options" in store.options:
        params["options"] = store.options["options"]
    auth = quote(params.pop("user"), safe="")
    password = params.pop("password", None)
    if password is not None:
        auth += ":" + quote(password, safe="")
    host, port, dbname = params.pop("host"), params.pop("port"), params.pop("dbname")
    return f"postgresql://{auth}@{quote(host, safe='')}:{port}/{quote(dbname, safe='')}?{urlencode(params)}"


# MySQL and MariaDB types the Parquet copy keeps as connectorx reads them into Arrow; BIT, DECIMAL and
# TIMESTAMP through an expression (a number, a double, the UTC wall time), every other type as text.
_MYSQL_NATIVE = {
    "tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "char", "varchar", "tinytext", "text",
    "mediumtext", "longtext", "json", "date", "datetime",
}
def _mysql_special(store: MySQLStore) -> dict[str, Callable[[Any], Any]]:
    """Type -> the copy's expression of a column of it (a node of stores.sql)."""
    from sqlglot import exp

    from eoctl.stores import sql

    session_zone = exp.SessionParameter(this=exp.Var(this="time_zone"), kind="session")
    return {"bit": lambda c: exp.cast(c, exp.DataType(this=exp.DataType.Type.UBIGINT)),  # CAST(... AS UNSIGNED)
            "decimal": lambda c: sql.fragment("cast(:c as double precision)", c=c),
            "timestamp": lambda c: sql.call("convert_tz", c, session_zone, "+00:00"),
            _UUID_BYTES: id_sql(store, "binary", 16).text}


#: a MySQL BINARY(16): a UUID's bytes (UUID_TO_BIN's), copied as the UUID's text
_UUID_BYTES = "binary(16)"


def mysql_copied_type(store: MySQLStore, data_type: str, octet_length: Any) -> str:
    """A MySQL column's type as its copy treats it: a BINARY(16) apart (_UUID_BYTES), any other
    as information_schema names it."""
    return _UUID_BYTES if id_sql(store, data_type, octet_length).family == "uuid_bytes" else data_type.lower()


def mysql_uuid_select(store: MySQLStore, table: str) -> str | None:
    """The select list that reads `table` with each BINARY(16) as its UUID's text (backticked
    names), for a reader of the table itself (Spark's JDBC); None when it has no such column."""
    from eoctl.stores.connection import connect, query

    with connect(store) as conn:
        cols = query(conn, store, "select column_name, data_type, character_octet_length from "
                     "information_schema.columns where table_schema = %s and table_name = %s order by ordinal_position",
                     [store.database, table])
    kinds = [(c, mysql_copied_type(store, t, n)) for c, t, n in cols]
    if not any(k == _UUID_BYTES for _c, k in kinds):
        return None
    from eoctl.stores import sql

    uuid_text = id_sql(store, "binary", 16).text
    items = [sql.fragment(":v as :c", v=uuid_text(sql.column(c)), c=sql.ident(c)) if k == _UUID_BYTES else sql.column(c)
             for c, k in kinds]
    # Spark's own session keeps the server's sql_mode: sqlglot's MySQL names in backquotes
    return ", ".join(item.sql(dialect="mysql") for item in items)


def mysql_snapshot(store: MySQLStore, table: str) -> str:
    """A Parquet copy of a MySQL or MariaDB table in the run's temporary folder, for the DuckDB
    engine: one read-only query streamed through connectorx in Arrow batches (connectorx: a Rust
    reader that fills Arrow arrays without Python objects, 10x PyMySQL's rows here, 1M rows in
    1.1 s at 100 MB; a large table is never whole in memory)."""
    import connectorx
    import pyarrow.parquet as pq

    from eoctl.scratch import subdir
    from eoctl.secrets import mask_text
    from eoctl.stores.connection import connect, query

    with connect(store) as conn:  # the columns, and a reachable server first (its one-line error)
        cols = query(conn, store, "select column_name, data_type, character_octet_length from "
                     "information_schema.columns where table_schema = %s and table_name = %s order by ordinal_position",
                     [store.database, table])
    if not cols:
        raise SourceError(f"table {table} does not exist in {describe(store)} (schema {store.schema_name})")
    from eoctl.stores import sql as build

    # connectorx's own session keeps the server's sql_mode: sqlglot's MySQL names in backquotes
    exprs = _copied_columns([(c, mysql_copied_type(store, t, n)) for c, t, n in cols], _MYSQL_NATIVE.__contains__,
                            _mysql_special(store), lambda c: build.fragment("cast(:c as varchar)", c=c))
    sql = build.statement("select :cols from :t", cols=exprs, t=build.table(store.database, table)).sql(dialect="mysql")
    target = subdir("mysql") / _copy_name(store.database, table)
    try:
        reader = connectorx.read_sql(_mysql_uri(store), sql, return_type="arrow_stream", batch_size=65_536)
        with pq.ParquetWriter(str(target), reader.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(batch)
    except Exception as exc:  # connectorx raises RuntimeError and its own types, with the URL in them
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        if store.password is not None:
            text = text.replace(store.password.get_secret_value(), "********")
        raise SourceError(f"table {table} in {describe(store)} cannot be read: {mask_text(text)}") from None
    return str(target)


def _mysql_uri(store: MySQLStore) -> str:
    from urllib.parse import quote

    auth = quote(store.user, safe="")
    if store.password is not None:
        auth += ":" + quote(store.password.get_secret_value(), safe="")
    return f"mysql://{auth}@{quote(store.host, safe='')}:{store.port}/{quote(store.database, safe='')}"


def _copied_columns(cols: list[tuple[str, str]], native, special: dict[str, Callable[[Any], Any]],
                    as_text: Callable[[Any], Any]) -> list[Any]:
    """The select list of a table's copy (nodes of stores.sql): a column of a `native` type as it
    is, a `special` type through its expression, any other as text (`as_text`); each keeps its name."""
    from sqlglot import exp

    from eoctl.stores import sql

    out: list[Any] = []
    for name, dtype in cols:
        col = sql.column(name)
        if dtype in special:
            out.append(exp.alias_(special[dtype](col), sql.ident(name)))
        elif native(dtype):
            out.append(col)
        else:
            out.append(exp.alias_(as_text(col), sql.ident(name)))
    return out


# (path, schema, table) -> (the DuckDB file's and its WAL's (size, mtime) when copied, the copy)
_snapshots: dict[tuple[str, str, str], tuple[tuple, str]] = {}
