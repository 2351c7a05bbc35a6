"""Short, guarded writes to a store (DuckDB, PostgreSQL, MySQL or MariaDB) for the commands that
change things.

One `Db` is one short-lived connection: DuckDB lets a single process write a file at a time, so
gc opens the file for one batch and closes it, and the pipeline is never locked out for long.
SQL is written once, as stores.sql builds it (names as quoted identifiers, values bound), and
compiled for the store's dialect and driver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from eoctl.config.model import DuckDBStore, MySQLStore
from eoctl.errors import SourceError
from eoctl.stores.connection import StoreConfig, qualified
from eoctl.stores.connection import (
    IdSql,
    connect,
    describe,
    query,
    table_column_types,
    table_columns,
    table_id_sql,
)

if TYPE_CHECKING:
    from sqlglot import exp


class Db:
    def __init__(self, store: StoreConfig, conn: Any) -> None:
        self.store = store
        self.conn = conn
        self.duckdb = isinstance(store, DuckDBStore)
        self.mysql = isinstance(store, MySQLStore)
        self._ids: dict[str, dict[str, IdSql]] = {}  # table -> column -> IdSql

    def table(self, name: str, alias: str | None = None) -> exp.Table:
        """`name` in the store's schema, as a node of stores.sql."""
        from eoctl.stores import sql

        return sql.table(self.store.schema_name, name, alias)

    def execute(self, sql: str | exp.Expression, params: Sequence[Any] = (), **parts: Any) -> list[tuple]:
        """Rows of a statement: a tree of stores.sql, or a template with `parts` (stores.sql.statement)."""
        return query(self.conn, self.store, _tree(sql, parts), params)

    def rowcount(self, sql: str | exp.Expression, params: Sequence[Any] = (), **parts: Any) -> int:
        """Execute a write and return how many rows it touched."""
        from eoctl.stores.sql import compiled

        sql, params = compiled(self.store, _tree(sql, parts), params)
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

    def make(self, table: str, made: Callable[[], bool], create: Callable[[], object]) -> None:
        """Run `create` (DDL of `table` and what goes with it) unless `made()` says it is done, where
        another eoctl process may do the same at that moment (gc-tokens and gc-blobs journal the
        intents they delete in one table; every changing command keeps the leases; audits that end
        together record at once).

        `made()` is asked first without a lock: a made table takes none, however often it is
        used (PostgreSQL's ALTER takes the table's exclusive lock even when its column is there, and
        would wait for every reader). Else PostgreSQL runs the rest in one transaction holding an
        advisory lock of the table's name, asks `made()` again and creates only what is missing: it
        checks IF NOT EXISTS before it creates, so the later of two creations failed on the
        catalog's unique index (and two ALTERs adding one column on a duplicate column). DuckDB has
        one writer per file; MySQL's DDL holds a metadata lock of the table."""
        if made():
            return
        if self.duckdb or self.mysql:
            create()
            return
        with self.tx():
            self.execute("select pg_advisory_xact_lock(%s)", [_lock_key(qualified(self.store, table))])
            if not made():  # another process may have made it meanwhile
                create()

    def columns(self, table: str) -> list[str] | None:
        return table_columns(self.conn, self.store, table)

    def column_types(self, table: str) -> dict[str, str]:
        return table_column_types(self.conn, self.store, table)

    def ids(self, table: str, column: str) -> IdSql:
        """How SQL meets `column` of `table` as ids (stores.connection.IdSql), asked once per table."""
        if table not in self._ids:
            self._ids[table] = table_id_sql(self.conn, self.store, table)
        return self._ids[table].get(column) or IdSql(self.store, "text")

    def ensure_copy_table(self, source: str, copy: str, extra: Sequence[tuple[str, str]]) -> list[str]:
        """Create `copy` (if absent) with `source`'s columns and types plus `extra` (name, SQL
        type) columns; returns `source`'s column names. Journals are such copies, so a row can be
        put back exactly as it was."""
        cols = self.columns(source)
        if cols is None:
            raise SourceError(f"table {source} does not exist in {describe(self.store)} (schema {self.store.schema_name})")

        def made() -> bool:
            present = self.columns(copy)
            return present is not None and all(name in present for name, _ in extra)

        def create() -> None:
            from eoctl.stores import sql

            present = self.columns(copy)
            if present is None:
                self.execute("create table if not exists :copy as select * from :source where 1 = 0",
                             copy=self.table(copy), source=self.table(source))
                present = cols
            # the extra columns one by one (MySQL's CREATE TABLE AS gives a `cast(null as ...)` column
            # no room for a value), each only if missing: a run killed between these statements
            # (MySQL's DDL commits each) leaves a copy the next run completes
            for name, sql_type in extra:
                if name not in present:
                    self.execute(f"alter table :copy add column :name {sql_type}",  # eoctl's own type names
                                 copy=self.table(copy), name=sql.ident(name))

        self.make(copy, made, create)
        return cols


def _tree(sql: str | exp.Expression, parts: dict[str, Any]) -> str | exp.Expression:
    from eoctl.stores.sql import statement

    return statement(sql, **parts) if parts else sql


def _lock_key(name: str) -> int:
    """A PostgreSQL advisory lock's key (a signed 64-bit number) for a table's qualified name."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(f"eoctl:{name}".encode(), digest_size=8).digest(), "big", signed=True)


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


def in_list(values: Sequence[Any]) -> exp.Tuple:
    """`(%s, %s, ...)` for a batch of values, for `column in :values`."""
    from sqlglot import exp

    from eoctl.stores.sql import params

    return exp.Tuple(expressions=params(len(values)))
