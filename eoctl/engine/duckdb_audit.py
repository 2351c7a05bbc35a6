"""The audit on the DuckDB engine: the inputs of eoctl.expr.inputs as views of the run's database,
then every selected check of eoctl.expr.catalog compiled to DuckDB's SQL, counted and sampled.

Store tables are copied once per run, as the Spark engine copies them (a DuckDB store is held for
one short read-only statement; a PostgreSQL table is read in one streamed query), sinks read
through DuckDB's readers (ORC through Arrow), blob prefixes listed through fsspec.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eoctl.engine.duckdb import (
    Background,
    _ident,
    archive_files,
    build_working_copy,
    connect,
    flat_table,
    list_archives,
    repr_sql,
    sql_utc_wall_time,
    visible_files,
    working_copy_sql,
)
from eoctl.errors import SourceError
from eoctl.secrets import mask_text, redact

if TYPE_CHECKING:
    import duckdb

    from eoctl.config.model import Config, SinkConfig
    from eoctl.expr.inputs import Scope
    from eoctl.options import AuditOptions


def open_inputs(con: duckdb.DuckDBPyConnection, config: Config, options: AuditOptions, step: Callable[[str], None],
                *, inputs: frozenset[str] = frozenset(), layout=None, keep_records: bool = True, index=None,
                copies: dict[tuple[str, str], str] | None = None, listed: dict[str, list[str]] | None = None) -> Scope:
    """Make the tables of eoctl.expr.inputs views of `con`: the records of every audited input
    (with their log starts and undecodable lines), the store tables, and what `inputs` names
    (eoctl.findings.INPUTS: sinks, blob listings and their hashes, transactions); the scope that
    describes them. `layout`: the run's StoreLayout, when it has one; `keep_records`: computed once
    into the run's database (many checks read them), else a view; `index` (eoctl.engine.
    duckdb_index.IndexRun): the record index the audit continues or keeps; `copies`: the store
    tables copied already (copy_stores_ahead), by _snapshot's key; `listed`: the topic archives'
    files, listed already (list_archives)."""
    from eoctl.stores.layout import StoreLayout

    scope = _scope(config, options)
    step("reading the records of every input")
    build_working_copy(con, config, list(scope.endpoints), options, keep=keep_records, index=index, listed=listed)
    scope.layout = layout or StoreLayout(config)
    step("reading the store tables")
    copies = {} if copies is None else copies
    scope.tables = load_store_tables(con, scope.layout, list(scope.endpoints), copies)
    scope.refuse_misnamed()
    for name, ep in scope.endpoints.items():
        for sink in ep.sinks if "sinks" in inputs else ():
            scope.sink_schemas[(name, sink.name)] = read_sink(con, config, sink, scope.sink_view(name, sink), copies)
        if ep.blobs and "blobs" in inputs:
            step(f"listing the blobs of {name}")
            list_blobs(con, ep.blobs, scope.blob_view(name), "blob_hashes" in inputs, ep.blob_options)
    if "transactions" in inputs:
        load_transactions(con, scope)
    return scope


class DuckDBRun:
    """The inputs of eoctl.expr.inputs opened in a DuckDB database of the run's own (eoctl.engine.run.
    EngineRun): the records, the store tables, and what `inputs` names (open_inputs); with
    `options.since_last` the records continue the newest recorded index, and with `index_path`
    they become this run's part of the index (keep_index)."""

    def __init__(self, config: Config, options: AuditOptions, step: Callable[[str], None], *,
                 inputs: frozenset[str] = frozenset(), layout=None, keep_records: bool = True,
                 index_path: str | None = None) -> None:
        from eoctl.engine import duckdb_index

        self.config = config
        self.options = options
        self._records_kept = keep_records
        self._pending: Background | None = None
        self._index_kept = False
        self.index = duckdb_index.IndexRun(partial=index_path)
        self.con = connect(config.engine.memory_limit)
        try:
            if options.since_last or index_path:
                self.index = duckdb_index.IndexRun.open(config, _scope(config, options).endpoints, options.since_last,
                                                        index_path)
            from eoctl.stores.layout import StoreLayout

            copies: dict[tuple[str, str], str] = {}
            endpoints = options.endpoints or list(config.endpoints)
            layout = layout or StoreLayout(config)
            self._start(lambda stopping: copy_stores_ahead(self.con, config, endpoints, copies, stopping, layout))
            # while the stores are copied: Ibis's import (0.2 s, when the flow has not needed it
            # yet), the working copy's compile, and the topic archives listed (a local one: 0.01 s)
            from eoctl.expr import Dialect

            self.dialect = Dialect.duckdb
            working_copy_sql()
            listed = list_archives(config, endpoints)
            indexed = self.index if (options.since_last or index_path) else None
            self.scope = open_inputs(self._settled(), config, options, step, inputs=inputs, layout=layout,
                                     index=indexed, keep_records=keep_records, copies=copies, listed=listed)
        except BaseException:
            self.release()
            raise

    @property
    def base(self):
        return self.index.base

    @property
    def fallback(self) -> str | None:
        return self.index.fallback

    def record_count(self) -> int:
        return self._settled().execute("SELECT count(*) FROM records").fetchall()[0][0]

    def fresh_stats(self) -> list[tuple[str, str, int, int, int, int]]:
        from eoctl.engine import duckdb_index

        if self.index.base is None and self.index.partial is None:
            return []
        return duckdb_index.fresh_stats(self._settled())

    def keep_index(self, run_id: str, stats: list):
        from eoctl.engine import duckdb_index

        kept = duckdb_index.keep(self._settled(), self.config, run_id, self.index, self.scope.endpoints,
                                 self.options.now.isoformat(), stats)
        self._index_kept = True
        return kept

    def _start(self, job: Callable[[Any], Any]) -> None:
        """`job` as the run's Background job. A signal meanwhile takes effect once the job is
        recorded, for release() to stop: never a thread the run does not know of, which would
        still be inside DuckDB when the interpreter ends (the process then aborts)."""
        from eoctl.interrupts import deferred

        with deferred():
            self._pending = Background(self.con, job)

    def _settled(self) -> duckdb.DuckDBPyConnection:
        """The run's connection, once the Background job on it is done (its error raised here;
        a signal while waiting leaves the job for release() to stop)."""
        if self._pending is not None:
            self._pending.wait()
            self._pending = None
        return self.con

    def keep(self, name: str, sql: str) -> None:
        self._settled().execute(f"CREATE OR REPLACE TEMP TABLE {_ident(name)} AS {sql}")

    def records_for(self, columns) -> str:
        if self._records_kept:
            return "records"
        # a view over the source: a query that reads it twice reads and decodes the source twice
        # (the records' headers: 0.8 s of a 10M-token gc plan's 5.4 s). Kept by a Background job
        # while the flow builds and compiles its query over it (0.07 s of a 1M-token plan's 0.19 s)
        sql = f"CREATE OR REPLACE TEMP TABLE flow_records AS SELECT {', '.join(_ident(c) for c in columns)} FROM records"
        self._settled()
        self._start(lambda _stopping: self.con.execute(sql))
        return "flow_records"

    # rows and stream fetch Python values, not Arrow: a gc plan or reconcile then never imports
    # PyArrow (0.07 s with numpy); their columns are of the canonical types (text, numbers, times)
    def rows(self, sql: str) -> list[dict[str, Any]]:
        from eoctl.engine.evidence import jsonable

        con = self._settled()
        rows = con.execute(sql).fetchall()
        names = [d[0] for d in con.description]
        return [redact(jsonable(dict(zip(names, r)))) for r in rows]

    def evaluate(self, sql: str, stem: str) -> tuple[int, list[dict[str, Any]], str | None]:
        return materialize(self._settled(), sql, self.options.evidence_rows, self.options.evidence_dir, stem)

    def stream(self, sql: str):
        # a streamed result of the run's connection: the caller runs nothing else on it meanwhile
        # (a plan's execution writes through the stores' own connections)
        con = self._settled()
        con.execute(sql)
        names = [d[0] for d in con.description]
        while batch := con.fetchmany(10_000):
            for r in batch:
                yield dict(zip(names, r))

    def release(self) -> None:
        from eoctl import incremental

        try:
            if self._pending is not None:  # an interrupt, or a failure of the flow
                self._pending.stop()
                self._pending = None
            self.con.close()
        finally:
            if self.index.partial is not None and not self._index_kept:
                incremental.discard(None, self.index.partial)  # nothing half-written: no history row names it


def _scope(config: Config, options: AuditOptions) -> Scope:
    from eoctl.expr.inputs import Scope

    return Scope(config, options)


def load_transactions(con: duckdb.DuckDBPyConnection, scope: Scope) -> None:
    """Table `transactions` (eoctl.expr.inputs.TRANSACTIONS_SCHEMA): what the brokers of the live
    inputs say of transactions open longer than --transaction-timeout."""
    from eoctl.sources.kafka import hanging_partitions

    rows = []
    for name, ep in scope.endpoints.items():
        if ep.input is not None and ep.input.kafka:
            found = hanging_partitions(scope.config.kafka[ep.input.kafka], ep.input.topics, scope.options.now,
                                       scope.options.transaction_timeout)
            rows += [{"ep": name, **dict(zip(_TRANSACTION_COLUMNS, row))} for row in found]
    flat_table(con, "transactions", rows, {"ep": "VARCHAR", "topic": "VARCHAR", "partition": "INTEGER",
                                           "last_stable_offset": "BIGINT", "high_watermark": "BIGINT",
                                           "first_unstable_timestamp": "TIMESTAMP", "age_seconds": "BIGINT"})


_TRANSACTION_COLUMNS = ("topic", "partition", "last_stable_offset", "high_watermark", "first_unstable_timestamp",
                        "age_seconds")


# ---------------------------------------------------------------------------------- stores


def load_store_tables(con: duckdb.DuckDBPyConnection, layout, endpoints: list[str],
                      copies: dict[tuple[str, str], str]) -> set[tuple[str, str]]:
    """Views `tokens`, `outbox`, `intents` (eoctl.expr.inputs.STORE_SCHEMAS, plus `ep`): each
    audited endpoint's rows of its table, read once; the (endpoint, kind) pairs that exist."""
    import duckdb

    from eoctl.expr.inputs import STORE_SCHEMAS
    from eoctl.stores.layout import KINDS

    present: set[tuple[str, str]] = set()
    source_types: dict[str, dict[str, str]] = {}
    for kind in KINDS:
        types = {"ep": "VARCHAR", **{c: _SQL_TYPES[t] for c, t in STORE_SCHEMAS[kind].items()}}
        selects = []
        for name in endpoints:
            t = layout.table(name, kind)
            if t is None:
                continue
            present.add((name, kind))
            source = _snapshot(con, copies, t.store, t.table)
            if source not in source_types:
                source_types[source] = dict(row[:2] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall())
            cols = [f"CAST({repr_sql(name)} AS VARCHAR) AS ep"]
            for canonical, sql_type in list(types.items())[1:]:
                if canonical == t.owner_canonical and t.owner_column is None:
                    cols.append(f"CAST({repr_sql(t.owner)} AS {sql_type}) AS {_ident(canonical)}")
                elif sql_type == "TIMESTAMP":  # a copy keeps an instant: its UTC wall time
                    column = t.col(canonical)
                    cols.append(f"{sql_utc_wall_time(_ident(column), source_types[source].get(column, ''))} "
                                f"AS {_ident(canonical)}")
                else:
                    cols.append(f"CAST({_ident(t.col(canonical))} AS {sql_type}) AS {_ident(canonical)}")
            where = f" WHERE {_ident(t.owner_column)} = {repr_sql(t.owner)}" if t.owner_column else ""
            selects.append(f"SELECT {', '.join(cols)} FROM {source}{where}")
        if not selects:
            selects = ["SELECT " + ", ".join(f"CAST(NULL AS {v}) AS {_ident(c)}" for c, v in types.items())
                       + " WHERE false"]
        try:
            # a view over the run's copies: each check reads only the columns it needs
            con.execute(f"CREATE OR REPLACE VIEW {kind} AS " + " UNION ALL ".join(selects))
            con.execute(f"SELECT * FROM {kind} LIMIT 0").fetchall()  # a column of the wrong type fails here
        except duckdb.Error as exc:  # a column of the wrong type
            raise SourceError(f"the {kind} tables cannot be read: {str(exc).splitlines()[0][:300]}") from None
    return present


_SQL_TYPES = {"string": "VARCHAR", "timestamp": "TIMESTAMP", "int64": "BIGINT", "int32": "INTEGER"}


def copy_stores_ahead(con: duckdb.DuckDBPyConnection, config: Config, endpoints: list[str],
                      copies: dict[tuple[str, str], str], stopping, layout=None) -> None:
    """The DuckDB stores' tables of `endpoints` copied into `copies` (_snapshot's cache), and
    looked up for `layout` (the run's StoreLayout: its lookups then open no store of their own,
    0.02 s), as a Background job while the main thread imports and compiles (a 1M-token gc plan:
    the 0.15 s copy hidden behind 0.25 s of Ibis's import and a compile). It only gets ahead: the
    first copy or lookup that does not go through at once (a PostgreSQL store, a file another
    process holds, a table missing or damaged) ends it, and open_inputs makes that one and the
    rest in its usual order, with its waiting and its errors."""
    from eoctl.config.model import DuckDBStore
    from eoctl.sources.tables import store_named
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


def _snapshot(con: duckdb.DuckDBPyConnection, copies: dict[tuple[str, str], str], store, table: str,
              wait: bool = True) -> str:
    """The source (SQL) of a copy of a store table, made once per run (`copies`): a DuckDB store's
    table copied into a temporary table of the run's database through a read-only ATTACH held
    for that one statement (as the Spark engine's Parquet snapshot holds it, without writing and
    reading Parquet: 0.13 s against 0.39 s for 1M tokens); a PostgreSQL table read in one streamed
    query into Parquet (eoctl.sources.tables). A table several endpoints share is read once.
    `wait`: wait for a DuckDB store another process holds (else a SourceError at once)."""
    from eoctl.config.model import DuckDBStore
    from eoctl.sources.tables import postgres_snapshot
    from eoctl.stores.connection import describe

    key = (describe(store) + f"/{store.schema_name}", table)
    if key not in copies:
        if isinstance(store, DuckDBStore):
            name = f"store_copy_{len(copies)}"
            _copy_from_duckdb_store(con, store, table, name, wait)
            copies[key] = _ident(name)
        else:
            copies[key] = f"read_parquet({repr_sql(postgres_snapshot(store, table))})"
    return copies[key]


def _copy_from_duckdb_store(con: duckdb.DuckDBPyConnection, store, table: str, name: str, wait: bool = True) -> None:
    from eoctl.sources.tables import copy_duckdb_table
    from eoctl.stores.connection import attached_read_only

    with attached_read_only(con, store, wait=wait) as catalog:
        # OR REPLACE: copies ahead stopped between this statement and the detach leave one
        copy_duckdb_table(con, store, table, lambda sql: f"CREATE OR REPLACE TEMP TABLE {_ident(name)} AS {sql}",
                          catalog=catalog)


# ----------------------------------------------------------------------------------- sinks


def read_sink(con: duckdb.DuckDBPyConnection, config: Config, sink: SinkConfig, view: str,
              copies: dict[tuple[str, str], str], check_columns: bool = True):
    """Make `view` the sink's rows; its Ibis schema. `check_columns`: a configured column the sink
    lacks is a SourceError naming the columns there are."""
    import duckdb
    import ibis
    from ibis.backends.sql.datatypes import DuckDBType

    from eoctl.sources.tables import store_named

    if sink.path is None:
        assert sink.store is not None and sink.table is not None
        source = _snapshot(con, copies, store_named(config, sink.store), sink.table)
    elif sink.format == "orc":
        import pyarrow.dataset as ds

        files = archive_files(sink.path, "orc", what="sink")
        con.register(f"{view}_arrow", ds.dataset(files, format="orc"))  # scanned lazily, batch by batch
        source = _ident(f"{view}_arrow")
    else:
        files = ", ".join(repr_sql(f) for f in archive_files(sink.path, sink.format or "", what="sink"))
        readers = {"parquet": "read_parquet([{}])", "csv": "read_csv([{}], header = true)",
                   "json": "read_json([{}], format = 'newline_delimited')"}
        if sink.format not in readers:
            raise SourceError(f"sink {sink.name}: the DuckDB engine does not read {sink.format} files")
        source = readers[sink.format].format(files)
    try:
        con.execute(f"CREATE OR REPLACE VIEW {_ident(view)} AS SELECT * FROM {source}")
        described = con.execute(f"DESCRIBE {_ident(view)}").fetchall()
    except duckdb.Error as exc:  # unreadable files
        raise SourceError(f"sink {sink.name} cannot be read: {str(exc).splitlines()[0][:300]}") from None
    columns = {row[0]: DuckDBType.from_string(row[1]) for row in described}
    for needed in [sink.message_id_column, *sink.key_columns, *(sink.value_columns or [])] if check_columns else []:
        if needed not in columns:
            raise SourceError(f"sink {sink.name} has no column {needed!r}",
                              hint=f"columns: {', '.join(columns)}")
    return ibis.schema(columns)


# ----------------------------------------------------------------------------------- blobs


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


# -------------------------------------------------------------------------------- evidence


def materialize(con: duckdb.DuckDBPyConnection, sql: str, rows_kept: int, evidence_dir: Path | None, stem: str,
                ) -> tuple[int, list[dict[str, Any]], str | None]:
    """Count a finding's evidence and bring back at most `rows_kept` of it; the rest of a large
    evidence set is written as Parquet beside the report (secrets masked), never fetched whole.
    The evidence is computed once, into a temporary table of the run's database."""
    from eoctl.engine.evidence import jsonable

    con.execute(f"CREATE OR REPLACE TEMP TABLE evidence AS {sql}")
    try:
        count = con.execute("SELECT count(*) FROM evidence").fetchall()[0][0]
        if not count:
            return 0, [], None
        sample = con.sql(f"SELECT * FROM evidence LIMIT {int(rows_kept)}").to_arrow_table().to_pylist()
        rows = [redact(jsonable(r)) for r in sample]
        path = None
        if count > rows_kept and evidence_dir is not None:
            path = str(evidence_dir / f"{stem}.parquet")
            _write_masked(con, path)
        return count, rows, path
    finally:
        con.execute("DROP TABLE IF EXISTS evidence")


def _write_masked(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """The evidence table as one Parquet file, batch by batch, its text masked by eoctl.secrets's
    rule (Python's regular expressions: DuckDB's RE2 has no look-behind). Written beside, then
    renamed: never half a file."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    reader = con.sql("SELECT * FROM evidence").to_arrow_reader(batch_size=65_536)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.partial"
    with pq.ParquetWriter(tmp, reader.schema) as writer:
        for batch in reader:
            cols = [pa.array([mask_text(v) if v is not None else None for v in col.to_pylist()], pa.string())
                    if pa.types.is_string(col.type) else col for col in batch.columns]
            writer.write_batch(pa.RecordBatch.from_arrays(cols, schema=reader.schema))
    os.replace(tmp, path)
