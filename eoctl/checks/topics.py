"""Topic checks (EO101-EO105): one scan of the records, grouped several ways."""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import functions as F
from pyspark.sql.window import Window

from eoctl.checks import Hit
from eoctl.checks.context import AuditContext



def _per_endpoint(code: str, df, ctx: AuditContext) -> Iterator[Hit]:
    for name in ctx.endpoints:
        if ctx.endpoints[name].input is not None:
            part = df.where(F.col("endpoint") == name).drop("endpoint")
            yield code, name, ", ".join(ctx.endpoints[name].input.topics), part


_position = F.struct("partition", "offset")


def _flagged(records, keys: list[str], condition, evidence: list):
    """Groups of `keys` meeting `condition`, found with a cheap aggregate first; the evidence lists
    are gathered for the flagged groups only (few), not for every group."""
    hits = records.groupBy(*keys).agg(condition.alias("_hit")).where("_hit").drop("_hit")
    return records.join(hits, keys).groupBy(*keys).agg(*evidence)  # AQE broadcasts `hits` when small


def redelivered_copies(ctx: AuditContext) -> Iterator[Hit]:
    """EO101: the same message id and token at more than one offset (harmless if handled)."""
    g = _flagged(ctx.valid_records, ["endpoint", "topic", "message_id", "token_id"], F.count(F.lit(1)) > 1,
                 [F.count(F.lit(1)).alias("copies"), F.sort_array(F.collect_list(_position)).alias("positions")])
    yield from _per_endpoint("EO101", g, ctx)


def message_under_several_tokens(ctx: AuditContext) -> Iterator[Hit]:
    """EO102: one logical message carried by two or more tokens: each token lets it through once."""
    g = _flagged(ctx.valid_records, ["endpoint", "topic", "message_id"], F.min("token_id") != F.max("token_id"),
                 [F.countDistinct("token_id").alias("tokens"), F.sort_array(F.collect_set("token_id")).alias("token_ids"),
                  F.sort_array(F.collect_list(_position)).alias("positions")])
    yield from _per_endpoint("EO102", g, ctx)


def sequence_on_several_messages(ctx: AuditContext) -> Iterator[Hit]:
    """EO103: PIP-6 (producer, sequence) reused by different message ids."""
    r = ctx.valid_records.where(F.col("producer").isNotNull() & F.col("seq").isNotNull())
    g = _flagged(r, ["endpoint", "topic", "producer", "seq"], F.min("message_id") != F.max("message_id"),
                 [F.countDistinct("message_id").alias("messages"),
                  F.sort_array(F.collect_set("message_id")).alias("message_ids"),
                  F.sort_array(F.collect_list(_position)).alias("positions")])
    yield from _per_endpoint("EO103", g.withColumnRenamed("seq", "sequence"), ctx)


def sequence_gaps(ctx: AuditContext) -> Iterator[Hit]:
    """EO104: missing sequence numbers between a producer's lowest and highest, except those that
    pending outbox entries hold (not sent yet: reported as stuck entries, EO301)."""
    seqs = ctx.valid_records.where(F.col("producer").isNotNull() & F.col("seq").isNotNull()).select(
        "endpoint", "topic", "producer", "seq").distinct()
    w = Window.partitionBy("endpoint", "topic", "producer").orderBy("seq")
    gaps = seqs.withColumn("next", F.lead("seq").over(w)).where(F.col("next") > F.col("seq") + 1).select(
        "endpoint", "topic", "producer", (F.col("seq") + 1).alias("missing_from"),
        (F.col("next") - 1).alias("missing_to"))
    # By producer, not topic: archived topics are often renamed, the producer's name is not.
    pending = ctx.pending_outgoing.where(F.col("seq").isNotNull()).select(
        F.col("producer").alias("p_producer"), F.col("seq").alias("p_seq")).distinct()
    held = gaps.join(F.broadcast(pending), (gaps.producer == pending.p_producer)
                     & pending.p_seq.between(gaps.missing_from, gaps.missing_to)).groupBy(
        "endpoint", "topic", "producer", "missing_from", "missing_to").agg(F.count(F.lit(1)).alias("held"))
    unexplained = gaps.join(held, ["endpoint", "topic", "producer", "missing_from", "missing_to"], "left").where(
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
