"""Sink checks (EO501, EO502)."""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import functions as F

from eoctl.checks import Hit
from eoctl.checks.context import AuditContext


def _sinks(ctx: AuditContext):
    for name, ep in ctx.endpoints.items():
        for sink in ep.sinks:
            yield name, sink, ctx.sink(name, sink)


def applied_twice(ctx: AuditContext) -> Iterator[Hit]:
    """EO501: more than one sink row for one source message: its effect was applied twice."""
    for name, sink, df in _sinks(ctx):
        g = df.groupBy(F.col(sink.message_id_column).cast("string").alias("source_message_id")).agg(
            F.count(F.lit(1)).alias("rows"))
        yield "EO501", name, sink.name, g.where("rows > 1")


def conflicting_values(ctx: AuditContext) -> Iterator[Hit]:
    """EO502: one idempotency key with different values (value_columns; default all other columns).

    Keys are flagged by comparing 64-bit hashes of their values (cheap to aggregate; equal values
    hash equal); the distinct values are gathered exactly, for flagged keys only."""
    for name, sink, df in _sinks(ctx):
        if not sink.key_columns:
            continue
        values = sink.value_columns or [c for c in df.columns if c not in sink.key_columns]
        # Spark's hash skips nulls; the null flags keep (null, 5) and (5, null) apart.
        digest = F.xxhash64(*values, *[F.isnull(v) for v in values])
        flagged = ctx.keys(df.groupBy(*sink.key_columns).agg(
            (F.min(digest) != F.max(digest)).alias("_hit")).where("_hit").drop("_hit"))
        g = df.join(flagged, sink.key_columns).groupBy(*sink.key_columns).agg(
            F.countDistinct(F.struct(*values)).alias("distinct_values"),
            F.slice(F.collect_set(F.to_json(F.struct(*values))), 1, 5).alias("values"))
        yield "EO502", name, sink.name, g.where("distinct_values > 1")
