"""Short, guarded writes to a store (DuckDB or PostgreSQL) for the commands that change things.

One `Db` is one short-lived connection: DuckDB lets a single process write a file at a time, so
gc opens the file for one batch and closes it, and the pipeline is never locked out for long.
SQL is written with `%s` placeholders (psycopg's) and translated for DuckDB.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from eoctl.config.model import DuckDBStore, PostgresStore
from eoctl.errors import SourceError
from eoctl.stores.connection import qualified, quote_ident
from eoctl.stores.connection import connect, describe, table_columns

StoreConfig = DuckDBStore | PostgresStore


class Db:
    def __init__(self, store: StoreConfig, conn: Any) -> None:
        self.store = store
        self.conn = conn
        self.duckdb = isinstance(store, DuckDBStore)

    def table(self, name: str) -> str:
        return qualified(self.store, name)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        if self.duckdb:
            cur = self.conn.execute(sql.replace("%s", "?"), list(params))
            return cur.fetchall() if cur.description else []
        with self.conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            return cur.fetchall() if cur.description else []

    def rowcount(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute a write and return how many rows it touched."""
        if self.duckdb:
            return int(self.conn.execute(sql.replace("%s", "?"), list(params)).fetchone()[0])
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
        if self.columns(copy) is None:
            extras = ", ".join(f"cast(null as {t}) as {quote_ident(n)}" for n, t in extra)
            self.execute(f"create table if not exists {self.table(copy)} as "
                         f"select *, {extras} from {self.table(source)} where 1 = 0")
        return cols


@contextmanager
def open_db(store: StoreConfig, read_only: bool = False) -> Iterator[Db]:
    """A connection (read-write unless `read_only`); for DuckDB, waits (bounded) while another
    process holds the file, and never creates a missing one (see stores.connection.connect)."""
    with connect(store, read_only=read_only) as conn:
        if not isinstance(store, DuckDBStore):
            conn.autocommit = True  # transactions are explicit (Db.tx)
        yield Db(store, conn)


def in_list(values: Sequence[Any]) -> str:
    """`(%s, %s, ...)` for a batch of values."""
    return "(" + ", ".join(["%s"] * len(values)) + ")"
