"""`eoctl gc-outbox`: remove sent outbox rows past their retention, journaled first, in batches.

For outboxes that keep a row once its messages are sent (`[endpoints.X.outbox] sent_column`,
`retention`): the cleanup most such tables need, done the way a production table can take it.
Plan (read-only): each endpoint's sent rows, counted by its store, those last updated before
now - retention planned (--max-deletes at most, in endpoint then incoming message id order).
The question is one range of one table, so the store answers it: no engine, no topic is read.
Execute, under the single-runner lease, per batch of --batch-size rows and in one transaction of
the store: copy the rows to the journal (`eoctl_journal_<outbox table>`), re-checking that each is
still sent and past the retention, then delete exactly the journaled rows. A pending row is never
deleted: the re-check runs inside the transaction that deletes. `--restore RUN` copies a run's
journal back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

from sqlglot import exp

from eoctl.config.model import Config, duration_of
from eoctl.ops.gc_flow import GcKind, GcOptions, GcResult, RestoreResult, Tally, restore_run, restore_tables, run_gc, selected
from eoctl.ops.journal import journal_and_delete, purge_journal
from eoctl.ops.lease import utcnow
from eoctl.stores import sql
from eoctl.stores.connection import IdSql
from eoctl.stores.db import open_db
from eoctl.stores.layout import EndpointTable, StoreLayout

COMMAND = "gc-outbox"
#: the plan's evidence columns (besides endpoint and incoming_message_id)
COLUMNS = ("attempt_id", "created_at", "updated_at", "age_seconds")


def _cutoff(t: EndpointTable, config: Config, now: dt.datetime) -> dt.datetime:
    retention = config.endpoints[t.endpoint].outbox.retention
    assert retention is not None
    return now - duration_of(retention)


def _past(t: EndpointTable, cutoff: dt.datetime) -> tuple[exp.Expression, list[Any]]:
    """A sent row last updated before `cutoff`: the condition and the values it binds."""
    sent, values = t.sent_cond()
    return sql.every(sent, sql.fragment(":updated_at < %s", updated_at=t.c("updated_at"))), [*values, cutoff]


class OutboxPlan:
    """The sent rows past each endpoint's retention, counted and listed by the outbox's store:
    the same interface as eoctl.ops.gc_flow.GarbagePlan (tallies, misnamed, sample, rows, release)."""

    def __init__(self, spark: Any, layout: StoreLayout, options: GcOptions, kind: GcKind,
                 step: Callable[[str], None] = lambda _m: None) -> None:
        self.layout, self.options = layout, options
        config = layout.config
        names = sorted(selected(config, options.endpoints))
        self.misnamed = [m for m in layout.misnamed(names) if m.kind == "outbox"]
        refused = {m.endpoint for m in self.misnamed}
        self.tables: dict[str, EndpointTable] = {}
        self.notes: list[str] = []
        for name in names:
            t = layout.table(name, "outbox")
            if t is None or name in refused:
                continue
            if not t.keeps_sent:
                self.notes.append(f"endpoint {name}: its outbox deletes a row once sent (no "
                                  f"endpoints.{name}.outbox.sent_column): nothing to collect")
            elif config.endpoints[name].outbox.retention is None:
                self.notes.append(f"endpoint {name}: its outbox keeps sent rows but has no retention: set "
                                  f"endpoints.{name}.outbox.retention (e.g. 7d) to collect them")
            else:
                self.tables[name] = t
        self.tallies = [self._tally(t) for t in self.tables.values()]

    def _tally(self, t: EndpointTable) -> Tally:
        owned, owner = t.owned_cond()
        is_sent, values = t.sent_cond()
        with open_db(t.store, read_only=True) as db:
            ((sent, past),) = db.execute(
                "select count(*), coalesce(sum(case when :updated_at < %s then 1 else 0 end), 0) from :t where :chosen",
                [_cutoff(t, self.layout.config, self.options.now), *values, *owner],
                updated_at=t.c("updated_at"), t=db.table(t.table), chosen=sql.every(is_sent, owned))
        return Tally(t.endpoint, garbage=int(sent), planned=int(past), skipped_young=int(sent) - int(past))

    def _page(self, t: EndpointTable, after: str | None, limit: int) -> list[dict[str, Any]]:
        owned, owner = t.owned_cond()
        key = t.c("incoming_message_id")
        past, params = _past(t, _cutoff(t, self.layout.config, self.options.now))
        with open_db(t.store, read_only=True) as db:
            entry_id = db.ids(t.table, t.col("incoming_message_id"))
            attempt = db.ids(t.table, t.col("attempt_id"))
            after_key = None
            if after is not None:
                after_key = sql.fragment(":key > :after", key=key, after=entry_id.param())
                params.append(after)
            rows = db.execute(
                "select :entry_id, :attempt_id, :created_at, :updated_at from :t where :chosen order by :key limit %s",
                [*params, *owner, limit],
                entry_id=_as_text(entry_id, key), attempt_id=_as_text(attempt, t.c("attempt_id")),
                created_at=t.c("created_at"), updated_at=t.c("updated_at"), t=db.table(t.table),
                chosen=sql.every(past, after_key, owned), key=key)
        now = self.options.now
        return [{"endpoint": t.endpoint, "incoming_message_id": m, "attempt_id": a, "created_at": _utc(c),
                 "updated_at": _utc(u), "age_seconds": _age(now, _utc(u))} for m, a, c, u in rows]

    def sample(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for t in self.tables.values():
            if len(out) < self.options.evidence_rows:
                out += self._page(t, None, self.options.evidence_rows - len(out))
        return out

    def rows(self, limit: int) -> Iterator[dict[str, Any]]:
        """At most `limit` rows, in endpoint then key order, read a batch at a time (keyset pages:
        a million-row plan never sits in memory)."""
        for t in self.tables.values():
            after = None
            while limit > 0:
                page = self._page(t, after, min(limit, max(self.options.batch_size, 1)))
                if not page:
                    break
                yield from page
                limit -= len(page)
                after = page[-1]["incoming_message_id"]

    def release(self) -> None:
        pass


def _age(now: dt.datetime, then: Any) -> int | None:
    return int((now - then).total_seconds()) if isinstance(then, dt.datetime) else None


def _utc(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value


def _delete_batch(layout: StoreLayout, endpoint: str, batch: list[Any], run_id: str, options: GcOptions,
                  tally: Tally) -> None:
    t = layout.table(endpoint, "outbox")
    assert t is not None
    ids = [r["incoming_message_id"] for r in batch]
    # re-checked in the deleting transaction: a row the pipeline touched since the plan (sent again,
    # or pending) stays
    past, params = _past(t, _cutoff(t, layout.config, options.now))
    removed = journal_and_delete(t, "incoming_message_id", ids, past, params, run_id)
    tally.deleted += len(removed)
    tally.skipped_changed += len(ids) - len(removed)


def _finish_killed(layout: StoreLayout, run_id: str, options: GcOptions) -> None:
    """A killed run left nothing half-done: each batch is one transaction."""


def _outboxes(layout: StoreLayout) -> list[EndpointTable]:
    return [t for t in layout.distinct_tables("outbox") if t.keeps_sent]


def _purge(layout: StoreLayout, options: GcOptions) -> int:
    before = utcnow() - options.retention
    return sum(purge_journal(t.store, t.table, before) for t in _outboxes(layout))


KIND = GcKind(COMMAND, "outbox rows", "incoming_message_id", lambda *_a: None, lambda *_a: None, COLUMNS,
              _delete_batch, _finish_killed, _purge, record_columns=(), planner=OutboxPlan)


def gc_outbox(config: Config, options: GcOptions, progress: Callable[[str], None] = lambda _m: None) -> GcResult:
    """Plan (options.execute False) or remove sent outbox rows past their retention; see the module doc."""
    return run_gc(None, config, options, KIND, progress)


def restore(config: Config, run_id: str, execute: bool = True) -> RestoreResult:
    """Put back every outbox row a run removed (rows the table holds again stay journaled, named); without
    `execute`, count what would be put back."""
    return restore_run(config, COMMAND, run_id, "outbox rows", lambda really, left: restore_tables(
        config, "outbox", "incoming_message_id", run_id, really, left, keep=lambda t: t.keeps_sent), execute)


def _as_text(typed: IdSql, column: exp.Expression) -> exp.Expression:
    """An id column as text: its IdSql's, and a text column cast (a number kept as an id)."""
    return typed.text(column) if typed.family != "text" else sql.fragment("cast(:v as varchar)", v=column)
