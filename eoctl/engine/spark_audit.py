"""The audit's inputs on the Spark engine: the tables of eoctl.expr.inputs as temporary views of the
session, so the checks of eoctl.expr.catalog, compiled to Spark SQL, read what the DuckDB engine's
read (eoctl.engine.duckdb_audit).

The records are AuditContext's working copy (one scan of each source, written once as Parquet, and
with `--since-last` the record index's rows), the store tables its reads, the sinks and blob
listings read once each. Nothing is collected to the driver but per-partition offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import reduce
from typing import TYPE_CHECKING

from eoctl.engine.frames import local_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from eoctl.checks.context import AuditContext
    from eoctl.expr.inputs import Scope

#: Spark's type of each column type of eoctl.expr.inputs' schemas
_SPARK_TYPES = {"string": "string", "timestamp": "timestamp", "int64": "long", "int32": "int", "boolean": "boolean"}


def open_views(ctx: AuditContext, codes: list[str], step: Callable[[str], None]) -> Scope:
    """Make every table the checks of `codes` read a temporary view of ctx's session; the scope
    that describes them (which store tables exist, each sink's columns)."""
    from eoctl.expr.inputs import Scope

    scope = Scope(ctx.config, ctx.options, layout=ctx.layout)
    ctx.records.createOrReplaceTempView("records")
    ctx.commits_frame().createOrReplaceTempView("commits")
    step("reading the store tables")
    scope.tables = _store_views(ctx)
    _sink_views(ctx, scope)  # lazy: read only by the checks that look at sinks (EO202, EO5xx)
    if any(c.startswith("EO4") for c in codes):
        _blob_views(ctx, scope, with_hash="EO403" in codes)
    if "EO204" in codes:
        _log_starts_view(ctx)
    if "EO601" in codes:
        _transactions_view(ctx)
    if "EO106" in codes:
        _undecodable_view(ctx)
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


def _empty(ctx: AuditContext, schema: dict[str, str]) -> DataFrame:
    return local_frame(ctx.spark, [], ", ".join(f"`{c}` {_SPARK_TYPES[t]}" for c, t in schema.items()))


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(lambda a, b: a.unionByName(b), frames)


def _store_views(ctx: AuditContext) -> set[tuple[str, str]]:
    """Views `tokens`, `outbox`, `intents`: each audited endpoint's rows of that store table."""
    from eoctl.expr.inputs import STORE_SCHEMAS
    from eoctl.stores.layout import KINDS

    present: set[tuple[str, str]] = set()
    for kind in KINDS:
        schema = {"ep": "string", **STORE_SCHEMAS[kind]}
        frames = []
        for name in ctx.endpoints:
            df = ctx.table(name, kind)
            if df is not None:
                present.add((name, kind))
                frames.append(_typed(df, STORE_SCHEMAS[kind], ep=name))
        (_union(frames) if frames else _empty(ctx, schema)).createOrReplaceTempView(kind)
    return present


def _sink_views(ctx: AuditContext, scope: Scope) -> None:
    """A view per configured sink (Scope.sink_view) and its columns as Ibis sees them."""
    import ibis
    from ibis.backends.sql.datatypes import PySparkType

    for name, ep in ctx.endpoints.items():
        for sink in ep.sinks:
            df = ctx.sink(name, sink)
            df.createOrReplaceTempView(scope.sink_view(name, sink))
            scope.sink_schemas[(name, sink.name)] = ibis.schema(
                {f.name: PySparkType.from_string(f.dataType.simpleString()) for f in df.schema.fields})


def _blob_views(ctx: AuditContext, scope: Scope, with_hash: bool) -> None:
    """A view per blob prefix (Scope.blob_view): name, size, modified, actual_sha256 (NULL
    unless EO403 runs: hashing reads every blob)."""
    from pyspark.sql import functions as F

    from eoctl.checks.blobs import listing

    for name, ep in ctx.endpoints.items():
        if ep.blobs:
            df = listing(ctx, name, with_hash)
            if not with_hash:
                df = df.withColumn("actual_sha256", F.lit(None).cast("string"))
            df.select("name", "size", "modified", "actual_sha256").createOrReplaceTempView(scope.blob_view(name))


def _log_starts_view(ctx: AuditContext) -> None:
    """View `log_starts`: each input partition's first offset (the broker's log start of a live
    topic, the lowest offset an archive holds)."""
    from eoctl.expr.inputs import LOG_STARTS_SCHEMA
    from eoctl.sources.kafka import partition_offsets

    rows = []
    for name, ep in ctx.endpoints.items():
        if ep.input is None:
            continue
        if ep.input.kafka:
            rows += [(name, p.topic, p.partition, p.log_start)
                     for p in partition_offsets(ctx.config.kafka[ep.input.kafka], ep.input.topics)]
        else:
            rows += [(name, t, p, low) for (t, p), low in ctx.archive_starts(name).items()]
    _rows_view(ctx, "log_starts", rows, LOG_STARTS_SCHEMA)


def _transactions_view(ctx: AuditContext) -> None:
    """View `transactions`: what the brokers of the live inputs say of transactions open longer
    than --transaction-timeout."""
    from eoctl.expr.inputs import TRANSACTIONS_SCHEMA
    from eoctl.sources.kafka import hanging_partitions

    rows = []
    for name, ep in ctx.endpoints.items():
        if ep.input is not None and ep.input.kafka:
            rows += [(name, *row) for row in hanging_partitions(
                ctx.config.kafka[ep.input.kafka], ep.input.topics, ctx.options.now, ctx.options.transaction_timeout)]
    _rows_view(ctx, "transactions", rows, TRANSACTIONS_SCHEMA)


def _undecodable_view(ctx: AuditContext) -> None:
    """View `undecodable`: the lines of JSON archives that are not records."""
    from eoctl.expr.inputs import UNDECODABLE_SCHEMA
    from eoctl.sources.archive import undecodable_lines

    frames = [_typed(undecodable_lines(ctx.spark, ep.input.archive, ep.input.topics),
                     {c: t for c, t in UNDECODABLE_SCHEMA.items() if c != "ep"}, ep=name)
              for name, ep in ctx.endpoints.items()
              if ep.input is not None and ep.input.archive and ep.input.archive_format == "json"]
    (_union(frames) if frames else _empty(ctx, UNDECODABLE_SCHEMA)).createOrReplaceTempView("undecodable")


def _rows_view(ctx: AuditContext, view: str, rows: list[tuple], schema: dict[str, str]) -> None:
    ddl = ", ".join(f"`{c}` {_SPARK_TYPES[t]}" for c, t in schema.items())
    local_frame(ctx.spark, rows, ddl).createOrReplaceTempView(view)
