"""Short, guarded writes to a store (DuckDB, PostgreSQL, MySQL or MariaDB) for the commands that
change things.

One `Db` is one short-lived connection: DuckDB lets a single process write a file at a time, so
gc opens the file for one batch and closes it, and the pipeline is never locked out for long.
SQL is written once, with `%s` placeholders (psycopg's and PyMySQL's), and translated for DuckDB
(`?`) and MySQL (stores.connection.mysql_sql; its sessions take double-quoted identifiers).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from eoctl.config.model import DuckDBStore, MySQLStore
from eoctl.errors import SourceError
from eoctl.stores.connection import StoreConfig, qualified, quote_ident
from eoctl.stores.connection import connect, describe, in_dialect, query, table_columns


class Db:
    def __init__(self, store: StoreConfig, conn: Any) -> None:
        self.store = store
        self.conn = conn
        self.duckdb = isinstance(store, DuckDBStore)
        self.mysql = isinstance(store, MySQLStore)

    def table(self, name: str) -> str:
        return qualified(self.store, name)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return query(self.conn, self.store, sql, params)

    def rowcount(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute a write and return how many rows it touched."""
        sql, params = in_dialect(self.store, sql, params)
        if self.duckdb:
            return int(self.conn.execute(sql, params).fetchone()[0])
        with self.conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            return cur.rowcount

    @contextmanager
    def tx(self) -> Iterator[Db]:
        """One transaction: committed at the end of the block, rolled back on any error."""
        if self.duckdb:
            self.conn.execute("begin transaction")
            try:
                yield self
            except BaseException:
                self.conn.execute("rollback")
                raise
            self.conn.execute("commit")
        elif self.mysql:  # InnoDB: the rows a statement writes or locks stay locked until the commit
            self.conn.begin()
            try:
                yield self
            except BaseException:
                self.conn.rollback()
                raise
            self.conn.commit()
        else:
            with self.conn.transaction():
                yield self

    def columns(self, table: str) -> list[str] | None:
        return table_columns(self.conn, self.store, table)

    def ensure_copy_table(self, source: str, copy: str, extra: Sequence[tuple[str, str]]) -> list[str]:
        """Create `copy` (if absent) with `source`'s columns and types plus `extra` (name, SQL
        type) columns; returns `source`'s column names. Journals are such copies, so a row can be
        put back exactly as it was."""
        cols = self.columns(source)
        if cols is None:
            raise SourceError(f"table {source} does not exist in {describe(self.store)} (schema {self.store.schema_name})")
        present = self.columns(copy)
        if present is None:
            self.execute(f"create table if not exists {self.table(copy)} as select * from {self.table(source)} "
                         "where 1 = 0")
            present = cols
        # the extra columns one by one (MySQL's CREATE TABLE AS gives a `cast(null as ...)` column no
        # room for a value), each only if missing: a run killed between these statements (MySQL's DDL
        # commits each) leaves a copy the next run completes
        for name, sql_type in extra:
            if name not in present:
                self.execute(f"alter table {self.table(copy)} add column {quote_ident(name)} {sql_type}")
        return cols


@contextmanager
def open_db(store: StoreConfig, read_only: bool = False) -> Iterator[Db]:
    """A connection (read-write unless `read_only`); for DuckDB, waits (bounded) while another
    process holds the file, and never creates a missing one (see stores.connection.connect)."""
    with connect(store, read_only=read_only) as conn:
        if isinstance(store, MySQLStore):
            conn.autocommit(True)  # transactions are explicit (Db.tx)
        elif not isinstance(store, DuckDBStore):
            conn.autocommit = True
        yield Db(store, conn)


def in_list(values: Sequence[Any]) -> str:
    """`(%s, %s, ...)` for a batch of values."""
    return "(" + ", ".join(["%s"] * len(values)) + ")"
