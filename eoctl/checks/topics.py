"""Topic checks (EO101-EO106): one scan of the records, grouped several ways; EO106 reads the
lines of JSON archives that never became records."""

from __future__ import annotations

from collections.abc import Iterator
from functools import reduce

from pyspark.sql import functions as F
from pyspark.sql.window import Window

from eoctl.checks import Hit
from eoctl.checks.context import AuditContext
from eoctl.checks.keyed import flagged_records


def _per_endpoint(code: str, df, ctx: AuditContext) -> Iterator[Hit]:
    for name in ctx.endpoints:
        if ctx.endpoints[name].input is not None:
            part = df.where(F.col("endpoint") == name).drop("endpoint")
            yield code, name, ", ".join(ctx.endpoints[name].input.topics), part


def _position():
    return F.struct("partition", "offset")


_MESSAGE = ["endpoint", "topic", "message_id"]

# Detection aggregates compare 64-bit hashes instead of ids: a long is far cheaper to aggregate
# than a string. Equal ids always hash equal; two different ids of one group hashing equal (a
# 2^-64 event per pair) is the only way a finding could be missed. Evidence is exact.
_h = F.xxhash64


def _flagged_messages(ctx: AuditContext):
    """Records of messages with more than one copy or more than one token: the state shared by
    EO101 and EO102 (the costliest pass of a full audit). Grouping is by the hash of the message
    id; the evidence regroups by the id itself."""
    return flagged_records(
        ctx, "messages", ["endpoint", "topic", "_mh"], F.lit(True),
        (F.count(F.lit(1)) > 1) | (F.min(_h("token_id")) != F.max(_h("token_id"))),
        {"_mh": _h("message_id")})


def redelivered_copies(ctx: AuditContext) -> Iterator[Hit]:
    """EO101: the same message id and token at more than one offset (harmless if handled)."""
    g = _flagged_messages(ctx).groupBy(*_MESSAGE, "token_id").agg(
        F.count(F.lit(1)).alias("copies"), F.sort_array(F.collect_list(_position())).alias("positions"),
    ).where("copies > 1")
    yield from _per_endpoint("EO101", g, ctx)


def message_under_several_tokens(ctx: AuditContext) -> Iterator[Hit]:
    """EO102: one logical message carried by two or more tokens: each token lets it through once."""
    g = _flagged_messages(ctx).groupBy(*_MESSAGE).agg(
        F.countDistinct("token_id").alias("tokens"), F.sort_array(F.collect_set("token_id")).alias("token_ids"),
        F.sort_array(F.collect_list(_position())).alias("positions"),
    ).where("tokens > 1")
    yield from _per_endpoint("EO102", g, ctx)


def sequence_on_several_messages(ctx: AuditContext) -> Iterator[Hit]:
    """EO103: PIP-6 (producer, sequence) reused by different message ids."""
    keys = ["endpoint", "topic", "producer", "seq"]
    rows = flagged_records(ctx, "sequences", keys, F.col("producer").isNotNull() & F.col("seq").isNotNull(),
                           F.min(_h("message_id")) != F.max(_h("message_id")))
    g = rows.groupBy(*keys).agg(
        F.countDistinct("message_id").alias("messages"), F.sort_array(F.collect_set("message_id")).alias("message_ids"),
        F.sort_array(F.collect_list(_position())).alias("positions"),
    ).where("messages > 1")
    yield from _per_endpoint("EO103", g.withColumnRenamed("seq", "sequence"), ctx)


_BUCKET_BITS = 15  # Spark's bitmaps hold 32768 bits (4 KiB): one bucket of sequence numbers each


def _gaps_inside(buckets):
    """Runs of missing numbers inside each bucket's [lo, hi], read from its bitmap (bit k of byte
    k div 8, least significant first) in Spark SQL: the bytes that are not all ones, then their
    zero bits, then consecutive missing numbers joined into runs (row number minus number)."""
    prod = ["endpoint", "topic", "producer"]
    with_base = buckets.withColumn("base", F.shiftleft("bucket", _BUCKET_BITS))
    holey = with_base.select(*prod, "bucket", "base", "lo", "hi", F.inline(F.expr(
        "filter(transform(sequence(int((lo - base) div 8), int((hi - base) div 8)), "
        "i -> named_struct('i', i, 'v', int(conv(hex(substring(bitmap, i + 1, 1)), 16, 10)))), x -> x.v != 255)")))
    zero_bits = holey.select(*prod, "bucket", "base", "lo", "hi", "i", F.explode(
        F.expr("filter(sequence(0, 7), b -> shiftright(v, b) & 1 = 0)")).alias("b"))
    missing = zero_bits.select(*prod, "bucket", (F.col("base") + F.col("i") * 8 + F.col("b")).alias("n")).where(
        (F.col("n") > F.col("lo")) & (F.col("n") < F.col("hi")))
    island = F.col("n") - F.row_number().over(Window.partitionBy(*prod, "bucket").orderBy("n"))
    return missing.withColumn("_run", island).groupBy(*prod, "bucket", "_run").agg(
        F.min("n").alias("missing_from"), F.max("n").alias("missing_to")).drop("bucket", "_run")


def _bucket_state(ctx: AuditContext):
    """Every producer's sequence buckets, kept as EO104's state for the next `--since-last` run.
    Continuing from a base run's state, new records are OR-ed into their buckets' bitmaps (a
    record only ever adds a number); only buckets that records lost to retention fell in are
    rebuilt, from the indexed records of those buckets."""
    def numbers(df):
        return df.where(F.col("producer").isNotNull() & F.col("seq").isNotNull())

    def bucketed(df):
        return numbers(df).withColumn("bucket", F.shiftright("seq", _BUCKET_BITS))

    keys = ["endpoint", "topic", "producer", "bucket"]

    def build():
        carried = ctx.carried("sequence-buckets")
        if carried is None:
            return _buckets(numbers(ctx.valid_records))
        carried = carried.where(F.col("endpoint").isin(list(ctx.plans)))
        fresh = numbers(ctx.valid_fresh)
        parts = [carried, _buckets(fresh)]
        if ctx.dropped is not None:
            lost = ctx.keys(bucketed(ctx.dropped.where(F.col("problem").isNull())).select(*keys).distinct(), probe=True)
            near = bucketed(ctx.valid_indexed).join(lost, keys, "left_semi").drop("bucket")
            parts = [carried.join(lost, keys, "left_anti"), _buckets(fresh), _buckets(near)]
        return reduce(lambda a, b: a.unionByName(b), parts).groupBy(*keys).agg(
            F.bitmap_or_agg("bitmap").alias("bitmap"), F.min("lo").alias("lo"), F.max("hi").alias("hi"))
    return ctx.state("sequence-buckets", build)


def _buckets(numbers):
    """One row per (endpoint, topic, producer, bucket of 32768 numbers): bitmap, lowest, highest."""
    return numbers.groupBy("endpoint", "topic", "producer", F.shiftright("seq", _BUCKET_BITS).alias("bucket")).agg(
        F.bitmap_construct_agg(F.col("seq").bitwiseAND((1 << _BUCKET_BITS) - 1)).alias("bitmap"),
        F.min("seq").alias("lo"), F.max("seq").alias("hi"))


def _gaps(buckets):
    """Every run of missing numbers between each producer's lowest and highest."""
    prod = ["endpoint", "topic", "producer"]
    inside = _gaps_inside(buckets.where(F.bitmap_count("bitmap") < F.col("hi") - F.col("lo") + 1))
    nxt = F.lead("lo").over(Window.partitionBy(*prod).orderBy("bucket"))
    between = buckets.withColumn("_next", nxt).where(F.col("_next") > F.col("hi") + 1).select(
        *prod, (F.col("hi") + 1).alias("missing_from"), (F.col("_next") - 1).alias("missing_to"))
    return inside.unionByName(between)


def sequence_gaps(ctx: AuditContext) -> Iterator[Hit]:
    """EO104: missing sequence numbers between a producer's lowest and highest, except those that
    pending outbox entries hold (not sent yet: reported as stuck entries, EO301).

    Sequence numbers are folded into bitmaps of 32768 (one row per producer and bucket, built by a
    map-side aggregate, so the shuffle carries 1 bit per number instead of a row). Gaps inside a
    bucket come from its bitmap (only buckets with fewer numbers than their span are read); gaps
    between buckets from consecutive buckets' lowest and highest.
    """
    prod = ["endpoint", "topic", "producer"]
    gaps = _gaps(_bucket_state(ctx))
    # By producer, not topic: archived topics are often renamed, the producer's name is not.
    pending = ctx.pending_outgoing.where(F.col("seq").isNotNull()).select(
        F.col("producer").alias("p_producer"), F.col("seq").alias("p_seq")).distinct()
    held = gaps.join(F.broadcast(pending), (gaps.producer == pending.p_producer)
                     & pending.p_seq.between(gaps.missing_from, gaps.missing_to)).groupBy(
        *prod, "missing_from", "missing_to").agg(F.count(F.lit(1)).alias("held"))
    unexplained = gaps.join(held, [*prod, "missing_from", "missing_to"], "left").where(
        F.col("held").isNull() | (F.col("held") < F.col("missing_to") - F.col("missing_from") + 1)).drop("held")
    yield from _per_endpoint("EO104", unexplained.withColumn(
        "missing", F.col("missing_to") - F.col("missing_from") + 1), ctx)


def records_without_protocol(ctx: AuditContext) -> Iterator[Hit]:
    """EO105: records the protocol cannot account for, with why (missing header, not UTF-8,
    unparsable sequence, malformed eo-blobs)."""
    bad = ctx.records.where(F.col("problem").isNotNull()).select(
        "endpoint", "topic", "partition", "offset", "problem",
        F.when(F.is_valid_utf8("message_id"), F.col("message_id")).alias("message_id"))
    yield from _per_endpoint("EO105", bad, ctx)


def undecodable_archive_lines(ctx: AuditContext) -> Iterator[Hit]:
    """EO106: lines of a JSON topic archive that are not records, so no other check saw them.
    They have no offset to place them in a range or an index, so every audit reads the archive's
    lines again and names them until the file is repaired."""
    from eoctl.sources.archive import undecodable_lines

    for name, ep in ctx.endpoints.items():
        if ep.input is not None and ep.input.archive and ep.input.archive_format == "json":
            lines = undecodable_lines(ctx.spark, ep.input.archive, ep.input.topics).orderBy("file", "line")
            yield "EO106", name, ep.input.archive, lines
