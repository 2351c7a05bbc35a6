"""Token checks (EO201-EO204), read-only: the token store against the records and pending entries."""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import functions as F

from eoctl.checks import Hit
from eoctl.checks.context import AuditContext


def _tokens(ctx: AuditContext) -> Iterator[tuple[str, object]]:
    for name in ctx.endpoints:
        tokens = ctx.table(name, "tokens")
        if tokens is not None:
            yield name, tokens


def orphan_tokens(ctx: AuditContext) -> Iterator[Hit]:
    """EO201: a token on no record, in no pending entry, older than the grace period (gc candidate).
    Young tokens are not findings: their message may still be on its way."""
    carried = ctx.valid_records.select("token_id").distinct()
    for name, tokens in _tokens(ctx):
        intents = ctx.intents
        orphans = (tokens.where(F.col("created_at") < ctx.ts(ctx.options.grace))
                   .join(carried, "token_id", "left_anti")
                   .join(ctx.referenced_tokens, "token_id", "left_anti"))
        if intents is not None:  # register-cleanup evidence: which attempt registered it
            registered = intents.where(F.col("kind") == "token").select(
                F.col("ref").alias("token_id"), F.col("incoming_message_id").alias("registered_by_message"),
                F.col("attempt_id").alias("registered_by_attempt"))
            orphans = orphans.join(registered, "token_id", "left")
        yield "EO201", name, ctx.config.endpoints[name].tokens.table, orphans


def silent_loss(ctx: AuditContext) -> Iterator[Hit]:
    """EO202: an in-flight record whose token is gone and whose effect exists nowhere: the endpoint
    will drop it as a duplicate. A copy of an already processed message is not a loss."""
    from eoctl.sources.tables import read_table

    for name, tokens in _tokens(ctx):
        ep = ctx.endpoints[name]
        mine = ctx.valid_records.where(F.col("endpoint") == name)
        done = mine.where("processed").select("message_id").distinct()
        in_flight = mine.where(~F.col("processed"))
        lost = in_flight.join(tokens.select("token_id"), "token_id", "left_anti").join(done, "message_id", "left_anti")
        outbox = ctx.table(name, "outbox")
        if outbox is not None:  # an entry in progress is a stuck entry (EO301), not a loss
            lost = lost.join(outbox.select(F.col("incoming_message_id").alias("message_id")), "message_id", "left_anti")
        for sink in ep.sinks:
            effects = read_table(ctx.spark, ctx.config, sink).select(F.col(sink.message_id_column).cast("string").alias("message_id"))
            lost = lost.join(effects, "message_id", "left_anti")
        yield "EO202", name, ", ".join(ep.input.topics) if ep.input else name, lost.select(
            "topic", "partition", "offset", "message_id", "token_id", "committed")


def leaked_tokens(ctx: AuditContext) -> Iterator[Hit]:
    """EO203: the token of a processed record is still in the store (and no pending entry holds it)."""
    for name, tokens in _tokens(ctx):
        processed = ctx.valid_records.where((F.col("endpoint") == name) & F.col("processed")).select(
            "token_id", "message_id", "topic", "partition", "offset").dropDuplicates(["token_id"])
        leaked = (tokens.select("token_id", "created_at", "attempt_id").join(processed, "token_id")
                  .join(ctx.referenced_tokens, "token_id", "left_anti"))
        yield "EO203", name, ctx.config.endpoints[name].tokens.table, leaked


def committed_below_log_start(ctx: AuditContext) -> Iterator[Hit]:
    """EO204: the consumer's committed offset is below the first offset the log still has."""
    from eoctl.sources.kafka import partition_offsets

    for name, ep in ctx.endpoints.items():
        if ep.input is None:
            continue
        if ep.input.kafka:
            starts = {(p.topic, p.partition): p.log_start
                      for p in partition_offsets(ctx.config.kafka[ep.input.kafka], ep.input.topics)}
        else:  # an archive's log start is the first offset it holds (one row per partition)
            rows = ctx.records.where(F.col("endpoint") == name).groupBy("topic", "partition").agg(
                F.min("offset").alias("start")).collect()
            starts = {(r["topic"], r["partition"]): r["start"] for r in rows}
        lost = [(t, p, c, starts[(t, p)], starts[(t, p)] - c)
                for t, parts in ctx.committed[name].items() for p, c in parts.items()
                if (t, p) in starts and c < starts[(t, p)]]
        df = ctx.spark.createDataFrame(
            lost, "topic string, partition int, committed long, log_start long, records_lost long")
        yield "EO204", name, ", ".join(ep.input.topics), df
