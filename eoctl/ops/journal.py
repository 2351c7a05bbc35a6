"""Journals: what a gc run removed from a table, kept beside it so `--restore RUN` can put it back.

A journal is `eoctl_journal_<table>` in the same store and schema, with the table's own columns
and types plus the run id and the removal time. Rows are journaled and deleted in one transaction,
so a kill at any point leaves either both or neither.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from eoctl.ops.lease import utcnow
from eoctl.errors import SourceError
from eoctl.inert import inert
from eoctl.stores import sql
from eoctl.stores.connection import DRIVER_MODULES, describe
from eoctl.stores.db import Db, StoreConfig, open_db
from eoctl.stores.layout import EndpointTable, StoreLayout

JOURNAL_EXTRA = (("eoctl_run_id", "varchar"), ("eoctl_removed_at", "timestamptz"))

#: a guard (journal_and_delete): a condition of stores.sql, or a template without parts (a str), or
#: a function of the connection giving one, or giving (condition, the values it binds after `params`)
Guard = exp.Expression | str | Callable[[Db], "exp.Expression | tuple[exp.Expression, list[Any]]"]


def journal_of(table: str) -> str:
    return f"eoctl_journal_{table}"


def _condition(guard: exp.Expression | str) -> exp.Expression:
    return sql.fragment(guard) if isinstance(guard, str) else guard


def journal_and_delete(t: EndpointTable, key: str, ids: list[str], guard: Guard,
                       params: list[Any], run_id: str) -> set[str]:
    """One transaction in `t`'s store: journal the rows among `ids` (values of canonical column
    `key`) that still meet `guard` (a condition binding `params` in order, or a function of the
    connection giving it, re-checked as they are journaled),
    of `t`'s endpoint only (in a shared table, never another endpoint's rows), then delete exactly
    the journaled rows. Returns their keys."""
    journal = journal_of(t.table)
    owned, owner = t.owned_cond()
    with open_db(t.store) as db:
        cols = sql.columns(db.ensure_copy_table(t.table, journal, JOURNAL_EXTRA))
        made = guard(db) if callable(guard) else guard
        if isinstance(made, tuple):
            made, more = made
            params = [*params, *more]
        condition = _condition(made)
        typed = db.ids(t.table, t.col(key))  # ids in and out as text, whatever type the column has
        with db.tx():
            # the rows still meeting the guard, locked on a server until the commit (FOR UPDATE:
            # the pipeline cannot change one between its journaling and its delete); DuckDB has
            # one writer per file, this transaction (stores.sql leaves the lock out there)
            locked = [r[0] for r in db.execute(
                "select :key_text from :t where :chosen for update", [*ids, *params, *owner],
                key_text=typed.text(t.c(key)), t=db.table(t.table),
                chosen=sql.every(sql.fragment(":k in :ids", k=t.c(key), ids=typed.params(len(ids))), condition, owned))]
            if locked:
                # the guard again: in a table without a unique key, a row sharing a locked row's key
                # (a pending row of the same id) is not the locked row and stays
                chosen = sql.every(sql.fragment(":k in :ids", k=t.c(key), ids=typed.params(len(locked))), condition, owned)
                db.execute("insert into :journal (:cols, eoctl_run_id, eoctl_removed_at) "
                           "select :cols, %s, %s from :t where :chosen",
                           [run_id, utcnow(), *locked, *params, *owner],
                           journal=db.table(journal), cols=cols, t=db.table(t.table), chosen=chosen)
                db.execute("delete from :t where :chosen", [*locked, *params, *owner],
                           t=db.table(t.table), chosen=chosen)
    return set(locked)


def journal_and_delete_intents(it: EndpointTable, kind: str, intent_ids: list[str], refs: list[str],
                               run_id: str) -> int:
    """In the intents' store: journal and delete the `kind` intents among `intent_ids` whose ref
    is one of `refs` (tokens or blobs this run removed), of the endpoint the table is `it`'s (in a
    shared table, never another endpoint's rows). One transaction per 500 intents."""
    journal = journal_of(it.table)
    owned, owner = it.owned_cond()
    removed = 0
    with open_db(it.store) as db:
        cols = sql.columns(db.ensure_copy_table(it.table, journal, JOURNAL_EXTRA))
        for start in range(0, len(intent_ids), 500):
            part = intent_ids[start:start + 500]
            # the same rows are journaled and deleted: one condition, in one transaction (an id
            # alone would also take a row of another kind or ref sharing it, in a table without a key)
            chosen = sql.every(
                sql.fragment(":intent_id in :ids", intent_id=it.c("intent_id"),
                             ids=db.ids(it.table, it.col("intent_id")).params(len(part))),
                sql.fragment(":kind = %s", kind=it.c("kind")),
                sql.fragment(":ref in :refs", ref=it.c("ref"), refs=db.ids(it.table, it.col("ref")).params(len(refs))),
                owned)
            params = [*part, kind, *refs, *owner]
            with db.tx():
                journaled = db.rowcount("insert into :journal (:cols, eoctl_run_id, eoctl_removed_at) "
                                        "select :cols, %s, %s from :t where :chosen", [run_id, utcnow(), *params],
                                        journal=db.table(journal), cols=cols, t=db.table(it.table), chosen=chosen)
                deleted = db.rowcount("delete from :t where :chosen", params, t=db.table(it.table), chosen=chosen)
                if deleted != journaled:  # the DuckDB file has one writer; a server's rows are read committed
                    raise JournalUnverified(f"intents of run {run_id} in {it.table}: {deleted} would be deleted "
                                            f"for {journaled} journaled: nothing changed")
                removed += deleted
    return removed


def remove_intents_of(layout: StoreLayout, kind: str, rows: list[Any], removed: set[str], key: str,
                      run_id: str) -> None:
    """Journal and delete the intents (listed in each plan row's `intents`) of the rows this run removed."""
    by_sender: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        if r[key] in removed:
            for i in r["intents"] or []:
                by_sender[i["sender"]].append(i["intent_id"])
    for sender, intent_ids in by_sender.items():
        it = layout.table(sender, "intents")
        if it is not None:
            journal_and_delete_intents(it, kind, intent_ids, sorted(removed), run_id)


def intents_naming(it: EndpointTable, kind: str, refs: list[str]) -> list[str]:
    """Ids of the `kind` intents whose ref is one of `refs` (of every endpoint sharing the table:
    the caller goes through each physical table once)."""
    with open_db(it.store) as db:
        if db.columns(it.table) is None:
            return []
        intent_id, ref = db.ids(it.table, it.col("intent_id")), db.ids(it.table, it.col("ref"))
        return [r[0] for r in db.execute(
            "select :intent_id from :t where :kind = %s and :ref in :refs", [kind, *refs],
            intent_id=intent_id.text(it.c("intent_id")), t=db.table(it.table), kind=it.c("kind"), ref=it.c("ref"),
            refs=ref.params(len(refs)))]


#: the run id journal rows a restore cannot put back carry inside its transaction (never committed:
#: they take their run's id again before the commit)
_HELD = ":held"
#: rows named one by one in a restore's `not_restored`; the rest of a table's are counted in one entry
NAMED_ROWS = 100


def restore_table(t: EndpointTable, key: str, run_id: str, execute: bool = True,
                  not_restored: list[dict[str, str]] | None = None, endpoints: Mapping[str, str] | None = None) -> int:
    """Copy a run's journaled rows of `t`'s table back (every endpoint's, in a shared table) and
    return how many; without `execute`, only count them. A journal row leaves the journal only once
    it is verified back in the table, in the transaction that put it back; what cannot be put back
    stays journaled (the run stays restorable) and is named in `not_restored` with why:

    - a row whose identity (canonical column `key`, and the owner column where the table has one:
      ids repeat across the endpoints of a shared table) the table holds again: the pipeline or a
      person wrote it since, and eoctl never overwrites it. A NULL key matches nothing (SQL's `=`),
      so such a row is always put back, and a NULL key in the table blocks nothing;
    - every row of the run when the table lost a column the journal holds (putting them back would
      drop its values), or when the store refuses them (a NOT NULL column added without a default).

    Columns the table gained since are left to their defaults; the journal's columns are copied.
    `endpoints`: names in the store -> the configuration's, to name a held row's endpoint."""
    left = not_restored if not_restored is not None else []
    journal = journal_of(t.table)
    extra = {name for name, _ in JOURNAL_EXTRA}
    with open_db(t.store) as db:
        table_cols, journal_cols = db.columns(t.table), db.columns(journal)
        if journal_cols is None:
            return 0
        total = int(db.execute("select count(*) from :journal where eoctl_run_id = %s", [run_id],
                               journal=db.table(journal))[0][0])
        if total == 0:
            return 0
        kept = [c for c in journal_cols if c not in extra]
        gone = [c for c in kept if table_cols is None or c not in table_cols]
        if gone:
            why = (f"table {t.table} no longer exists in {describe(t.store)}" if table_cols is None else
                   f"table {t.table} no longer has column{'s' if len(gone) > 1 else ''} "
                   f"{', '.join(inert(c) for c in gone)}, which the journal holds")
            left.append({"endpoint": t.endpoint, "name": f"{total} rows of {t.table}",
                         "why": f"{why}: put {'it' if table_cols is None else 'them'} back, then restore again"})
            return 0
        key_col = t.col(key)
        # the identity of a journal row `j` held by a row `t` of the table (a NULL matches nothing)
        same = [sql.fragment(":a = :b", a=sql.column(key_col, "t"), b=sql.column(key_col, "j"))]
        if t.owner_column is not None and t.owner_column in kept:
            same.append(sql.fragment(":a = :b", a=sql.column(t.owner_column, "t"), b=sql.column(t.owner_column, "j")))
        there = sql.fragment("exists (select 1 from :t where :same)", t=db.table(t.table, "t"), same=sql.every(*same))
        cols = sql.columns(kept)
        if not execute:
            (back,) = db.execute("select count(*) from :journal where j.eoctl_run_id = %s and not :there", [run_id],
                                 journal=db.table(journal, "j"), there=there)[0]
            _name_held(db, t, key_col, journal, run_id, there, left, endpoints or {})
            return int(back)
        held_id = run_id + _HELD
        try:
            with db.tx():
                held = db.rowcount("update :journal set eoctl_run_id = %s where j.eoctl_run_id = %s and :there",
                                   [held_id, run_id], journal=db.table(journal, "j"), there=there)
                # (none to put back: no statement, which MySQL would refuse for a column it cannot fill)
                back = 0 if held == total else db.rowcount(
                    "insert into :t (:cols) select :cols from :journal where eoctl_run_id = %s", [run_id],
                    t=db.table(t.table), cols=cols, journal=db.table(journal))
                # verified before a journal row goes: every row of the run is in the table now
                (missing,) = db.execute("select count(*) from :journal where j.eoctl_run_id = %s "
                                        "and :key is not null and not :there", [run_id],
                                        journal=db.table(journal, "j"), key=sql.column(key_col, "j"), there=there)[0]
                if back != total - held or missing:
                    raise JournalUnverified(f"restore of run {run_id} into {t.table}: {back} rows put back of "
                                            f"{total - held} journaled ({missing} not found after): nothing changed")
                removed = db.rowcount("delete from :journal where eoctl_run_id = %s", [run_id],
                                      journal=db.table(journal))
                if removed != back:
                    raise JournalUnverified(f"restore of run {run_id} into {t.table}: {removed} journal rows "
                                            f"would go for {back} put back: nothing changed")
                db.execute("update :journal set eoctl_run_id = %s where eoctl_run_id = %s", [run_id, held_id],
                           journal=db.table(journal))
        except Exception as exc:
            if not type(exc).__module__.startswith(DRIVER_MODULES):
                raise
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            left.append({"endpoint": t.endpoint, "name": f"{total} rows of {t.table}",
                         "why": f"the store refused them ({inert(reason)[:300]}): nothing was put back; "
                                "make the table take them, then restore again"})
            return 0
        if held:
            _name_held(db, t, key_col, journal, run_id, there, left, endpoints or {})
    return back


def _name_held(db: Db, t: EndpointTable, key_col: str, journal: str, run_id: str, there: exp.Expression,
               left: list[dict[str, str]], endpoints: Mapping[str, str]) -> None:
    """Name the run's journal rows whose identity the table holds again (NAMED_ROWS at most, the
    rest counted), each under the endpoint that owns it."""
    owner_sql = (sql.fragment("cast(:owner as varchar)", owner=sql.column(t.owner_column, "j")) if t.owner_column
                 else exp.null())
    key_text = db.ids(journal, key_col)
    key = sql.column(key_col, "j")
    key_sql = key_text.text(key) if key_text.family != "text" else sql.fragment("cast(:key as varchar)", key=key)
    rows = db.execute("select :key, :owner from :journal where j.eoctl_run_id = %s and :there order by 2, 1 limit :n",
                      [run_id], key=key_sql, owner=owner_sql, journal=db.table(journal, "j"), there=there,
                      n=sql.literal(NAMED_ROWS + 1))
    why = (f"the table holds a row with this {key_col} again (written since the run): it is left as it is "
           f"and the journaled row kept; delete the table's row if the journaled one should win, then restore again")
    for key_value, owner in rows[:NAMED_ROWS]:
        left.append({"endpoint": endpoints.get(owner, owner) if owner is not None else t.endpoint,
                     "name": str(key_value), "why": why})
    if len(rows) > NAMED_ROWS:
        (count,) = db.execute("select count(*) from :journal where j.eoctl_run_id = %s and :there", [run_id],
                              journal=db.table(journal, "j"), there=there)[0]
        left.append({"endpoint": t.endpoint, "name": f"{int(count) - NAMED_ROWS} more rows of {t.table}",
                     "why": why})


class JournalUnverified(SourceError):
    """A journal's count disagreed with the rows a statement moved (journaled against deleted, put
    back against journaled): the transaction is rolled back, nothing changed."""


def purge_journal(store: StoreConfig, table: str, before: dt.datetime, where: exp.Expression | str | None = None,
                  params: tuple = ()) -> int:
    """Remove journal rows older than `before` for good (they can no longer be restored), of those
    meeting `where` (a condition binding `params`; a str, ` and <condition>`, is the form callers
    wrote before stores.sql, read as a template without parts)."""
    if isinstance(where, str):
        text = where.strip()
        where = sql.fragment(text[len("and "):] if text.lower().startswith("and ") else text) if text else None
    journal = journal_of(table)
    with open_db(store) as db:
        if db.columns(journal) is None:
            return 0
        with db.tx():
            return db.rowcount("delete from :journal where :chosen", [before, *params], journal=db.table(journal),
                               chosen=sql.every(sql.fragment("eoctl_removed_at < %s"), where))
