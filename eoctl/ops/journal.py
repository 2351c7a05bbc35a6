"""Journals: what a gc run removed from a table, kept beside it so `--restore RUN` can put it back.

A journal is `eoctl_journal_<table>` in the same store and schema, with the table's own columns
and types plus the run id and the removal time. Rows are journaled and deleted in one transaction,
so a kill at any point leaves either both or neither.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from eoctl.ops.lease import utcnow
from eoctl.stores.connection import quote_ident
from eoctl.stores.db import StoreConfig, in_list, open_db
from eoctl.stores.layout import EndpointTable, StoreLayout

JOURNAL_EXTRA = (("eoctl_run_id", "varchar"), ("eoctl_removed_at", "timestamptz"))


def journal_of(table: str) -> str:
    return f"eoctl_journal_{table}"


def q(name: str) -> str:
    return quote_ident(name)


def journal_and_delete(t: EndpointTable, key: str, ids: list[str], guard: str, params: list[Any],
                       run_id: str) -> set[str]:
    """One transaction in `t`'s store: journal the rows among `ids` (values of canonical column
    `key`) that still meet `guard` (SQL with `%s` for `params`, re-checked as they are journaled),
    of `t`'s endpoint only (in a shared table, never another endpoint's rows), then delete exactly
    the journaled rows. Returns their keys."""
    journal = journal_of(t.table)
    owned, owner = t.owned()
    with open_db(t.store) as db:
        cols = db.ensure_copy_table(t.table, journal, JOURNAL_EXTRA)
        col_list = ", ".join(q(x) for x in cols)
        with db.tx():
            # the rows still meeting the guard, locked on a server until the commit (FOR UPDATE:
            # the pipeline cannot change one between its journaling and its delete); DuckDB has
            # one writer per file, this transaction
            locked = [r[0] for r in db.execute(
                f"select {t.q(key)} from {db.table(t.table)} where {t.q(key)} in {in_list(ids)} and {guard}{owned}"
                + ("" if db.duckdb else " for update"), [*ids, *params, *owner])]
            if locked:
                db.execute(f"insert into {db.table(journal)} ({col_list}, eoctl_run_id, eoctl_removed_at) "
                           f"select {col_list}, %s, %s from {db.table(t.table)} "
                           f"where {t.q(key)} in {in_list(locked)}{owned}", [run_id, utcnow(), *locked, *owner])
                db.execute(f"delete from {db.table(t.table)} where {t.q(key)} in {in_list(locked)}{owned}",
                           [*locked, *owner])
    return set(locked)


def journal_and_delete_intents(it: EndpointTable, kind: str, intent_ids: list[str], refs: list[str],
                               run_id: str) -> int:
    """In the intents' store: journal and delete the `kind` intents among `intent_ids` whose ref
    is one of `refs` (tokens or blobs this run removed), of the endpoint the table is `it`'s (in a
    shared table, never another endpoint's rows). One transaction per 500 intents."""
    journal = journal_of(it.table)
    owned, owner = it.owned()
    removed = 0
    with open_db(it.store) as db:
        cols = db.ensure_copy_table(it.table, journal, JOURNAL_EXTRA)
        col_list = ", ".join(q(x) for x in cols)
        for start in range(0, len(intent_ids), 500):
            part = intent_ids[start:start + 500]
            with db.tx():
                db.execute(f"insert into {db.table(journal)} ({col_list}, eoctl_run_id, eoctl_removed_at) "
                           f"select {col_list}, %s, %s from {db.table(it.table)} where {it.q('intent_id')} in "
                           f"{in_list(part)} and {it.q('kind')} = %s and {it.q('ref')} in {in_list(refs)}{owned}",
                           [run_id, utcnow(), *part, kind, *refs, *owner])
                removed += db.rowcount(
                    f"delete from {db.table(it.table)} where {it.q('intent_id')} in (select {it.q('intent_id')} "
                    f"from {db.table(journal)} where eoctl_run_id = %s) and {it.q('intent_id')} in {in_list(part)}",
                    [run_id, *part])
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
        return [r[0] for r in db.execute(
            f"select {it.q('intent_id')} from {db.table(it.table)} where {it.q('kind')} = %s and {it.q('ref')} in "
            f"{in_list(refs)}", [kind, *refs])]


def restore_table(store: StoreConfig, table: str, key: str, run_id: str, execute: bool = True) -> int:
    """Copy a run's journaled rows back (rows whose key the table has again are left alone); without
    `execute`, only count them."""
    journal = journal_of(table)
    with open_db(store) as db:
        cols = db.columns(table)
        if cols is None or db.columns(journal) is None:
            return 0
        col_list = ", ".join(q(x) for x in cols)
        pending = (f"from {db.table(journal)} j where j.eoctl_run_id = %s "
                   f"and j.{q(key)} not in (select {q(key)} from {db.table(table)})")
        if not execute:
            return int(db.execute(f"select count(*) {pending}", [run_id])[0][0])
        with db.tx():
            n = db.rowcount(f"insert into {db.table(table)} ({col_list}) select {col_list} {pending}", [run_id])
            db.execute(f"delete from {db.table(journal)} where eoctl_run_id = %s", [run_id])
    return n


def purge_journal(store: StoreConfig, table: str, before: dt.datetime, where: str = "", params: tuple = ()) -> int:
    """Remove journal rows older than `before` for good (they can no longer be restored)."""
    journal = journal_of(table)
    with open_db(store) as db:
        if db.columns(journal) is None:
            return 0
        with db.tx():
            return db.rowcount(f"delete from {db.table(journal)} where eoctl_removed_at < %s{where}",
                               [before, *params])
