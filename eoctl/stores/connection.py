"""Open a DB-API connection to a configured store, and look up its tables' columns.

Spark reads the big tables; this module answers small questions (is the server up, which
columns does a table have) and, later, performs the guarded writes of gc and replay.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from eoctl.config.model import DuckDBStore, PostgresStore
from eoctl.errors import SourceError

StoreConfig = DuckDBStore | PostgresStore


def describe(store: StoreConfig) -> str:
    if isinstance(store, DuckDBStore):
        return f"DuckDB file {store.path}"
    return f"PostgreSQL {store.user}@{store.host}:{store.port}/{store.database}"


def postgres_conninfo(store: PostgresStore) -> dict[str, Any]:
    params: dict[str, Any] = {
        "host": store.host,
        "port": store.port,
        "dbname": store.database,
        "user": store.user,
        "connect_timeout": 10,
        "application_name": "eoctl",
    }
    if store.password is not None:
        params["password"] = store.password.get_secret_value()
    if store.sslmode:
        params["sslmode"] = store.sslmode
    params.update(store.options)
    return params


@contextmanager
def connect(store: StoreConfig, *, read_only: bool = True) -> Iterator[Any]:
    """A DB-API connection; SourceError (one line, no secrets) when the store is unreachable."""
    if isinstance(store, DuckDBStore):
        import duckdb
        from pathlib import Path

        if read_only and not Path(store.path).exists():
            raise SourceError(f"{describe(store)} does not exist")
        try:
            conn = duckdb.connect(store.path, read_only=read_only)
        except duckdb.Error as exc:
            raise SourceError(f"{describe(store)} cannot be opened: {str(exc).splitlines()[0]}") from None
    else:
        import psycopg

        try:
            conn = psycopg.connect(**postgres_conninfo(store))
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SourceError(f"{describe(store)} is not reachable: {reason}") from None
    try:
        yield conn
    finally:
        conn.close()


def table_columns(conn: Any, store: StoreConfig, table: str) -> list[str] | None:
    """Column names of `table` in the store's schema, in order; None when the table does not exist."""
    sql = (
        "select column_name from information_schema.columns "
        "where table_schema = %s and table_name = %s order by ordinal_position"
    )
    if isinstance(store, DuckDBStore):
        rows = conn.execute(sql.replace("%s", "?"), [store.schema_name, table]).fetchall()
    else:
        with conn.cursor() as cur:
            cur.execute(sql, (store.schema_name, table))
            rows = cur.fetchall()
    return [r[0] for r in rows] or None
