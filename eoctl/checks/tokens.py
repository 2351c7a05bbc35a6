"""Token checks (EO201-EO204), read-only: the token store against the records and pending entries."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from functools import reduce

from pyspark.sql import functions as F

from eoctl.checks import Hit
from eoctl.checks.context import AuditContext
from eoctl.engine.frames import local_frame


def _tokens(ctx: AuditContext) -> Iterator[tuple[str, object]]:
    for name in ctx.endpoints:
        tokens = ctx.table(name, "tokens")
        if tokens is not None:
            yield name, tokens


#: the record columns the token checks read, and the token state keeps (a record never changes them)
_CARRIER = ["endpoint", "topic", "partition", "offset", "message_id", "token_id"]


def _carriers(ctx: AuditContext):
    """The valid records a token check can report: those carrying a token some store holds, and
    those in flight; with `processed` and `committed`. Kept as a check state with the store's token
    ids, so that an `audit --since-last` run takes them from the state and the new records instead
    of probing every indexed record.

    That is exact when, since the base run, no committed offset moved back (no record came back in
    flight) and no token appeared that existed before the base run started but was not in its
    store (a token is created before its record is sent, and lives until the record is processed:
    an indexed record's token in a store now was in the store the base run read; a restored
    token breaks that). Otherwise every record is looked at again and `run.scan.rebuilt` says why."""
    def build():
        names = tuple(name for name, _ in _tokens(ctx))
        stored = _stored(ctx, names)
        ctx.state("token-ids", lambda: stored.select("token_id"))
        columns = [*_CARRIER, "committed", "processed"]
        carried = _continued(ctx, reduce(lambda a, b: a.unionByName(b), [
            ctx.table(n, "tokens").select("token_id", "created_at") for n in names]))
        records = ctx.valid_records.select(*columns) if carried is None else ctx.valid_fresh.select(
            *columns).unionByName(carried.select(*columns))
        return records.join(stored, "token_id", "left").where(
            F.col("_stored").isNotNull() | ~F.col("processed")).drop("_stored")
    carriers = ctx.cached(("token-carriers",), build)
    ctx.state("token-carriers", lambda: carriers.select(*_CARRIER))
    return carriers


def _stored(ctx: AuditContext, names: tuple[str, ...]):
    """The distinct token ids the stores of endpoints `names` hold, with `_stored`, persisted and
    counted once to probe records with (with one token store, the carriers and the token join
    probe the same set)."""
    def compute():
        ids = reduce(lambda a, b: a.unionByName(b), [ctx.table(n, "tokens").select("token_id") for n in names])
        return ctx.keys(ids.distinct().withColumn("_stored", F.lit(True)), probe=True)
    return ctx.once(("stored-token-ids", names), compute)


def _continued(ctx: AuditContext, tokens):
    """The base run's token carriers (bounded, with `processed` now), or None when they are not
    enough (see _carriers)."""
    base, name = ctx.base, "token-carriers"
    ids = ctx.base_state("token-ids")
    if base is None or ctx.base_state(name) is None or ids is None:
        return None
    if base.committed is None or base.started_at is None:
        ctx.rebuilt[name] = "the last run's index does not say which committed offsets it saw"
        return None
    for endpoint, topics in base.committed.items():
        if endpoint not in ctx.endpoints:
            continue
        for topic, parts in topics.items():
            for partition, then in parts.items():
                now = ctx.committed.get(endpoint, {}).get(topic, {}).get(partition)
                if now is None or now < then:
                    ctx.rebuilt[name] = (f"the committed offset of {endpoint} on {topic}[{partition}] moved back "
                                         f"from {then} to {now}: its records are in flight again")
                    return None
    started = dt.datetime.fromisoformat(base.started_at).astimezone(dt.timezone.utc).replace(tzinfo=None)
    late = tokens.where(F.col("created_at") < F.lit(started)).join(
        ids, "token_id", "left_anti").count()  # a store-sized job, usually 0 rows
    if late:
        ctx.rebuilt[name] = (f"{late:,} stored token(s) created before the last run started were not in the "
                             "stores it read (restored?)")
        return None
    return ctx.with_progress(ctx.carried(name))


def _token_join(ctx: AuditContext, name: str, tokens):
    """ONE join of the token store with the records, shared by EO201-EO203, keeping only the few
    rows they report: tokens no record carries (orphan candidates), tokens of this endpoint's
    processed records (leak candidates), and this endpoint's in-flight records whose token is gone
    (loss candidates).

    Only records that carry a stored token, or are this endpoint's in flight, can be any of these:
    the records are first filtered to those by probing the store's token ids (broadcast when the
    store is not huge, so the records are streamed once, not shuffled), and only they meet the
    store in the full outer join."""
    def build():
        stored = _stored(ctx, (name,))
        records = _carriers(ctx) if ctx.keeps_state else ctx.valid_records
        r = records.select(
            "token_id", "message_id", "topic", "partition", "offset", "processed", "committed",
            (F.col("endpoint") == name).alias("mine"))
        r = r.join(stored, "token_id", "left").where(
            F.col("_stored").isNotNull() | (F.col("mine") & ~F.col("processed"))).drop("_stored")
        t = tokens.select("token_id", "created_at", "attempt_id", F.col("message_id").alias("token_message_id"),
                          F.lit(True).alias("stored"))
        j = r.join(t, "token_id", "full_outer")
        orphan = F.col("mine").isNull() & (F.col("created_at") < ctx.ts(ctx.options.grace))
        leaked = F.col("mine") & F.col("processed") & F.col("stored").isNotNull()
        lost = F.col("mine") & ~F.col("processed") & F.col("stored").isNull()
        return j.select("*", F.when(orphan, "orphan").when(leaked, "leaked").when(lost, "lost").alias("kind")).where(
            F.col("kind").isNotNull())
    return ctx.cached(("tokens", name), build)


def _absent(ctx: AuditContext, candidates, key: str, big):
    """`candidates` (few) whose `key` is not in `big`: `big` is filtered by the candidates' keys
    first (a broadcast semi-join), so it is streamed once instead of shuffled for an anti-join.
    The result is computed and kept at once: `big` (every record, a sink) is then scanned once,
    not again by each later step and by the evidence."""
    present = big.join(ctx.keys(candidates.select(key).distinct()), key, "left_semi").select(key).distinct()
    return ctx.keys(candidates.join(present, key, "left_anti"))


def orphan_tokens(ctx: AuditContext) -> Iterator[Hit]:
    """EO201: a token on no record, in no pending entry, older than the grace period (gc candidate).
    Young tokens are not findings: their message may still be on its way."""
    for name, tokens in _tokens(ctx):
        intents = ctx.intents
        orphans = _token_join(ctx, name, tokens).where(F.col("kind") == "orphan").select(
            "token_id", F.col("token_message_id").alias("message_id"), "created_at", "attempt_id",
        ).join(ctx.referenced_tokens, "token_id", "left_anti")
        if intents is not None:  # register-cleanup evidence: which attempt registered it
            registered = intents.where(F.col("kind") == "token").select(
                F.col("ref").alias("token_id"), F.col("incoming_message_id").alias("registered_by_message"),
                F.col("attempt_id").alias("registered_by_attempt"))
            orphans = orphans.join(registered, "token_id", "left")
        yield "EO201", name, ctx.config.endpoints[name].tokens.table, orphans


def silent_loss(ctx: AuditContext) -> Iterator[Hit]:
    """EO202: an in-flight record whose token is gone and whose effect exists nowhere: the endpoint
    will drop it as a duplicate. A copy of an already processed message is not a loss."""
    for name, tokens in _tokens(ctx):
        ep = ctx.endpoints[name]
        lost = _token_join(ctx, name, tokens).where(F.col("kind") == "lost").select(
            "topic", "partition", "offset", "message_id", "token_id", "committed")
        lost = _absent(ctx, lost, "message_id", _processed_copies(ctx, name))
        outbox = ctx.table(name, "outbox")
        if outbox is not None:  # an entry in progress is a stuck entry (EO301), not a loss
            lost = lost.join(outbox.select(F.col("incoming_message_id").alias("message_id")), "message_id", "left_anti")
        for sink in ep.sinks:
            effects = ctx.sink(name, sink).select(
                F.col(sink.message_id_column).cast("string").alias("message_id"))
            lost = _absent(ctx, lost, "message_id", effects)
        yield "EO202", name, ", ".join(ep.input.topics) if ep.input else name, lost


def _processed_copies(ctx: AuditContext, name: str):
    """Endpoint `name`'s processed records, among which EO202 looks for a copy of each lost
    candidate. A candidate is a record; another copy of its message on its topic makes the message
    one the messages state (EO101/EO102) holds every copy of. So when the endpoint reads one topic
    and this run built that state, it is looked in instead of every record."""
    ep = ctx.endpoints[name]
    messages = ctx.built_state("messages")
    if messages is not None and ep.input is not None and len(ep.input.topics) == 1:
        copies = ctx.with_processed(messages.where(F.col("endpoint") == name))
    else:
        copies = ctx.valid_records.where(F.col("endpoint") == name)
    return copies.where(F.col("processed"))


def leaked_tokens(ctx: AuditContext) -> Iterator[Hit]:
    """EO203: the token of a processed record is still in the store (and no pending entry holds
    it). A token several processed records carry is reported once, with the first of them."""
    from pyspark.sql.window import Window

    first = Window.partitionBy("token_id").orderBy("topic", "partition", "offset")
    for name, tokens in _tokens(ctx):
        leaked = _token_join(ctx, name, tokens).where(F.col("kind") == "leaked").select(
            "token_id", "created_at", "attempt_id", "message_id", "topic", "partition", "offset",
        ).withColumn("_rank", F.row_number().over(first)).where("_rank = 1").drop("_rank").join(
            ctx.referenced_tokens, "token_id", "left_anti")
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
        else:  # an archive's log start is the first offset it holds
            starts = ctx.archive_starts(name)
        lost = [(t, p, c, starts[(t, p)], starts[(t, p)] - c)
                for t, parts in ctx.committed[name].items() for p, c in parts.items()
                if (t, p) in starts and c < starts[(t, p)]]
        df = local_frame(ctx.spark, 
            lost, "topic string, partition int, committed long, log_start long, records_lost long")
        yield "EO204", name, ", ".join(ep.input.topics), df
