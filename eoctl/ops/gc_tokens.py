"""`eoctl gc-tokens`: remove garbage tokens past the grace period, journaled first, in batches.

Plan (Spark, read-only): every token classified (eoctl.ops.reconcile); the collectable ones are
garbage older than the grace period. Execute, under the single-runner lease, per batch of one
endpoint's tokens and in one transaction of its store: copy the rows to the journal table
(`eoctl_journal_<tokens table>`, same columns plus the run id), re-checking the age (and, for
the outboxes in the same store, that no pending entry holds the token; a sent row of an
outbox that keeps them holds none), then delete exactly the
journaled rows; in a table several endpoints share, only the endpoint's own rows. The intents that registered those tokens follow, journaled the same
way in their own store. A run killed between the two is finished by the next run. `--restore RUN`
copies a run's journal back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sqlglot import exp

from eoctl.config.model import Config
from eoctl.ops.gc_flow import (
    GcKind,
    GcOptions,
    GcResult,
    RestoreResult,
    Tally,
    chunks,
    restore_run,
    restore_tables,
    run_gc,
)
from eoctl.ops.journal import (
    intents_naming,
    journal_and_delete,
    journal_and_delete_intents,
    journal_of,
    purge_journal,
    remove_intents_of,
)
from eoctl.ops.lease import utcnow
from eoctl.stores import sql
from eoctl.stores.connection import comparable_ids
from eoctl.stores.db import Db, open_db
from eoctl.stores.layout import EndpointTable, StoreLayout

COMMAND = "gc-tokens"


def _delete_batch(layout: StoreLayout, endpoint: str, batch: list[Any], run_id: str, options: GcOptions,
                  tally: Tally) -> None:
    table = layout.table(endpoint, "tokens")
    assert table is not None
    ids = [r["token_id"] for r in batch]
    removed = _journal_and_delete_tokens(layout, table, ids, run_id, options.cutoff)
    tally.deleted += len(removed)
    tally.skipped_changed += len(ids) - len(removed)
    remove_intents_of(layout, "token", batch, removed, "token_id", run_id)


def _journal_and_delete_tokens(layout: StoreLayout, t: EndpointTable, ids: list[str], run_id: str,
                               cutoff: dt.datetime) -> set[str]:
    """One transaction: journal the still-collectable rows among `ids` (of this endpoint: in a
    shared table, never another endpoint's), delete exactly those."""
    # a pending entry of any endpoint whose outbox lives in the same store may have taken the token
    # one per table and condition (endpoints sharing an outbox table share it), in a stable order
    outboxes = [o for _key, o in sorted({(o.table, o.col("incoming_token_id"), o.sent_column or "",
                                          o.sent_values or ()): o
                                         for o in layout.tables("outbox") if o.store_name == t.store_name}.items(),
                                        key=lambda item: item[0])]

    def guard(db: Db) -> tuple[exp.Expression, list[Any]]:
        """Typed against the columns the store has: a uuid token id beside a varchar outbox column.
        (`not (x in ...)`: see stores.layout.sent_node.)"""
        token = (t.c("token_id"), db.column_types(t.table).get(t.col("token_id"), "text"))
        conditions, params = [sql.fragment(":created_at < %s", created_at=t.c("created_at"))], [cutoff]
        for o in outboxes:
            incoming = o.c("incoming_token_id")
            held = (incoming, db.column_types(o.table).get(o.col("incoming_token_id"), "text"))
            mine, theirs = comparable_ids(t.store, token, held)
            pending, sent_values = o.pending_cond()
            conditions.append(sql.fragment("not (:mine in (select :theirs from :outbox where :entries))",
                                           mine=mine, theirs=theirs, outbox=db.table(o.table),
                                           entries=sql.every(sql.fragment(":incoming is not null", incoming=incoming),
                                                             pending)))
            params += sent_values
        return sql.every(*conditions), params

    return journal_and_delete(t, "token_id", ids, guard, [], run_id)


def _journaled_ids(t: EndpointTable, run_id: str) -> list[str]:
    with open_db(t.store) as db:
        if db.columns(journal_of(t.table)) is None:
            return []
        token_id = db.ids(journal_of(t.table), t.col("token_id"))
        return [r[0] for r in db.execute("select :token_id from :journal where eoctl_run_id = %s", [run_id],
                                         token_id=token_id.text(t.c("token_id")), journal=db.table(journal_of(t.table)))]


def finish_killed(layout: StoreLayout, old: str, options: GcOptions) -> None:
    """Killed run `old` journaled a batch of tokens but not yet their intents: those intents go now."""
    for t in layout.distinct_tables("tokens"):
        for part in chunks(_journaled_ids(t, old), options.batch_size):
            for it in layout.distinct_tables("intents"):
                intent_ids = intents_naming(it, "token", part)
                if intent_ids:
                    journal_and_delete_intents(it, "token", intent_ids, part, old)


def purge(layout: StoreLayout, options: GcOptions) -> int:
    """Journal rows older than --keep-removed are removed for good (they can no longer be restored)."""
    before = utcnow() - options.retention
    purged = sum(purge_journal(t.store, t.table, before) for t in layout.distinct_tables("tokens"))
    for it in layout.distinct_tables("intents"):  # the intents journal also holds gc-blobs' rows: only token intents
        purged += purge_journal(it.store, it.table, before, sql.fragment(":kind = %s", kind=it.c("kind")), ("token",))
    return purged


# --------------------------------------------------------------------------------- restore


def restore(config: Config, run_id: str, execute: bool = True) -> RestoreResult:
    """Put back every token and intent a run removed (rows the store holds again stay journaled, named);
    without `execute`, count what would be put back."""
    return restore_run(config, COMMAND, run_id, "tokens", lambda really, left: restore_tables(
        config, "tokens", "token_id", run_id, really, left), execute)


def _garbage(scope: Any, records: Any, dialect: Any, names: list[str]) -> Any:
    from eoctl.expr.reconcile import garbage_tokens

    return garbage_tokens(scope, records, dialect, names)


def _evidence(scope: Any, rows: Any, _names: list[str]) -> Any:
    from eoctl.expr.reconcile import token_evidence

    return token_evidence(scope, rows)


KIND = GcKind(COMMAND, "tokens", "token_id", _garbage, _evidence,
              ("message_id", "created_at", "reason", "intents"), _delete_batch, finish_killed, purge,
              record_columns=("token_id", "producer", "causation_id"))


def gc_tokens(spark: Any, config: Config, options: GcOptions,
              progress: Callable[[str], None] = lambda _m: None) -> GcResult:
    """Plan (options.execute False) or collect garbage tokens; see the module doc. `spark`: a session,
    or a function that starts one once the lease is held (see run_gc)."""
    return run_gc(spark, config, options, KIND, progress)
