"""The audit on the DuckDB engine: the inputs of eoctl.expr.inputs as views of the run's database,
then every selected check of eoctl.expr.catalog compiled to DuckDB's SQL, counted and sampled.

Store tables are copied once per run, as the Spark engine copies them (a DuckDB store is held for
one short read-only statement; a PostgreSQL table is read in one streamed query), sinks read
through DuckDB's readers (ORC through Arrow), blob prefixes listed through fsspec.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eoctl.engine.duckdb.records import ArchiveFiles, build_working_copy, list_archives, working_copy_sql
from eoctl.engine.duckdb.sql import Background, connect, flat_table, ident, keep_table, table_of_rows
from eoctl.engine.duckdb.stores import copy_stores_ahead, list_blobs, load_store_tables, read_sink
from eoctl.secrets import mask_text

if TYPE_CHECKING:
    import duckdb

    from eoctl.config.model import Config
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
    scope.tables = load_store_tables(con, scope.layout, list(scope.endpoints), copies, "sent_outbox" in inputs)
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

    #: one connection, one statement at a time (each uses every core the database is given)
    concurrency = 1
    looks_up = True

    def __init__(self, config: Config, options: AuditOptions, step: Callable[[str], None], *,
                 inputs: frozenset[str] = frozenset(), layout=None, keep_records: bool = True,
                 index_path: str | None = None) -> None:
        from eoctl.engine.duckdb import index as duckdb_index

        self.config = config
        self.options = options
        self._records_kept = keep_records
        self._pending: Background | None = None
        self._index_kept = False
        self.index = duckdb_index.IndexRun(partial=index_path)
        self.con = connect(config.engine.memory_limit)
        try:
            from eoctl.stores.layout import StoreLayout

            copies: dict[tuple[str, str], str] = {}
            endpoints = options.endpoints or list(config.endpoints)
            layout = layout or StoreLayout(config)
            self._start(lambda stopping: copy_stores_ahead(self.con, config, endpoints, copies, stopping, layout))
            # while the stores are copied: Ibis's import (0.2-0.3 s, when the flow has not needed
            # it yet), the recorded run looked up in the findings history, the working copy's
            # compile, and the topic archives listed (a local one: 0.01 s)
            if options.since_last or index_path:
                self.index = duckdb_index.IndexRun.open(config, _scope(config, options).endpoints, options.since_last,
                                                        index_path, ArchiveFiles(config.engine.memory_limit))
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
        from eoctl.incremental import whole_index_count

        con = self._settled()
        indexed = whole_index_count(self.base, self.plans) if self.base is not None else None
        if indexed is None:
            return con.execute("SELECT count(*) FROM records").fetchall()[0][0]
        return con.execute("SELECT count(*) FROM fresh").fetchall()[0][0] + indexed

    def fresh_stats(self) -> list[tuple[str, str, int, int, int, int]]:
        from eoctl.engine.duckdb import index as duckdb_index

        if self.index.base is None and self.index.partial is None:
            return []
        return duckdb_index.fresh_stats(self._settled())

    @property
    def plans(self):
        return self.index.plans

    @property
    def committed(self):
        return self.index.committed

    def open_states(self, schemas: dict) -> None:
        from eoctl.engine.duckdb import index as duckdb_index

        assert self.index.base is not None
        duckdb_index.open_states(self._settled(), self.index.base, schemas)

    def reach(self, keys: dict[str, str | None]) -> bool:
        from eoctl.engine.duckdb import index as duckdb_index

        return duckdb_index.reach(self._settled(), self.index, keys)

    def keep_state(self, name: str, sql: str) -> tuple[int, int]:
        from eoctl.engine.duckdb import index as duckdb_index

        return duckdb_index.keep_state(self._settled(), self.index, name, sql)

    def keep_index(self, run_id: str, stats: list, states: dict[str, tuple[int, int]]):
        from eoctl.engine.duckdb import index as duckdb_index

        kept = duckdb_index.keep(self._settled(), self.config, run_id, self.index, self.scope.endpoints,
                                 self.options.now.isoformat(), stats, states)
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
        keep_table(self._settled(), name, sql)

    def stream_outgoing(self, view: str, above: int) -> bool:
        from eoctl.engine.duckdb.outgoing import stream_outgoing

        stream_outgoing(self._settled(), view, above)
        return True

    def view(self, name: str, sql: str) -> None:
        self._settled().execute(f"CREATE OR REPLACE TEMP VIEW {ident(name)} AS {sql}")

    def records_for(self, columns) -> str:
        if self._records_kept:
            return "records"
        # a view over the source: a query that reads it twice reads and decodes the source twice
        # (the records' headers: 0.8 s of a 10M-token gc plan's 5.4 s). Kept by a Background job
        # while the flow builds and compiles its query over it (0.07 s of a 1M-token plan's 0.19 s)
        sql = f"CREATE OR REPLACE TEMP TABLE flow_records AS SELECT {', '.join(ident(c) for c in columns)} FROM records"
        self._settled()
        self._start(lambda _stopping: self.con.execute(sql))
        return "flow_records"

    # rows and stream fetch Python values, not Arrow: a gc plan or reconcile then never imports
    # PyArrow (0.07 s with numpy); their columns are of the canonical types (text, numbers, times)
    def rows(self, sql: str) -> list[dict[str, Any]]:
        from eoctl.engine.evidence import masked_jsonable

        con = self._settled()
        rows = con.execute(sql).fetchall()
        names = [d[0] for d in con.description]
        return [masked_jsonable(dict(zip(names, r))) for r in rows]

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

    def cancel(self) -> None:
        self.con.interrupt()

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
    """Table `transactions` (eoctl.sources.hanging_transactions)."""
    from eoctl.sources import hanging_transactions

    rows = hanging_transactions(scope.config, scope.endpoints, scope.options.now, scope.options.transaction_timeout)
    flat_table(con, "transactions", rows, {"ep": "VARCHAR", "topic": "VARCHAR", "partition": "INTEGER",
                                           "last_stable_offset": "BIGINT", "high_watermark": "BIGINT",
                                           "first_unstable_timestamp": "TIMESTAMP", "age_seconds": "BIGINT"})


# -------------------------------------------------------------------------------- evidence


def materialize(con: duckdb.DuckDBPyConnection, sql: str, rows_kept: int, evidence_dir: Path | None, stem: str,
                ) -> tuple[int, list[dict[str, Any]], str | None]:
    """Count a finding's evidence and bring back at most `rows_kept` of it; the rest of a large
    evidence set is written as Parquet beside the report (secrets masked), never fetched whole.
    The evidence is computed once, into a temporary table of the run's database."""
    from eoctl.engine.evidence import masked_jsonable

    count = con.execute(f"CREATE OR REPLACE TEMP TABLE evidence AS {sql}").fetchall()[0][0]  # the rows written
    try:
        if not count:
            return 0, [], None
        # Python values, as rows() fetches them (structs as dicts, lists as lists, times in UTC):
        # an audit then never imports PyArrow (0.15 s) unless it writes evidence beside the report
        cursor = con.execute(f"SELECT * FROM evidence LIMIT {int(rows_kept)}")
        names = [d[0] for d in cursor.description]
        rows = [masked_jsonable(dict(zip(names, r))) for r in cursor.fetchall()]
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


class RowsRun:
    """An EngineRun (eoctl.engine.run) over a handful of given rows, in an in-process database of
    its own: what trace checks one message's rows in, on either engine (a Spark job each would
    cost more than all of them here). `tables`: name -> (rows, Ibis schema); evidence rows come
    back as the rows' own Python values, every one of them."""

    concurrency = 1

    def __init__(self, config: Config, tables: dict[str, tuple[list[dict[str, Any]], Any]], scope: Scope) -> None:
        from eoctl.expr import Dialect

        self.dialect = Dialect.duckdb
        self.scope = scope
        self.con = connect(config.engine.memory_limit)
        try:
            for name, (rows, schema) in tables.items():
                arrow = arrow_schema(schema)
                texts = [f.name for f in arrow if str(f.type) == "string"]  # a type without a mapping too
                rows = [{**r, **{c: _text(r.get(c)) for c in texts}} for r in rows] if texts else rows
                table_of_rows(self.con, name, rows, arrow)
        except BaseException:
            self.con.close()
            raise

    def keep(self, name: str, sql: str) -> None:
        keep_table(self.con, name, sql)

    def stream_outgoing(self, view: str, above: int) -> bool:
        from eoctl.engine.duckdb.outgoing import stream_outgoing

        stream_outgoing(self.con, view, above)  # a handful of rows, one of them a batch job's entry maybe
        return True

    def view(self, name: str, sql: str) -> None:
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {ident(name)} AS {sql}")

    def evaluate(self, sql: str, stem: str) -> tuple[int, list[dict[str, Any]], str | None]:
        rows = self.con.sql(sql).to_arrow_table().to_pylist()
        return len(rows), rows, None

    def cancel(self) -> None:
        self.con.interrupt()

    def release(self) -> None:
        self.con.close()


def arrow_schema(schema):
    """An Ibis schema as Arrow's, for the types check inputs and sinks use (Ibis's own conversion
    needs pyarrow_hotfix, which eoctl does not install); a type without a mapping here is kept as
    its text."""
    import pyarrow as pa

    fixed = {"string": pa.string(), "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
             "float32": pa.float32(), "float64": pa.float64(), "boolean": pa.bool_(), "date": pa.date32(),
             "binary": pa.binary()}
    fields = []
    for name, t in schema.items():
        if t.is_timestamp():  # UTC wall time, as every reader here gives it
            fields.append((name, pa.timestamp("us", tz="UTC") if t.timezone else pa.timestamp("us")))
        elif t.is_decimal():
            fields.append((name, pa.decimal128(t.precision or 38, t.scale or 0)))
        else:
            fields.append((name, fixed.get(str(t).lstrip("!"), pa.string())))
    return pa.schema(fields)


def _text(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else str(value)
