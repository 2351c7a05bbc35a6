"""Open a DB-API connection to a configured store, and look up its tables' columns.

Spark reads the big tables; this module answers small questions (is the server up, which
columns does a table have) and, later, performs the guarded writes of gc and replay.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from eoctl.config.model import Config, DuckDBStore, MySQLStore, PostgresStore
from eoctl.errors import SourceError, UsageError
from eoctl.logs import get as get_logger

if TYPE_CHECKING:
    from sqlglot import exp

_log = get_logger("stores")

StoreConfig = DuckDBStore | PostgresStore | MySQLStore

#: the zone of every eoctl session on a store: a timestamp without time zone holds UTC (docs/configuration.md)
SESSION_ZONE = "UTC"
#: every eoctl session on MySQL or MariaDB: identifiers in double quotes and `||` as standard SQL has
#: them (eoctl's SQL is written once for every store), UTC for TIMESTAMP columns and NOW()
MYSQL_SESSION = ("SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES,PIPES_AS_CONCAT'), "
                 "time_zone = '+00:00'")
T = TypeVar("T")


def describe(store: StoreConfig) -> str:
    if isinstance(store, DuckDBStore):
        return f"DuckDB file {store.path}"
    if isinstance(store, MySQLStore):
        return f"MySQL {store.user}@{store.host}:{store.port}/{store.database}"
    return f"PostgreSQL {store.user}@{store.host}:{store.port}/{store.database}"


def mysql_params(store: MySQLStore) -> dict[str, Any]:
    """PyMySQL's connect() keywords for `store`. PyMySQL: pure Python, so it installs wherever eoctl
    does (mysqlclient needs the C client library and headers); it answers the small questions and
    makes the guarded writes, while bulk reads go through connectorx (stores.snapshots)."""
    from pymysql.constants import CLIENT

    params: dict[str, Any] = {
        "host": store.host, "port": store.port, "user": store.user, "database": store.database,
        "connect_timeout": 10, "charset": "utf8mb4", "init_command": MYSQL_SESSION,
        # an UPDATE reports the rows it matched, as PostgreSQL and DuckDB do, not only those it changed
        "client_flag": CLIENT.FOUND_ROWS,
    }
    if store.password is not None:
        params["password"] = store.password.get_secret_value()
    for key, value in store.options.items():
        params[key] = int(value) if value.isdigit() else value
    return params


def connection_key(store: StoreConfig) -> tuple:
    """What one connection reaches: stores with equal keys (schemas of one DuckDB file, or of one
    PostgreSQL database as one user) are read through one connection. Held in memory only: it
    holds the password."""
    if isinstance(store, DuckDBStore):
        from pathlib import Path

        return ("duckdb", str(Path(store.path).resolve()))
    if isinstance(store, MySQLStore):
        return ("mysql", store.host, store.port, store.database, store.user,
                store.password.get_secret_value() if store.password else None, tuple(sorted(store.options.items())))
    return ("postgres", tuple(sorted((k, str(v)) for k, v in postgres_conninfo(store).items())))


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
    # every session in UTC, whatever the server's `timezone`: a timestamp without time zone is UTC
    # in eoctl's comparisons (gc's cutoffs, bound as aware times), as on DuckDB and MySQL
    params["options"] = f"-c TimeZone={SESSION_ZONE} " + str(store.options.get("options", ""))
    return params


def _waiting_for_lock(store: DuckDBStore, attempt: Callable[[], T], seconds: float | None = None) -> T:
    """`attempt()` (an open or an ATTACH of the store's file), tried again while another process
    has the file, up to `seconds` (default `store.lock_wait_seconds`; 0: once).

    DuckDB lets one process write a file and no other process open it meanwhile (readers share a
    read-only open among themselves). Every eoctl open is short, one batch or one snapshot, so
    waiting for a turn is what lets an audit, a gc run and the pipeline take turns; the wait is
    bounded, and said on stderr, so a file held for good ends in one clear line, not a hang.
    """
    import duckdb

    seconds = store.lock_wait_seconds if seconds is None else seconds
    deadline = time.monotonic() + seconds
    said = False
    while True:
        try:
            return attempt()
        except duckdb.Error as exc:
            reason = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
            if not re.search(r"\block\b", reason.lower()):  # a word: "block" is a corrupt file's
                raise SourceError(f"{describe(store)} cannot be opened: {reason}") from None
            if time.monotonic() >= deadline:
                raise SourceError(f"{describe(store)} stayed in use by another process for {seconds:g}s: {reason}",
                                  hint="raise lock_wait_seconds of the store, or run when the other process is done"
                                  ) from None
            if not said:
                _log.warning("%s is in use by another process; waiting up to %gs for it",
                             describe(store), seconds)
                said = True
            time.sleep(0.1)


def _open_duckdb(store: DuckDBStore, read_only: bool) -> Any:
    import duckdb

    conn = _waiting_for_lock(store, lambda: duckdb.connect(store.path, read_only=read_only))
    conn.execute(f"SET TimeZone = '{SESSION_ZONE}'")
    return conn


def _must_exist(store: DuckDBStore) -> None:
    from pathlib import Path

    if not Path(store.path).exists():  # never create a store out of a typo in a path
        raise SourceError(f"{describe(store)} does not exist")


@contextmanager
def attached_read_only(con: Any, store: DuckDBStore, *, wait: bool = True) -> Iterator[str]:
    """The store's file attached read-only to DuckDB connection `con` (another database: the
    DuckDB engine's own), waiting for its turn as an open does (`wait`), else a SourceError at
    once; yields the catalog name. Detached on leaving, so the file is held only for the
    statements inside."""
    import uuid

    _must_exist(store)
    from sqlglot import exp

    from eoctl.stores import sql

    alias = f"eoctl_store_{uuid.uuid4().hex[:8]}"
    # DuckDB's ATTACH takes no bound value: the path a literal, quoted by sqlglot's generator
    attach = exp.Attach(this=exp.alias_(exp.Literal.string(str(store.path)), sql.ident(alias)), exists=False,
                        expressions=[exp.AttachOption(this=exp.var("READ_ONLY"))]).sql(dialect="duckdb")
    _waiting_for_lock(store, lambda: con.execute(attach), None if wait else 0)
    try:
        yield alias
    finally:
        con.execute(exp.Detach(this=sql.ident(alias), exists=False).sql(dialect="duckdb"))


@contextmanager
def connect(store: StoreConfig, *, read_only: bool = True) -> Iterator[Any]:
    """A DB-API connection; SourceError (one line, no secrets) when the store is unreachable."""
    if isinstance(store, DuckDBStore):
        _must_exist(store)
        conn = _open_duckdb(store, read_only)
    elif isinstance(store, MySQLStore):
        import pymysql

        try:
            conn = pymysql.connect(**mysql_params(store))
        except pymysql.MySQLError as exc:
            raise SourceError(f"{describe(store)} is not reachable: {_mysql_reason(exc)}") from None
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


def _mysql_reason(exc: BaseException) -> str:
    """A PyMySQL error as one line without secrets: (code, message) -> message."""
    from eoctl.secrets import mask_text

    args = getattr(exc, "args", ())
    text = str(args[1]) if len(args) >= 2 else str(exc)
    return mask_text(text.strip().splitlines()[0][:300]) if text.strip() else type(exc).__name__


def query(conn: Any, store: StoreConfig, sql: Any, params: Any = ()) -> list[tuple]:
    """Rows of a statement (stores.sql: a tree, or a template without names) on a connection of
    `store`, compiled for its dialect and driver."""
    from eoctl.stores.sql import compiled

    sql, params = compiled(store, sql, params)
    if isinstance(store, DuckDBStore):
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []
    with conn.cursor() as cur:
        cur.execute(sql, tuple(params))
        return list(cur.fetchall()) if cur.description else []


#: the modules whose errors are a store's answer (a missing table, a wrong type), not a bug
DRIVER_MODULES = ("duckdb", "_duckdb", "psycopg", "pymysql")


class TableColumns(list):
    """A table's column names in order (a list of them), and each one's type: `types`, column ->
    information_schema's data_type in lower case (timestamp with time zone, integer, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.types: dict[str, str] = {}


def schema_columns(conn: Any, store: StoreConfig, table: str | None = None,
                   catalog: str | None = None) -> dict[str, TableColumns]:
    """Table name -> its columns (TableColumns), for every table of the store's schema (one query:
    a run looks up its tables in one open of each store), or for `table` alone. `catalog`: the
    name a DuckDB store's file is attached as on `conn` (attached_read_only)."""
    from eoctl.stores import sql

    params = [store.schema_name]
    conditions = [sql.fragment("table_schema = %s")]
    if table is not None:
        conditions.append(sql.fragment("table_name = %s"))
        params.append(table)
    if catalog is not None:
        conditions.append(sql.fragment("table_catalog = %s"))
        params.append(catalog)
    rows = query(conn, store, sql.statement("select table_name, column_name, data_type from information_schema.columns "
                                            "where :cond order by table_name, ordinal_position",
                                            cond=sql.every(*conditions)), params)
    out: dict[str, TableColumns] = {}
    for name, column, data_type in rows:
        columns = out.setdefault(name, TableColumns())
        columns.append(column)
        columns.types[column] = str(data_type).lower()
    return out


def table_columns(conn: Any, store: StoreConfig, table: str) -> TableColumns | None:
    """Column names of `table` in the store's schema, in order; None when the table does not exist."""
    return schema_columns(conn, store, table).get(table)


def table_column_types(conn: Any, store: StoreConfig, table: str) -> dict[str, str]:
    """Column name -> its type as the store names it (information_schema's data_type, lower case:
    uuid, character varying, binary, blob, ...) for `table` in the store's schema; empty when absent."""
    rows = query(conn, store, "select column_name, data_type from information_schema.columns "
                              "where table_schema = %s and table_name = %s", [store.schema_name, table])
    return {str(name): str(kind).lower() for name, kind in rows}


def table_id_sql(conn: Any, store: StoreConfig, table: str) -> dict[str, IdSql]:
    """Column name -> how SQL meets it as a column of ids (IdSql), for `table` in the store's schema."""
    rows = query(conn, store, "select column_name, data_type, character_octet_length from information_schema.columns "
                              "where table_schema = %s and table_name = %s", [store.schema_name, table])
    return {str(name): id_sql(store, str(kind), length) for name, kind, length in rows}


class IdSql:
    """How store SQL meets one column of ids: an id goes in and comes out as its text (what record
    headers carry and what the engines read), whatever type the store keeps it in: text, a uuid
    (PostgreSQL, DuckDB, MariaDB), a UUID's 16 bytes (MySQL's BINARY(16), as UUID_TO_BIN makes
    them) or another binary (the text's UTF-8 bytes). Each method gives a node of stores.sql."""

    def __init__(self, store: StoreConfig, family: str) -> None:
        self.store = store
        self.family = family  # text | uuid | uuid_bytes | bytes

    def param(self) -> exp.Expression:
        """One bound id as a value of the column's type: the column's index serves it."""
        from eoctl.stores import sql

        if self.family == "uuid_bytes":
            return sql.call("unhex", sql.call("replace", sql.param(), "-", ""))
        if self.family == "bytes":
            if isinstance(self.store, PostgresStore):
                return sql.call("convert_to", sql.param(), "UTF8")
            if isinstance(self.store, DuckDBStore):
                return sql.call("encode", sql.param())
            from sqlglot import exp

            return exp.cast(sql.param(), exp.DataType.build("binary"))
        return sql.param()  # a uuid column takes a uuid's text: psycopg binds text untyped, DuckDB and MariaDB cast it

    def params(self, count: int) -> exp.Tuple:
        """`(p, p, ...)` of `count` ids, for `column in :ids`."""
        from sqlglot import exp

        return exp.Tuple(expressions=[self.param() for _ in range(count)])

    def text(self, value: exp.Expression) -> exp.Expression:
        """`value` (a value of the column) as the id's text."""
        from eoctl.stores import sql

        if self.family == "uuid_bytes":  # MySQL's own CONCAT: a NULL id stays NULL
            digits = sql.call("lower", sql.call("hex", value))
            parts = [sql.call("substr", digits, sql.literal(at), sql.literal(n))
                     for at, n in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))]
            return sql.call("concat", *[p for part in parts for p in (part, sql.literal("-"))][:-1])
        if self.family == "bytes":
            if isinstance(self.store, PostgresStore):
                return sql.call("convert_from", value, "UTF8")
            if isinstance(self.store, DuckDBStore):
                return sql.call("decode", value)
            return sql.fragment("cast(:v as varchar)", v=value)  # MySQL: CAST(... AS CHAR)
        if self.family == "uuid":
            return sql.fragment("cast(:v as varchar)", v=value)  # a str, not the driver's UUID object
        return value


def id_sql(store: StoreConfig, data_type: str, octet_length: Any = None) -> IdSql:
    """IdSql of a column of `data_type` (information_schema's) and byte length."""
    kind = data_type.lower()
    if kind == "uuid":
        return IdSql(store, "uuid")
    if kind in _BINARY_TYPES:
        sixteen = isinstance(store, MySQLStore) and kind == "binary" and octet_length is not None and int(octet_length) == 16
        return IdSql(store, "uuid_bytes" if sixteen else "bytes")
    return IdSql(store, "text")


#: how a type's values compare with another type's: the family of information_schema's data_type
_BINARY_TYPES = ("binary", "varbinary", "bytea", "blob", "tinyblob", "mediumblob", "longblob")


def id_family(data_type: str) -> str:
    """uuid | binary | text: what a store's column of ids holds, for comparing two such columns."""
    kind = data_type.lower()
    if kind == "uuid":
        return "uuid"
    if kind in _BINARY_TYPES:
        return "binary"
    return "text"


def comparable_ids(store: StoreConfig, left: tuple[exp.Expression, str],
                   right: tuple[exp.Expression, str]) -> tuple[exp.Expression, exp.Expression]:
    """Two id columns (each (node, data_type)) made comparable with `=` or IN: unchanged when their
    types are of one family (an index serves the comparison), else both as the id's hex digits in
    lower case (a uuid's text without hyphens, a binary(16)'s bytes): PostgreSQL has no `uuid =
    varchar`, and MySQL compares a BINARY(16) with text byte for byte. Ids that are not UUIDs may
    then compare equal where they differ in case or hyphens only: the guards this serves then keep
    more, never less."""
    if id_family(left[1]) == id_family(right[1]):
        return left[0], right[0]
    return _hex_digits(store, *left), _hex_digits(store, *right)


def _hex_digits(store: StoreConfig, value: exp.Expression, data_type: str) -> exp.Expression:
    from eoctl.stores import sql

    if id_family(data_type) == "binary":
        if isinstance(store, PostgresStore):
            return sql.call("encode", value, "hex")
        return sql.call("lower", sql.call("hex", value))
    return sql.fragment("lower(replace(cast(:v as varchar), '-', ''))", v=value)


def sql_literal(value: str) -> str:
    """A string as a SQL literal, for the few statements that take no parameter (DuckDB's COPY
    ... TO and ATTACH): quotes doubled."""
    return "'" + value.replace("'", "''") + "'"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def backticked(name: str) -> str:
    """A MySQL identifier for a session eoctl did not set up (connectorx's, Spark's JDBC reads),
    whose sql_mode may lack ANSI_QUOTES."""
    return "`" + name.replace("`", "``") + "`"


def qualified(store: StoreConfig, table: str) -> str:
    return f"{quote_ident(store.schema_name)}.{quote_ident(table)}"


def store_named(config: Config, name: str) -> StoreConfig:
    try:
        return config.stores[name]
    except KeyError:
        raise UsageError(f"unknown store {name!r} (configured: {', '.join(sorted(config.stores)) or 'none'})") from None
