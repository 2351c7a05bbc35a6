"""Record-keyed checks' state: the records behind their findings, kept from run to run so that
`audit --since-last` re-examines only the keys new records touch (see eoctl.incremental)."""

from __future__ import annotations

from pyspark.sql import functions as F

from eoctl.checks.context import AuditContext

#: the record columns a check state keeps: those a record never changes
_STABLE = ["endpoint", "topic", "partition", "offset", "timestamp", "message_id", "token_id", "producer", "seq",
           "causation_id", "attempt_id"]


def flagged_records(ctx: AuditContext, name: str, keys: list[str], where, flag, derived: dict | None = None):
    """The valid records (where `where`) of every key that `flag`, an aggregate over a key's
    records, picks: the few rows a record-keyed check (EO101-EO103, EO302) reports from, found
    by ONE cheap aggregation over the records, and kept as the check's state for the next
    `--since-last` run. `derived`: key columns computed from a record (a hash of the message id).

    Continuing from a base run's state, only the keys the new records touch are looked at again,
    over the new records and the indexed records sharing those keys (found by probing the index
    with one 64-bit hash per key); every other key keeps the state's records, less those retention
    took (a key loses records only that way, so it can only lose its finding, which the check's
    final aggregate decides)."""
    derived = derived or {}

    def prepare(df):
        df = df.where(where).select(*_STABLE)
        for col, expr in derived.items():
            df = df.withColumn(col, expr)
        return df.withColumn("_k", F.xxhash64(*keys))

    def pick(rows):
        groups = ctx.keys(rows.groupBy(*keys).agg(flag.alias("_hit")).where("_hit").select(*keys))
        return rows.join(groups, keys)

    def build():
        carried = ctx.carried(name)
        if carried is None:  # no base, or it kept no state for this check: every record
            rows = pick(prepare(ctx.valid_records))
        else:
            fresh = prepare(ctx.valid_fresh)
            touched = ctx.keys(fresh.select("_k").distinct(), probe=True)
            near = prepare(ctx.valid_indexed).join(touched, "_k", "left_semi")
            kept = prepare(ctx.bounded(carried)).join(touched, "_k", "left_anti")
            # few rows (the new records and their keys' indexed ones): kept, so the index is probed once
            rows = pick(ctx.persist(fresh.unionByName(near))).unionByName(kept)
        return rows.select(*_STABLE)
    return ctx.state(name, build)
