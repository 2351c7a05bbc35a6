"""Outbox checks (EO301, EO302)."""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import functions as F
from pyspark.sql.window import Window

from eoctl.checks import Hit
from eoctl.checks.context import OUTGOING, AuditContext
from eoctl.checks.keyed import flagged_records


def stuck_entries(ctx: AuditContext) -> Iterator[Hit]:
    """EO301: pending longer than --stuck-after: its messages never left (replay candidate).
    Fresh pending entries are work in progress, not findings."""
    for name in ctx.endpoints:
        outbox = ctx.table(name, "outbox")
        if outbox is None:
            continue
        stuck = outbox.where(F.col("created_at") < ctx.ts(ctx.options.stuck_after)).select(
            "endpoint", "incoming_message_id", "incoming_token_id", "attempt_id",
            F.size(F.from_json(F.col("outgoing").cast("string"), OUTGOING)).alias("outgoing_messages"),
            # the messages it holds back: what an operator traces, and what names it in a trace
            F.from_json(F.col("outgoing").cast("string"), OUTGOING).message_id.alias("message_ids"),
            F.col("tokens_committed_at").isNotNull().alias("tokens_committed"), "created_at",
            (F.lit(ctx.options.now.timestamp()) - F.col("created_at").cast("double")).cast("long").alias("age_seconds"))
        yield "EO301", name, ctx.config.endpoints[name].outbox.table, stuck


def ghost_messages(ctx: AuditContext) -> Iterator[Hit]:
    """EO302: one incoming message (causation) made a producer send under two attempts. Only one
    attempt committed: the one a pending entry names, else the last to send; the others are ghosts."""
    key = ["endpoint", "topic", "producer", "causation_id"]
    # cheap aggregate first (over 64-bit hashes of the attempt ids, as topics.py explains): only
    # causations sent under two attempts are looked at closely; they are the check's state
    r = flagged_records(
        ctx, "causations", key,
        F.col("producer").isNotNull() & F.col("causation_id").isNotNull() & F.col("attempt_id").isNotNull(),
        F.min(F.xxhash64("attempt_id")) != F.max(F.xxhash64("attempt_id")))
    attempts = r.groupBy("endpoint", "topic", "producer", "causation_id", "attempt_id").agg(
        F.min("timestamp").alias("first_sent"), F.min(F.struct("partition", "offset")).alias("first_position"),
        F.sort_array(F.collect_set("message_id")).alias("message_ids"))
    entries = ctx.pending_outgoing.select(
        F.col("sender").alias("producer"), F.col("incoming_message_id").alias("causation_id"),
        F.col("entry_attempt_id").alias("pending_attempt")).distinct()
    w = Window.partitionBy(*key)
    ranked = (attempts.withColumn("attempts", F.count(F.lit(1)).over(w)).where("attempts > 1")
              .join(entries, ["producer", "causation_id"], "left")
              .withColumn("last_sent", F.max(F.struct("first_sent", "first_position")).over(w))
              .withColumn("committed_attempt", F.coalesce(
                  F.col("pending_attempt"),
                  F.max(F.when(F.struct("first_sent", "first_position") == F.col("last_sent"), F.col("attempt_id"))).over(w))))
    ghosts = ranked.where(F.col("attempt_id") != F.col("committed_attempt")).select(
        *key, F.col("attempt_id").alias("ghost_attempt"), "message_ids", "committed_attempt", "first_sent")
    for name in ctx.endpoints:
        if ctx.endpoints[name].input is not None:
            yield "EO302", name, ", ".join(ctx.endpoints[name].input.topics), ghosts.where(
                F.col("endpoint") == name).drop("endpoint")
