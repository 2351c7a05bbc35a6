"""The audit's inputs on the Spark engine: the tables of eoctl.expr.inputs as temporary views of the
session, so the checks of eoctl.expr.catalog, compiled to Spark SQL, read what the DuckDB engine's
read (eoctl.engine.duckdb.run).

The records are eoctl.engine.spark.records' working copy (one scan of each source, written once
as Parquet, and with `--since-last` the record index's rows); SparkStores reads the store tables,
sinks and blob prefixes, once each. Nothing is collected to the driver but per-partition offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import reduce
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config
from eoctl.engine.spark.frames import local_frame
from eoctl.engine.spark.stores import SparkStores

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from eoctl.engine.spark.records import SparkRecords
    from eoctl.expr.inputs import Scope
    from eoctl.incremental import RecordIndex
    from eoctl.options import AuditOptions
    from eoctl.stores.layout import StoreLayout

#: How the compiled checks are planned. Spark estimates a Parquet scan by its compressed bytes:
#: the token ids of 10M records (~6 MB on disk, ~600 MB as a hash table) looked small enough to
#: broadcast, and the driver's heap ran out building the table. Text in zstd Parquet takes 5-10x
#: its size in memory; a kept (computed) table is estimated by its real size.
_PLANNING = {"spark.sql.sources.fileCompressionFactor": "10",
             # Spark describes every query's plan as text for its UI before it runs, and a kept
             # table's plan holds the plans of the tables it was computed from, written out again
             # at every level: with the tables an incremental audit keeps, a check whose jobs ran
             # 0.3-0.5 s took 1-4 s more to describe (300k records, every check: 88 s against 47 s).
             "spark.sql.maxPlanStringLength": "2000",
             # A kept table (persisted, then checkpointed) otherwise keeps every shuffle partition
             # of its plan however few its rows: its count, its checkpoint, a state written from it
             # and every query reading it run 16 tasks (local) for a few kilobytes. With this,
             # adaptive execution coalesces a kept plan's last stage as any other's (an incremental
             # audit of 10M records + 1%, 2 cores, about 40 tables kept: 50.6 s -> 46.2 s).
             "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true"}

#: Spark's type of each column type of eoctl.expr.inputs' schemas
_SPARK_TYPES = {"string": "string", "timestamp": "timestamp", "int64": "long", "int32": "int", "boolean": "boolean"}


class SparkRun:
    """The inputs of eoctl.expr.inputs opened as temporary views of a Spark session (eoctl.engine.
    run.EngineRun): the working copy of the records, the store tables, and what `inputs` names
    (open_views); with `options.since_last` the records continue the newest recorded index, and
    with `index_path` the working copy becomes this run's part of it (keep_index). The session
    runs with the compiled expressions' SQL settings until release()."""

    #: evidence queries, probes' keys and states written at once (eoctl.engine.run.in_order): in a
    #: warm session a small job's time is mostly waits that several overlap. An incremental
    #: audit's evidence on two cores (10M + 1%): 15.3 s one at a time, 13.6 s two, 11.0 s three
    concurrency = 3
    looks_up = False  # see reach

    def __init__(self, spark: SparkSession, config: Config, options: AuditOptions, step: Callable[[str], None], *,
                 inputs: frozenset[str] = frozenset(), layout: StoreLayout | None = None,
                 index_path: str | None = None) -> None:
        from eoctl import incremental
        from eoctl.engine.spark.records import SparkRecords
        from eoctl.expr import Dialect
        from eoctl.expr.functions import SPARK_SQL_CONF

        self.spark = spark
        self.config = config
        self.dialect = Dialect.spark
        self.options = options
        base, why = None, None
        if options.since_last:
            selected = options.endpoints or list(config.endpoints)
            base, why = incremental.find_base(spark, config, {n: config.endpoint(n) for n in selected})
        self._index_path = index_path
        self.records = SparkRecords(spark, config, options, base, index_path)
        self.records.fallback = why
        self.stores = SparkStores(spark, config, layout)
        self._kept: dict[str, DataFrame] = {}
        self._checkpoints = config.engine.master.startswith("local") and not config.engine.remote
        planning = {k: v for k, v in _PLANNING.items() if k not in config.engine.conf}  # the user's wins
        self._conf = sql_conf(spark, {**SPARK_SQL_CONF, **planning})
        self._conf.__enter__()
        try:
            self.scope = open_views(self.records, self.stores, step, inputs)
        except BaseException:
            self.release()
            raise

    @property
    def base(self) -> RecordIndex | None:
        return self.records.base

    @property
    def fallback(self) -> str | None:
        return self.records.fallback

    def record_count(self) -> int:
        return self.records.record_count()  # the one scan of the source all checks share

    def fresh_stats(self) -> list[tuple[str, str, int, int, int, int]]:
        return self.records.fresh_stats if self.options.since_last or self._index_path else []

    @property
    def plans(self):
        return self.records.plans

    @property
    def committed(self):
        return self.records.committed

    def open_states(self, schemas: dict) -> None:
        """A view `state_<name>` of each state of `schemas` the recorded run kept, in those types
        whichever engine wrote it (a state of no rows read as none, file or not)."""
        import ibis
        from ibis.backends.sql.datatypes import PySparkType
        from pyspark.sql import functions as F

        from eoctl.expr.inputs import state_view

        base = self.records.base
        assert base is not None
        for name, schema in schemas.items():
            kept = (base.states or {}).get(name)
            if kept is None:
                continue
            types = {c: PySparkType.to_string(t) for c, t in ibis.schema(schema).items()}
            if kept.rows:
                df = self.spark.read.parquet(kept.path).select(*[F.col(c).cast(t).alias(c) for c, t in types.items()])
            else:
                df = self.spark.sql("SELECT " + ", ".join(f"CAST(NULL AS {t}) AS `{c}`" for c, t in types.items())
                                    ).where(F.lit(False))
            df.createOrReplaceTempView(state_view(name))

    def reach(self, keys: dict[str, str | None]) -> bool:
        # a look-up of row numbers is no cheaper than the one scan of every indexed row with every
        # probe in it: Spark cannot fetch a Parquet file's rows by number without reading them
        return False

    def keep_state(self, name: str, sql: str) -> tuple[int, int]:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        from eoctl.engine.spark.files import HadoopFiles

        assert self._index_path is not None
        folder = f"{self._index_path}/state/{name}"
        # counted while written (an observed metric), not by a job reading the files back
        rows = Observation(f"state_{name}")
        self.spark.sql(sql).observe(rows, F.count(F.lit(1)).alias("rows")).write.mode("overwrite").option(
            "compression", "zstd").parquet(folder)
        return int(rows.get["rows"]), HadoopFiles(self.spark).size(folder)

    def keep_index(self, run_id: str, stats: list, states: dict[str, tuple[int, int]]) -> RecordIndex:
        from eoctl.engine.spark.records import keep

        assert self._index_path is not None
        return keep(self.spark, self.config, run_id, self._index_path, self.records, stats, states)

    def keep(self, name: str, sql: str) -> None:
        from pyspark import StorageLevel

        # computed now (below), and cached: queries that read it are planned knowing its real size
        df = self.spark.sql(sql).persist(StorageLevel.MEMORY_AND_DISK)
        if self._checkpoints:
            # Its rows as a plan of their own: a query over a kept table otherwise holds the plans
            # of every table it was computed from, which Spark walks again for each query (an
            # incremental audit's checks: 5 s each instead of 1 s at 300k records). Local sessions
            # only: on a cluster a lost executor loses these blocks, where a cached table is
            # computed again. One job fills the cache and the checkpoint; the checkpoint's plan
            # takes its size from the cache, filled by then (a count first was a job more).
            checkpoint = df.localCheckpoint(eager=True)
            df.unpersist()
            df = checkpoint
        else:
            df.count()
        if name in self._kept:  # freed once the new one is computed: that may have read it
            _forget(self._kept.pop(name), self._checkpoints)
        df.createOrReplaceTempView(name)
        self._kept[name] = df

    def stream_outgoing(self, view: str, above: int) -> bool:
        return False  # Spark's JSON parser streams each value as it goes

    def view(self, name: str, sql: str) -> None:
        self.spark.sql(sql).createOrReplaceTempView(name)

    def records_for(self, columns) -> str:
        return "records"  # the working copy is kept (a Parquet scratch copy, or the cached frame)

    def rows(self, sql: str) -> list[dict[str, Any]]:
        from eoctl.engine.evidence import masked_jsonable

        return [masked_jsonable(r.asDict(recursive=True)) for r in self.spark.sql(sql).collect()]

    def evaluate(self, sql: str, stem: str) -> tuple[int, list[dict[str, Any]], str | None]:
        from eoctl.engine.spark.evidence import materialize

        return materialize(self.spark.sql(sql), self.options.evidence_rows, self.options.evidence_dir, stem)

    def stream(self, sql: str) -> Iterator[dict[str, Any]]:
        from pyspark import StorageLevel

        # computed once and kept: toLocalIterator runs a job per partition, which would recompute it
        df = self.spark.sql(sql).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            df.count()
            for row in df.toLocalIterator():
                yield row.asDict(recursive=True)
        finally:
            df.unpersist()

    def cancel(self) -> None:
        if self.config.engine.remote:
            self.spark.interruptAll()
        else:
            self.spark.sparkContext.cancelAllJobs()

    def release(self) -> None:
        for df in self._kept.values():
            _forget(df, self._checkpoints)
        self._kept.clear()
        try:
            self.stores.release()
            self.records.release()
        finally:
            self._conf.__exit__(None, None, None)


def _forget(df: DataFrame, checkpoint: bool) -> None:
    """Free a kept table: its cache, or the blocks of its local checkpoint (which unpersist leaves
    to the JVM's garbage collection)."""
    if checkpoint:
        df._jdf.queryExecution().logical().rdd().unpersist(False)
    else:
        df.unpersist()


def open_views(records: SparkRecords, stores: SparkStores, step: Callable[[str], None],
               inputs: frozenset[str] = frozenset()) -> Scope:
    """Make the tables of eoctl.expr.inputs temporary views of the session: the records, the
    store tables, and what `inputs` names (eoctl.findings.INPUTS: sinks, blob listings and their
    hashes, log starts, transactions, undecodable lines); the scope that describes them (which
    store tables exist, each sink's columns)."""
    from eoctl.expr.inputs import Scope

    scope = Scope(records.config, records.options, layout=stores.layout)
    step("reading the records of every input")
    records.records.createOrReplaceTempView("records")
    if records.base is not None:  # continuing: the checks read families of these (eoctl.expr.incremental)
        records.fresh.createOrReplaceTempView("fresh")
        records.indexed.createOrReplaceTempView("indexed")
        records.in_flight.createOrReplaceTempView("indexed_in_flight")
    records.commits_frame().createOrReplaceTempView("commits")
    step("reading the store tables")
    scope.tables = _store_views(stores, list(records.endpoints), "sent_outbox" in inputs)
    scope.refuse_misnamed()
    if "sinks" in inputs:  # lazy: read only by the checks that look at sinks (EO202, EO5xx)
        _sink_views(stores, records.endpoints, scope)
    if "blobs" in inputs:
        for name, ep in records.endpoints.items():
            if ep.blobs:
                stores.blobs(name, "blob_hashes" in inputs).createOrReplaceTempView(scope.blob_view(name))
    if "log_starts" in inputs:
        _log_starts_view(records)
    if "transactions" in inputs:
        _transactions_view(records)
    if "undecodable" in inputs:
        _undecodable_view(records)
    return scope


@contextmanager
def sql_conf(spark, settings: dict[str, str]) -> Iterator[None]:
    """The session with `settings` for a while (the compiled expressions' SPARK_SQL_CONF), then as
    it was: the session may be the caller's own."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _typed(df: DataFrame, schema: dict[str, str], ep: str | None = None) -> DataFrame:
    """`df`'s columns of `schema`, in its order and types; `ep` first when given."""
    from pyspark.sql import functions as F

    cols = [F.lit(ep).cast("string").alias("ep")] if ep is not None else []
    return df.select(*cols, *[F.col(c).cast(_SPARK_TYPES[t]).alias(c) for c, t in schema.items()])


def _ddl(schema: dict[str, str]) -> str:
    """An eoctl.expr.inputs schema as Spark's DDL."""
    return ", ".join(f"`{c}` {_SPARK_TYPES[t]}" for c, t in schema.items())


def _empty(spark: SparkSession, schema: dict[str, str]) -> DataFrame:
    return local_frame(spark, [], _ddl(schema))


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(lambda a, b: a.unionByName(b), frames)


def _store_views(stores: SparkStores, endpoints: list[str], sent_outbox: bool = False) -> set[tuple[str, str]]:
    """Views `tokens`, `outbox`, `intents`: each of `endpoints`' rows of that store table (of an
    outbox that keeps sent rows, the pending ones; with `sent_outbox`, the sent ones too, as view
    `outbox_sent`)."""
    from eoctl.expr.inputs import STORE_SCHEMAS
    from eoctl.stores.layout import KINDS

    present: set[tuple[str, str]] = set()
    for view in (*KINDS, "outbox_sent") if sent_outbox else KINDS:
        kind = "outbox" if view == "outbox_sent" else view
        schema = {"ep": "string", **STORE_SCHEMAS[kind]}
        frames = []
        for name in endpoints:
            df = stores.table(name, view)
            if df is not None:
                unparsed = first_unparsed_time(df, kind, {c: c for c in STORE_SCHEMAS[kind]})
                if unparsed is not None:
                    from eoctl.stores.layout import endpoint_unparsed_time

                    raise endpoint_unparsed_time(stores.layout.table(name, kind), *unparsed)
                present.add((name, kind))
                frames.append(_typed(df, STORE_SCHEMAS[kind], ep=name))
        (_union(frames) if frames else _empty(stores.spark, schema)).createOrReplaceTempView(view)
    return present


def first_unparsed_time(df: DataFrame, kind: str, columns: dict[str, str]) -> tuple[str, str] | None:
    """(canonical, value) of the first value of a text column read as a time that is no time
    (eoctl.stores.layout.unparsed_time), as the DuckDB engine finds it (its first_unparsed_time):
    one job reading one row, only for such columns. `columns`: canonical -> the column of `df`."""
    from pyspark.sql import functions as F

    from eoctl.stores.layout import text_time_columns

    texts = text_time_columns(kind, columns, {f.name: f.dataType.simpleString() for f in df.schema.fields})
    if not texts:
        return None
    bad = [F.col(f"`{c}`").isNotNull() & F.col(f"`{c}`").try_cast("timestamp").isNull() for _canonical, c in texts]
    found = df.where(reduce(lambda a, b: a | b, bad)).select(
        *[F.col(f"`{c}`").cast("string") for _canonical, c in texts], *bad).first()
    if found is None:
        return None
    return next((canonical, found[i]) for i, (canonical, _c) in enumerate(texts) if found[len(texts) + i])


def _sink_views(stores: SparkStores, endpoints, scope: Scope) -> None:
    """A view per configured sink (Scope.sink_view) and its columns as Ibis sees them."""
    import ibis
    from ibis.backends.sql.datatypes import PySparkType

    from eoctl.expr.inputs import check_sink_columns

    for name, ep in endpoints.items():
        for sink in ep.sinks:
            df = stores.sink(name, sink)
            check_sink_columns(scope.config, sink, df.columns)
            df.createOrReplaceTempView(scope.sink_view(name, sink))
            scope.sink_schemas[(name, sink.name)] = ibis.schema(
                {f.name: PySparkType.from_string(f.dataType.simpleString()) for f in df.schema.fields})


def _log_starts_view(records: SparkRecords) -> None:
    """View `log_starts`: each input partition's first offset (the broker's log start of a live
    topic, the lowest offset an archive holds)."""
    from eoctl.expr.inputs import LOG_STARTS_SCHEMA
    from eoctl.sources.kafka import partition_offsets

    rows = []
    for name, ep in records.endpoints.items():
        if ep.input is None:
            continue
        if ep.input.kafka:
            rows += [(name, p.topic, p.partition, p.log_start)
                     for p in partition_offsets(records.config.kafka[ep.input.kafka], ep.input.topics)]
        else:
            rows += [(name, t, p, low) for (t, p), low in records.archive_starts(name).items()]
    _rows_view(records, "log_starts", rows, LOG_STARTS_SCHEMA)


def _transactions_view(records: SparkRecords) -> None:
    """View `transactions` (eoctl.sources.hanging_transactions)."""
    from eoctl.expr.inputs import TRANSACTIONS_SCHEMA
    from eoctl.sources import hanging_transactions

    found = hanging_transactions(records.config, records.endpoints, records.options.now,
                                 records.options.transaction_timeout)
    _rows_view(records, "transactions", [tuple(r[c] for c in TRANSACTIONS_SCHEMA) for r in found], TRANSACTIONS_SCHEMA)


def _undecodable_view(records: SparkRecords) -> None:
    """View `undecodable`: the lines of JSON archives that are not records."""
    from eoctl.engine.spark.sources import undecodable_lines
    from eoctl.expr.inputs import UNDECODABLE_SCHEMA

    frames = [_typed(undecodable_lines(records.spark, ep.input.archive, ep.input.topics),
                     {c: t for c, t in UNDECODABLE_SCHEMA.items() if c != "ep"}, ep=name)
              for name, ep in records.endpoints.items()
              if ep.input is not None and ep.input.archive and ep.input.archive_format == "json"]
    (_union(frames) if frames else _empty(records.spark, UNDECODABLE_SCHEMA)).createOrReplaceTempView("undecodable")


def _rows_view(records: SparkRecords, view: str, rows: list[tuple], schema: dict[str, str]) -> None:
    local_frame(records.spark, rows, _ddl(schema)).createOrReplaceTempView(view)
