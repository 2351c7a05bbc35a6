"""Sink checks (EO501, EO502).

A sink with a `watermark_column` keeps each check's findings as a check state when the audit keeps
a record index: an `audit --since-last` run then reads only the rows written since the base run
(above its watermark) and the rows of the keys they touch, and keeps the state's findings for
every other key. A key's finding changes only when rows of it are written (they carry a new
watermark) or removed; removals are seen by counting the rows at or below the base's watermark,
and then every key is examined again.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from eoctl.checks import Hit
from eoctl.checks.context import AuditContext
from eoctl.config.model import SinkConfig


def _sinks(ctx: AuditContext):
    for name, ep in ctx.endpoints.items():
        for sink in ep.sinks:
            yield name, sink


def applied_twice(ctx: AuditContext) -> Iterator[Hit]:
    """EO501: more than one sink row for one source message: its effect was applied twice."""
    for name, sink in _sinks(ctx):
        source = F.col(sink.message_id_column).cast("string")

        def compute(rows: DataFrame) -> DataFrame:
            g = rows.groupBy(source.alias("source_message_id")).agg(F.count(F.lit(1)).alias("rows"))
            return g.where("rows > 1")
        yield "EO501", name, sink.name, _findings(ctx, name, sink, "EO501", {"source_message_id": source}, compute)


def conflicting_values(ctx: AuditContext) -> Iterator[Hit]:
    """EO502: one idempotency key with different values (value_columns; default all other columns);
    `values` lists up to five of them, as JSON, sorted.

    Keys are flagged by comparing 64-bit hashes of their values (cheap to aggregate; equal values
    hash equal); the distinct values are gathered exactly, for flagged keys only."""
    for name, sink in _sinks(ctx):
        if not sink.key_columns:
            continue
        columns = ctx.sink(name, sink).columns
        values = sink.value_columns or [c for c in columns if c not in sink.key_columns]

        def compute(rows: DataFrame, values: list[str] = values, keys: list[str] = sink.key_columns) -> DataFrame:
            # Spark's hash skips nulls; the null flags keep (null, 5) and (5, null) apart.
            digest = F.xxhash64(*values, *[F.isnull(v) for v in values])
            flagged = ctx.keys(rows.groupBy(*keys).agg(
                (F.min(digest) != F.max(digest)).alias("_hit")).where("_hit").drop("_hit"))
            g = rows.join(flagged, keys).groupBy(*keys).agg(
                F.countDistinct(F.struct(*values)).alias("distinct_values"),
                # sorted, null fields kept: the same five values on every run and engine
                F.slice(F.sort_array(F.collect_set(F.to_json(F.struct(*values), {"ignoreNullFields": "false"}))),
                        1, 5).alias("values"))
            return g.where("distinct_values > 1")
        keys = {k: F.col(k) for k in sink.key_columns}
        yield "EO502", name, sink.name, _findings(ctx, name, sink, "EO502", keys, compute)


def _findings(ctx: AuditContext, name: str, sink: SinkConfig, code: str, keys: dict[str, Column],
              compute: Callable[[DataFrame], DataFrame]) -> DataFrame:
    """The rows of finding `code` on a sink, one per key: `compute` over the sink's rows. `keys`:
    the finding's key columns, as expressions over a sink row."""
    rows = ctx.sink(name, sink)
    if sink.watermark_column is None or not ctx.keeps_state:
        return compute(rows)
    seen, new, why = _watermarked(ctx, name, sink)
    state = _state_name(code, name, sink)

    def build() -> DataFrame:
        if new is None:
            if why and ctx.base_state(state) is not None:
                ctx.rebuilt[state] = why
            return compute(seen)
        carried = ctx.carried(state)
        if carried is None:  # the base run did not run this check
            return compute(seen)
        key = F.xxhash64(*keys.values())
        touched = ctx.keys(new.select(key.alias("_k")).distinct(), probe=True)
        near = seen.withColumn("_k", key).join(touched, "_k", "left_semi").drop("_k")
        kept = carried.withColumn("_k", F.xxhash64(*keys)).join(touched, "_k", "left_anti").drop("_k")
        return compute(near).unionByName(kept)
    return ctx.state(state, build)


def _watermarked(ctx: AuditContext, name: str, sink: SinkConfig) -> tuple[DataFrame, DataFrame | None, str | None]:
    """Once per sink for both checks: see _watermarks."""
    return ctx.once(("sink-watermarks", name, sink.name), lambda: _watermarks(ctx, name, sink))


def _watermarks(ctx: AuditContext, name: str, sink: SinkConfig) -> tuple[DataFrame, DataFrame | None, str | None]:
    """(the rows this run audits: none written after it started; the rows written since the base
    run, or None when every key has to be examined: no base watermark, or the rows at or below it
    changed; why, in that last case). Rows without a watermark are always new. The sink's mark
    (its highest watermark and how many rows have one) is kept as a state for the next run."""
    rows = ctx.sink(name, sink)
    w = F.col(sink.watermark_column)
    mark_state = _state_name("mark", name, sink)
    before = ctx.base_state(mark_state)
    prev = before.first() if before is not None else None  # one row: mark, rows
    aggs = [F.max(w).alias("mark"), F.count(w).alias("rows")]
    if prev is not None and prev["mark"] is not None:
        aggs.append(F.count_if(w <= F.lit(prev["mark"])).alias("below"))
    agg = ctx.cached(("sink-mark", name, sink.name), lambda: rows.agg(*aggs))
    ctx.state(mark_state, lambda: agg.select("mark", "rows"))
    now = agg.first()
    seen = rows if now["mark"] is None else rows.where((w <= F.lit(now["mark"])) | w.isNull())
    if prev is None or prev["mark"] is None:
        return seen, None, None
    if now["below"] != prev["rows"]:  # rows removed (a repair) or written late: the kept findings may be stale
        return seen, None, (f"sink {sink.name!r} has {now['below']:,} rows at or below the last run's "
                            f"{sink.watermark_column} ({prev['mark']}), which saw {prev['rows']:,}")
    return seen, seen.where((w > F.lit(prev["mark"])) | w.isNull()), None


def _state_name(what: str, endpoint: str, sink: SinkConfig) -> str:
    """A state's folder name: readable, and unique even when the names need escaping."""
    raw = f"{endpoint}.{sink.name}"
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", raw)
    if safe != raw:
        safe += f"-{zlib.crc32(raw.encode()):08x}"
    return f"sink-{what}-{safe}"
