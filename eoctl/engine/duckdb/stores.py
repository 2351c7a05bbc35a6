"""Store tables, sinks and blob prefixes read into a DuckDB run's database: each store table copied
once per run, sinks through DuckDB's readers (ORC through Arrow), blob prefixes listed through fsspec."""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config, SinkConfig
from eoctl.engine.duckdb.files import archive_files, visible_files
from eoctl.engine.duckdb.sql import flat_table, ident, no_rows, repr_sql, sql_utc_wall_time
from eoctl.engine.errors import out_of_memory
from eoctl.errors import SourceError

if TYPE_CHECKING:
    import duckdb
    from sqlglot import exp


def load_store_tables(con: duckdb.DuckDBPyConnection, layout, endpoints: list[str],
                      copies: dict[tuple[str, str], exp.Table], sent_outbox: bool = False) -> set[tuple[str, str]]:
    """Views `tokens`, `outbox`, `intents` (eoctl.expr.inputs.STORE_SCHEMAS, plus `ep`): each
    audited endpoint's rows of its table, read once (of an outbox that keeps sent rows, the pending
    ones; with `sent_outbox`, the sent ones too, as view `outbox_sent`); the (endpoint, kind) pairs
    that exist."""
    import duckdb
    import sqlglot
    from sqlglot import exp

    from eoctl.expr.inputs import STORE_SCHEMAS
    from eoctl.stores import sql
    from eoctl.stores.layout import KINDS, sent_node

    present: set[tuple[str, str]] = set()
    source_types: dict[str, dict[str, str]] = {}
    for view in (*KINDS, "outbox_sent") if sent_outbox else KINDS:
        kind = "outbox" if view == "outbox_sent" else view
        types = {"ep": "VARCHAR", **{c: _SQL_TYPES[t] for c, t in STORE_SCHEMAS[kind].items()}}
        selects: list[exp.Query] = []
        for name in endpoints:
            t = layout.table(name, kind)
            if t is None or (view == "outbox_sent" and not t.keeps_sent):
                continue
            present.add((name, kind))
            source = _snapshot(con, copies, t.store, t.table)
            key = source.sql(dialect="duckdb")
            if key not in source_types:
                described = exp.Describe(this=exp.select("*").from_(source.copy())).sql(dialect="duckdb")
                source_types[key] = dict(row[:2] for row in con.execute(described).fetchall())
            # configured names as sqlglot's quoted identifiers, values as its literals (a view binds none)
            cols: list[exp.Expression] = [exp.alias_(exp.cast(exp.Literal.string(name), "VARCHAR"), "ep")]
            for canonical, sql_type in list(types.items())[1:]:
                if canonical == t.owner_canonical and t.owner_column is None:
                    value: exp.Expression = exp.cast(exp.Literal.string(t.owner), sql_type)
                elif sql_type == "TIMESTAMP":  # a copy keeps an instant: its UTC wall time
                    column = t.col(canonical)
                    value = sql.fragment(sql_utc_wall_time(":c", source_types[key].get(column, "")),
                                         c=sql.column(column))
                else:
                    value = exp.cast(sql.column(t.col(canonical)), sql_type)
                cols.append(exp.alias_(value, sql.ident(canonical)))
            owned = (exp.EQ(this=sql.column(t.owner_column), expression=exp.Literal.string(t.owner))
                     if t.owner_column else None)
            sent = None
            if t.keeps_sent:
                assert t.sent_column is not None
                sent = _inlined(*sent_node(sql.column(t.sent_column), t.sent_values, "duckdb"))
                if view != "outbox_sent":
                    sent = exp.not_(sent)
            where = sql.every(owned, sent)
            unparsed = first_unparsed_time(con, kind, t.columns, source, where, source_types[key])
            if unparsed is not None:
                from eoctl.stores.layout import endpoint_unparsed_time

                raise endpoint_unparsed_time(t, *unparsed)
            selects.append(exp.select(*cols).from_(source.copy()).where(where))
        if not selects:
            selects = [sqlglot.parse_one(no_rows(types), read="duckdb")]
        union = selects[0]
        for select in selects[1:]:
            union = exp.union(union, select, distinct=False)
        try:
            # a view over the run's copies: each check reads only the columns it needs
            con.execute(exp.Create(this=exp.to_table(view), kind="VIEW", replace=True, expression=union)
                        .sql(dialect="duckdb"))
            con.execute(f"SELECT * FROM {view} LIMIT 0").fetchall()  # a column of the wrong type fails here
        except duckdb.Error as exc:  # a column of the wrong type
            if out_of_memory(str(exc)):  # not the tables' fault: main() says so
                raise
            raise SourceError(f"the {kind} tables cannot be read: {str(exc).splitlines()[0][:300]}") from None
    return present


def first_unparsed_time(con: duckdb.DuckDBPyConnection, kind: str, columns: dict[str, str],
                        source: exp.Expression | str, where: exp.Expression | None, types: dict[str, str]
                        ) -> tuple[str, str] | None:
    """(canonical, value) of the first value of a text column read as a time that is no time
    (eoctl.stores.layout.unparsed_time) among the rows of `source` (a sqlglot node, or DuckDB SQL
    of a table such as `read_parquet('...')`) that `where` (a condition; None or "": every row)
    keeps: one query, only for such columns (a time type needs none). `columns`: canonical -> the
    column of `source`; `types`: its columns' DuckDB types."""
    import sqlglot
    from sqlglot import exp

    from eoctl.stores import sql
    from eoctl.stores.layout import text_time_columns

    texts = text_time_columns(kind, columns, types)
    if not texts:
        return None
    if isinstance(source, str):
        source = sqlglot.parse_one(source, read="duckdb", into=exp.Table)
    bad = [sql.fragment("(:c is not null and try_cast(:c as timestamp) is null)", c=sql.column(c))
           for _canonical, c in texts]
    query = (exp.select(*[exp.cast(sql.column(c), "VARCHAR") for _canonical, c in texts], *bad)
             .from_(source.copy()).where(sql.every(exp.or_(*bad), where or None)).limit(1))
    row = con.execute(query.sql(dialect="duckdb")).fetchone()
    if row is None:
        return None
    return next((canonical, row[i]) for i, (canonical, _c) in enumerate(texts) if row[len(texts) + i])


_SQL_TYPES = {"string": "VARCHAR", "timestamp": "TIMESTAMP", "int64": "BIGINT", "int32": "INTEGER"}


def _inlined(node: exp.Expression, values: list[Any]) -> exp.Expression:
    """`node` with its bound values (stores.sql's placeholders, in order) as literals: a view of
    the run's database takes no bound value."""
    from sqlglot import exp

    node = node.copy()
    holes = [p for p in node.find_all(exp.Placeholder, bfs=False) if not p.this]
    assert len(holes) == len(values)
    for hole, value in zip(holes, values):
        hole.replace(exp.Literal.string(str(value)))
    return node


def copy_stores_ahead(con: duckdb.DuckDBPyConnection, config: Config, endpoints: list[str],
                      copies: dict[tuple[str, str], exp.Table], stopping, layout=None) -> None:
    """The DuckDB stores' tables of `endpoints` copied into `copies` (_snapshot's cache), and
    looked up for `layout` (the run's StoreLayout: its lookups then open no store of their own,
    0.02 s), as a Background job while the main thread imports and compiles (a 1M-token gc plan:
    the 0.15 s copy hidden behind 0.25 s of Ibis's import and a compile). It only gets ahead: the
    first copy or lookup that does not go through at once (a PostgreSQL store, a file another
    process holds, a table missing or damaged) ends it, and open_inputs makes that one and the
    rest in its usual order, with its waiting and its errors."""
    from eoctl.config.model import DuckDBStore
    from eoctl.stores.connection import store_named
    from eoctl.stores.layout import KINDS

    try:
        for name in endpoints:
            ep = config.endpoint(name)
            for kind in KINDS:
                spec = getattr(ep, kind)
                store_name = ep.store_of(spec)
                if store_name is None:
                    continue
                store = store_named(config, store_name)
                if not isinstance(store, DuckDBStore) or stopping.is_set():
                    return
                if layout is not None:
                    layout.look_up_attached(con, store_name)
                _snapshot(con, copies, store, spec.table, wait=False)
    except Exception:  # noqa: BLE001 - open_inputs makes this copy again and says what is wrong
        return


def _snapshot(con: duckdb.DuckDBPyConnection, copies: dict[tuple[str, str], exp.Table], store, table: str,
              wait: bool = True) -> exp.Table:
    """The source (a sqlglot node) of a copy of a store table, made once per run (`copies`): a DuckDB store's
    table copied into a temporary table of the run's database through a read-only ATTACH held
    for that one statement (as the Spark engine's Parquet snapshot holds it, without writing and
    reading Parquet: 0.13 s against 0.39 s for 1M tokens); a PostgreSQL or MySQL table read in one
    streamed query into Parquet (eoctl.stores.snapshots). A table several endpoints share is read once.
    `wait`: wait for a DuckDB store another process holds (else a SourceError at once)."""
    from sqlglot import exp

    from eoctl.config.model import DuckDBStore, MySQLStore
    from eoctl.stores import sql
    from eoctl.stores.connection import describe
    from eoctl.stores.snapshots import mysql_snapshot, postgres_snapshot

    key = (describe(store) + f"/{store.schema_name}", table)
    if key not in copies:
        if isinstance(store, DuckDBStore):
            name = f"store_copy_{len(copies)}"
            _copy_from_duckdb_store(con, store, table, name, wait)
            copies[key] = sql.table(None, name)
        else:
            snapshot = mysql_snapshot if isinstance(store, MySQLStore) else postgres_snapshot
            copies[key] = exp.Table(this=sql.call("read_parquet", str(snapshot(store, table))))
    return copies[key]


def _copy_from_duckdb_store(con: duckdb.DuckDBPyConnection, store, table: str, name: str, wait: bool = True) -> None:
    from eoctl.stores.connection import attached_read_only
    from eoctl.stores.snapshots import copy_duckdb_table

    with attached_read_only(con, store, wait=wait) as catalog:
        # OR REPLACE: copies ahead stopped between this statement and the detach leave one
        copy_duckdb_table(con, store, table, lambda sql: f"CREATE OR REPLACE TEMP TABLE {ident(name)} AS {sql}",
                          catalog=catalog)


def read_sink(con: duckdb.DuckDBPyConnection, config: Config, sink: SinkConfig, view: str,
              copies: dict[tuple[str, str], exp.Table], check_columns: bool = True):
    """Make `view` the sink's rows; its Ibis schema. `check_columns`: a configured column the sink
    lacks is a SourceError naming the columns there are."""
    import duckdb
    import ibis
    from ibis.backends.sql.datatypes import DuckDBType

    from eoctl.expr.inputs import check_sink_columns
    from eoctl.stores.connection import store_named

    if sink.path is None:
        assert sink.store is not None and sink.table is not None
        source = _snapshot(con, copies, store_named(config, sink.store), sink.table).sql(dialect="duckdb")
    elif sink.format == "orc":
        import pyarrow.dataset as ds

        files = archive_files(sink.path, "orc", what="sink")
        con.register(f"{view}_arrow", ds.dataset(files, format="orc"))  # scanned lazily, batch by batch
        source = ident(f"{view}_arrow")
    else:
        files = ", ".join(repr_sql(f) for f in archive_files(sink.path, sink.format or "", what="sink"))
        readers = {"parquet": "read_parquet([{}])", "csv": "read_csv([{}], header = true)",
                   "json": "read_json([{}], format = 'newline_delimited')"}
        if sink.format not in readers:
            raise SourceError(f"sink {sink.name}: the DuckDB engine does not read {sink.format} files")
        source = readers[sink.format].format(files)
    try:
        con.execute(f"CREATE OR REPLACE VIEW {ident(view)} AS SELECT * FROM {source}")
        described = con.execute(f"DESCRIBE {ident(view)}").fetchall()
    except duckdb.Error as exc:  # unreadable files
        if out_of_memory(str(exc)):  # not the tables' fault: main() says so
            raise
        raise SourceError(f"sink {sink.name} cannot be read: {str(exc).splitlines()[0][:300]}") from None
    columns = {row[0]: DuckDBType.from_string(row[1]) for row in described}
    if check_columns:
        check_sink_columns(config, sink, list(columns))
    return ibis.schema(columns)


def _modified_ms(fs, path: str) -> dt.datetime:
    """A file's last modification (UTC wall time) truncated to the millisecond, as Hadoop gives it.
    A local file's is taken from its nanoseconds: fsspec's float seconds round to the microsecond,
    and .1239998 s became .124 where Hadoop gives .123 (the engines then disagreed on EO401's
    evidence)."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        ms = os.stat(fs._strip_protocol(path)).st_mtime_ns // 1_000_000
        return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)
    modified = fs.modified(path).astimezone(dt.timezone.utc).replace(tzinfo=None)
    return modified.replace(microsecond=modified.microsecond // 1000 * 1000)


def list_blobs(con: duckdb.DuckDBPyConnection, uri: str, view: str, with_hash: bool,
               options: dict[str, Any] | None = None) -> None:
    """Make `view` the listing of a blob prefix (eoctl.expr.inputs.BLOB_LISTING_SCHEMA): names
    relative to the prefix, size, last modification (to the millisecond, as Hadoop gives it) and,
    when asked, the sha256 of the content. A blob gone between listing and reading is gone."""
    import hashlib

    from eoctl.blobfs import open_prefix
    from eoctl.expr.blobs import prefix_path

    fs, root = open_prefix(uri, options)
    try:
        if not fs.exists(root):  # as Spark's listing of a missing path
            raise SourceError(f"blob prefix {uri} cannot be listed: it does not exist")
        # a symbolic link to a file is a blob (its target's content and time, as Hadoop reads it); one
        # to a folder is never gone through: as on Spark
        # (eoctl.blobfs.linked_folders), no blob outside the prefix is listed or moved
        listed = [(path, info) for path, info in visible_files(fs, root)
                  if info.get("type") == "file" or (info.get("islink") and fs.isfile(path))]
    except (OSError, ValueError) as exc:
        raise SourceError(f"blob prefix {uri} cannot be listed: {exc}") from None
    prefix = prefix_path(uri)
    rows = []
    for path, info in listed:
        at = path.find(prefix)
        name = path[at + len(prefix):] if at >= 0 else path
        try:
            modified = _modified_ms(fs, path)
            digest = None
            if with_hash:
                h = hashlib.sha256()
                with fs.open(path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
                digest = h.hexdigest()
        except FileNotFoundError:
            continue
        rows.append({"name": name, "size": int(info["size"]), "modified": modified, "actual_sha256": digest})
    flat_table(con, view, rows, {"name": "VARCHAR", "size": "BIGINT", "modified": "TIMESTAMP", "actual_sha256": "VARCHAR"})
