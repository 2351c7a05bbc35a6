"""`eoctl gc-tokens`: remove garbage tokens past the grace period, journaled first, in batches.

Plan (Spark, read-only): every token classified (eoctl.ops.reconcile); the collectable ones are
garbage older than the grace period. Execute, under the single-runner lease, per batch of one
endpoint's tokens and in one transaction of its store: copy the rows to the journal table
(`eoctl_journal_<tokens table>`, same columns plus the run id), re-checking the age (and, when
the endpoint's outbox is in the same store, that no pending entry holds the token), then delete
exactly the journaled rows. The intents that registered those tokens follow, journaled the same
way in their own store. A run killed between the two is finished by the next run. `--restore RUN`
copies a run's journal back.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config, TokenColumns
from eoctl.errors import UsageError
from eoctl.ops.common import (
    GcOptions,
    GcResult,
    RestoreResult,
    Tally,
    bound_to_limit,
    chunks,
    new_run_id,
    run_changing,
    sample_rows,
    selected,
)
from eoctl.ops.journal import (
    JOURNAL_EXTRA,
    intent_table,
    intent_tables,
    intents_naming,
    journal_and_delete_intents,
    journal_of,
    purge_journal,
    q,
    restore_table,
)
from eoctl.ops.lease import Lease, RunLog, utcnow
from eoctl.sources.tables import store_named
from eoctl.stores.db import StoreConfig, in_list, open_db

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

COMMAND = "gc-tokens"


@dataclass(frozen=True)
class TokenTable:
    store_name: str
    store: StoreConfig
    table: str
    cols: TokenColumns
    outbox: str | None  # the endpoint's outbox table when it lives in the same store
    outbox_incoming_token: str | None


def token_table(config: Config, name: str) -> TokenTable | None:
    ep = config.endpoint(name)
    store = ep.store_of(ep.tokens)
    if store is None:
        return None
    same = ep.store_of(ep.outbox) == store
    return TokenTable(store, store_named(config, store), ep.tokens.table, ep.tokens.columns,
                      ep.outbox.table if same else None, ep.outbox.columns.incoming_token_id if same else None)


# ------------------------------------------------------------------------------------ plan


def plan(spark: SparkSession, config: Config, options: GcOptions) -> tuple[DataFrame | None, list[Tally], Any]:
    """(collectable tokens, one tally per endpoint, the audit context to release)."""
    from functools import reduce

    from pyspark.sql import functions as F

    from eoctl.checks.context import AuditContext, AuditOptions
    from eoctl.ops.reconcile import token_classes

    # Evidence comes from every endpoint (a pending entry of one holds tokens of another);
    # only the selected endpoints' tokens are collected.
    ctx = AuditContext(spark, config, AuditOptions(now=options.now, grace=options.grace))
    frames, tallies = [], []
    for name in selected(config, options.endpoints):
        classes = token_classes(ctx, name)
        if classes is None:
            continue
        garbage = ctx.persist(classes.where(F.col("class") == "garbage"))
        counts = {r["collectable"]: r["count"] for r in garbage.groupBy("collectable").count().collect()}
        tallies.append(Tally(name, garbage=sum(counts.values()), planned=counts.get(True, 0),
                             skipped_young=counts.get(False, 0)))
        frames.append(garbage.where(F.col("collectable")).select(
            "endpoint", "token_id", "message_id", "created_at", "reason", "intents"))
    collectable = reduce(lambda a, b: a.unionByName(b), frames) if frames else None
    return collectable, sorted(tallies, key=lambda t: t.endpoint), ctx


def gc_tokens(spark: SparkSession, config: Config, options: GcOptions,
              progress: Callable[[str], None] = lambda _m: None) -> GcResult:
    run_id = new_run_id()
    if not options.execute:
        progress("classifying tokens")
        collectable, tallies, ctx = plan(spark, config, options)
        try:
            bound_to_limit(tallies, options.max_deletes)
            sample = sample_rows(collectable, options.evidence_rows)
        finally:
            ctx.release()
        return GcResult(COMMAND, run_id, False, int(options.grace.total_seconds()), tallies, sample)

    def work(lease: Lease, log: RunLog) -> GcResult:
        progress("finishing interrupted runs")
        leftovers = finish_leftovers(config, log, run_id, options)
        progress("classifying tokens")
        collectable, tallies, ctx = plan(spark, config, options)
        try:
            bound_to_limit(tallies, options.max_deletes)
            sample = sample_rows(collectable, options.evidence_rows)
            if collectable is not None:
                _execute(config, collectable, tallies, options, run_id, lease, progress)
        finally:
            ctx.release()
        progress("purging journal rows past the retention")
        purged = purge(config, options)
        return GcResult(COMMAND, run_id, True, int(options.grace.total_seconds()), tallies, sample, leftovers, purged)

    return run_changing(config, COMMAND, run_id, work)


# --------------------------------------------------------------------------------- execute


def _execute(config: Config, collectable: DataFrame, tallies: list[Tally], options: GcOptions, run_id: str,
             lease: Lease, progress: Callable[[str], None]) -> None:
    from pyspark import StorageLevel

    by_endpoint = {t.endpoint: t for t in tallies}
    # The rows to delete are bounded by --max-deletes; they are computed once and then streamed.
    rows_df = collectable.orderBy("endpoint", "token_id").limit(options.max_deletes).persist(
        StorageLevel.MEMORY_AND_DISK)
    try:
        rows_df.count()
        batch: list[Any] = []
        current: str | None = None
        for row in rows_df.orderBy("endpoint", "token_id").toLocalIterator():
            if batch and (row["endpoint"] != current or len(batch) >= options.batch_size):
                _delete_batch(config, current, batch, run_id, options, by_endpoint[current])
                lease.renew()
                progress(f"{sum(t.deleted for t in tallies)} tokens removed")
                batch = []
            current = row["endpoint"]
            batch.append(row)
        if batch:
            _delete_batch(config, current, batch, run_id, options, by_endpoint[current])
    finally:
        rows_df.unpersist()


def _delete_batch(config: Config, endpoint: str, batch: list[Any], run_id: str, options: GcOptions,
                  tally: Tally) -> None:
    table = token_table(config, endpoint)
    assert table is not None
    ids = [r["token_id"] for r in batch]
    removed = _journal_and_delete_tokens(table, ids, run_id, options.cutoff)
    tally.deleted += len(removed)
    tally.skipped_changed += len(ids) - len(removed)
    intents: dict[str, list[str]] = defaultdict(list)
    for r in batch:
        if r["token_id"] in removed:
            for i in r["intents"] or []:
                intents[i["sender"]].append(i["intent_id"])
    for sender, intent_ids in intents.items():
        it = intent_table(config, sender)
        if it is not None:
            journal_and_delete_intents(it, "token", intent_ids, sorted(removed), run_id)


def _journal_and_delete_tokens(t: TokenTable, ids: list[str], run_id: str, cutoff: dt.datetime) -> set[str]:
    """One transaction: journal the still-collectable rows among `ids`, delete exactly those."""
    c = t.cols
    journal = journal_of(t.table)
    with open_db(t.store) as db:
        cols = db.ensure_copy_table(t.table, journal, JOURNAL_EXTRA)
        col_list = ", ".join(q(x) for x in cols)
        guard = f"{q(c.created_at)} < %s"
        params: list[Any] = [run_id, utcnow(), *ids, cutoff]
        if t.outbox and db.columns(t.outbox) is not None:
            guard += (f" and {q(c.token_id)} not in (select {q(t.outbox_incoming_token)} from {db.table(t.outbox)} "
                      f"where {q(t.outbox_incoming_token)} is not null)")
        with db.tx():
            db.execute(f"insert into {db.table(journal)} ({col_list}, eoctl_run_id, eoctl_removed_at) "
                       f"select {col_list}, %s, %s from {db.table(t.table)} "
                       f"where {q(c.token_id)} in {in_list(ids)} and {guard}", params)
            journaled = [r[0] for r in db.execute(
                f"select {q(c.token_id)} from {db.table(journal)} where eoctl_run_id = %s "
                f"and {q(c.token_id)} in {in_list(ids)}", [run_id, *ids])]
            if journaled:
                db.execute(f"delete from {db.table(t.table)} where {q(c.token_id)} in {in_list(journaled)}", journaled)
    return set(journaled)


def _token_tables(config: Config, names: list[str] | None = None) -> list[TokenTable]:
    seen: dict[tuple[str, str], TokenTable] = {}
    for name in names or list(config.endpoints):
        t = token_table(config, name)
        if t is not None:
            seen.setdefault((t.store_name, t.table), t)
    return list(seen.values())


def _journaled_ids(t: TokenTable, run_id: str) -> list[str]:
    with open_db(t.store) as db:
        if db.columns(journal_of(t.table)) is None:
            return []
        return [r[0] for r in db.execute(f"select {q(t.cols.token_id)} from {db.table(journal_of(t.table))} "
                                         "where eoctl_run_id = %s", [run_id])]


def finish_leftovers(config: Config, log: RunLog, run_id: str, options: GcOptions) -> list[str]:
    """A run killed after journaling a batch of tokens but before their intents: remove those
    intents now (journaled under the killed run's id, so its restore stays whole)."""
    finished = []
    for old in log.unfinished(COMMAND, run_id):
        for t in _token_tables(config):
            for part in chunks(_journaled_ids(t, old), options.batch_size):
                for it in intent_tables(config):
                    intent_ids = intents_naming(it, "token", part)
                    if intent_ids:
                        journal_and_delete_intents(it, "token", intent_ids, part, old)
        log.set_status(old, "interrupted")
        finished.append(old)
    return finished


def purge(config: Config, options: GcOptions) -> int:
    """Journal rows older than --retention are removed for good (they can no longer be restored)."""
    before = utcnow() - options.retention
    purged = sum(purge_journal(t.store, t.table, before) for t in _token_tables(config))
    for it in intent_tables(config):  # the intents journal also holds gc-blobs' rows: only token intents
        purged += purge_journal(it.store, it.table, before, f" and {q(it.cols.kind)} = %s", ("token",))
    return purged


# --------------------------------------------------------------------------------- restore


def restore(config: Config, run_id: str) -> RestoreResult:
    """Put back every token and intent a run removed (rows the store has again are left alone)."""
    log = RunLog(config)
    known = log.get(run_id)
    if known is None or known[0] != COMMAND:
        raise UsageError(f"--restore {run_id}: no {COMMAND} run with this id in the run log")
    if known[1] == "restored":
        return RestoreResult(COMMAND, run_id, {"tokens": 0, "intents": 0}, already_restored=True)
    restored = {"tokens": 0, "intents": 0}
    with Lease(config, COMMAND, new_run_id()):
        for t in _token_tables(config):
            restored["tokens"] += restore_table(t.store, t.table, t.cols.token_id, run_id)
        for it in intent_tables(config):
            restored["intents"] += restore_table(it.store, it.table, it.cols.intent_id, run_id)
        log.set_status(run_id, "restored")
    return RestoreResult(COMMAND, run_id, restored)
