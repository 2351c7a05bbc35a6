"""Property: a restore never loses a journaled row (eoctl.ops.journal), on DuckDB, PostgreSQL and
MariaDB stores.

Over random tables without a unique key (NULL keys, duplicate rows, ids that repeat across the
endpoints of a shared table), a gc-like run journals and deletes some rows, the table then changes
(rows written again under a journaled identity, rows with NULL keys, a column added or dropped),
and the run is restored. Every row the run journaled ends in the table or still in the journal,
exactly once each (as a multiset), another run's journal rows are untouched, a row stays journaled
only when the table holds its identity again or cannot take it, and says so; once the obstacle is
gone, a second restore puts back the rest. Table and column names need quoting (mixed case, a
space, a reserved word, a `%s` that is no placeholder).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eoctl.config.model import DuckDBStore, MySQLStore, PostgresStore
from eoctl.ops.journal import journal_and_delete, journal_of, restore_table
from eoctl.stores.connection import quote_ident
from eoctl.stores.db import open_db
from eoctl.stores.layout import EndpointTable

pytestmark = pytest.mark.integration

TABLE = "Out box"  # a space and capitals: quoted everywhere
KEY, OWNER, VALUE, NOTE = "Msg Id", "Endpoint", "order", "note %s"  # `order`: a reserved word; `%s`: not a placeholder
ORIGINAL = (OWNER, KEY, VALUE, NOTE)
OWNERS = ("shop", "billing", "other")

rows_ = st.lists(st.tuples(st.sampled_from(OWNERS), st.one_of(st.none(), st.sampled_from("abcdef")),
                           st.integers(0, 3), st.sampled_from(["x", "y"])), max_size=14)
cases = st.fixed_dictionaries({
    "rows": rows_,
    "shared": st.booleans(),  # the table has an owner column eoctl keys on
    "ids": st.lists(st.sampled_from("abcdef"), max_size=6),  # the run's plan
    "floor": st.integers(0, 3),  # the guard: rows with `order` at least this
    "second_run": st.lists(st.sampled_from("abcdef"), max_size=3),  # another run, journaled after
    "written_since": rows_,  # rows the pipeline writes before the restore
    "change": st.sampled_from(["none", "add column", "add not null column", "drop column"]),
})


@contextmanager
def _fresh(kind: str, server: Any, tmp: Any) -> Iterator[Any]:
    """An empty schema of `kind` (its store config), made anew for one example."""
    if kind == "duckdb":
        import duckdb

        path = tmp / "restore.duckdb"
        path.unlink(missing_ok=True)
        duckdb.connect(str(path)).close()
        yield DuckDBStore(type="duckdb", path=str(path), schema="main")
    elif kind == "postgres":
        import psycopg

        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            conn.execute("drop schema if exists restore_prop cascade")
            conn.execute("create schema restore_prop")
        yield PostgresStore(type="postgres", host="127.0.0.1", port=server.port, database=server.database,
                            user=server.user, password=server.password, schema="restore_prop")
    else:
        conn = server.connect()
        with conn.cursor() as cur:
            cur.execute("drop database if exists restore_prop")
            cur.execute("create database restore_prop")
        conn.close()
        yield MySQLStore(type="mysql", host="127.0.0.1", port=server.port, database="restore_prop",
                         user=server.user, password=server.password)


def _bag(db: Any, table: str, run: str | None = None) -> Counter:
    where = " where eoctl_run_id = %s" if run else ""
    cols = ", ".join(f"cast({quote_ident(c)} as varchar)" for c in ORIGINAL)
    return Counter(tuple(r) for r in db.execute(f"select {cols} from {db.table(table)}{where}",
                                                [run] if run else []))


def _table(store: Any, shared: bool) -> EndpointTable:
    return EndpointTable("billing", "outbox", "s", store, TABLE, {"incoming_message_id": KEY},
                         "billing", OWNER if shared else None, shared)


def _insert(db: Any, rows: list[tuple]) -> None:
    cols = ", ".join(quote_ident(c) for c in ORIGINAL)
    for row in rows:
        db.execute(f"insert into {db.table(TABLE)} ({cols}) values (%s, %s, %s, %s)", list(row))


def _check(store: Any, case: dict[str, Any]) -> None:
    t = _table(store, case["shared"])
    with open_db(store) as db:
        db.execute(f"create table {db.table(TABLE)} ({quote_ident(OWNER)} varchar(16), {quote_ident(KEY)} "
                   f"varchar(16), {quote_ident(VALUE)} integer, {quote_ident(NOTE)} varchar(16))")
        _insert(db, case["rows"])
        before = _bag(db, TABLE)
    guard = f"{quote_ident(VALUE)} >= %s"
    taken = journal_and_delete(t, "incoming_message_id", case["ids"], guard, [case["floor"]], "R1") if case["ids"] else set()
    if case["second_run"]:
        journal_and_delete(t, "incoming_message_id", case["second_run"], "1 = 1", [], "R2")
    with open_db(store) as db:
        journal = journal_of(TABLE)
        journaled = _bag(db, journal, "R1") if db.columns(journal) else Counter()
        other_run = _bag(db, journal, "R2") if db.columns(journal) else Counter()
        mine = (lambda r: r[0] == "billing") if case["shared"] else (lambda r: True)
        # the run journaled exactly the rows meeting its guard, of its endpoint, and deleted them
        assert journaled == Counter({r: n for r, n in before.items()
                                     if mine(r) and r[1] in case["ids"] and int(r[2]) >= case["floor"]})
        assert set(taken) == {r[1] for r in journaled}
        _insert(db, case["written_since"])
        change = case["change"]
        if change == "add column":
            db.execute(f"alter table {db.table(TABLE)} add column {quote_ident('Added Col')} integer")
        elif change == "add not null column":  # made anew: not every store adds one to a table with rows
            cols = ", ".join(quote_ident(c) for c in ORIGINAL)
            db.execute(f"create table {db.table('new')} ({quote_ident(OWNER)} varchar(16), {quote_ident(KEY)} "
                       f"varchar(16), {quote_ident(VALUE)} integer, {quote_ident(NOTE)} varchar(16), "
                       f"{quote_ident('Required')} integer not null)")
            db.execute(f"insert into {db.table('new')} ({cols}, {quote_ident('Required')}) select {cols}, 0 "
                       f"from {db.table(TABLE)}")
            db.execute(f"drop table {db.table(TABLE)}")
            db.execute(f"alter table {db.table('new')} rename to {quote_ident(TABLE)}")
        elif change == "drop column":
            db.execute(f"alter table {db.table(TABLE)} drop column {quote_ident(NOTE)}")
        table_before = _bag(db, TABLE) if change != "drop column" else None

    left: list[dict[str, str]] = []
    planned = restore_table(t, "incoming_message_id", "R1", execute=False, not_restored=list())
    back = restore_table(t, "incoming_message_id", "R1", not_restored=left,
                         endpoints={"billing": "billing", "shop": "shop"})

    def identity(r: tuple) -> tuple:
        return (r[0], r[1]) if case["shared"] else (r[1],)

    with open_db(store) as db:
        still = _bag(db, journal, "R1") if journaled else Counter()
        assert (_bag(db, journal, "R2") if other_run else Counter()) == other_run  # another run's rows untouched
        if change == "drop column":
            assert back == 0 and still == journaled  # nothing put back, nothing lost
            assert (not journaled) or any("no longer has column" in x["why"] for x in left)
            return
        after = _bag(db, TABLE)
    # nothing lost, nothing doubled: what the table gained is exactly what left the journal
    assert after - table_before + still == journaled, (after, table_before, still, journaled)
    assert table_before <= after
    held_ids = {identity(r) for r in table_before if r[1] is not None}
    refused = change == "add not null column" and any(identity(r) not in held_ids for r in journaled)
    if refused:
        # the store refused the rows it was to take (a NOT NULL column without a value): every one
        # kept, said why
        assert back == 0 and still == journaled and any("refused" in x["why"] for x in left)
    else:
        assert back == sum((journaled - still).values()) == planned
        # a row stays journaled only when the table held its identity again, and is named
        assert all(identity(r) in held_ids for r in still), (still, held_ids)
        assert all(identity(r) not in held_ids for r in journaled - still)
        assert {x["name"] for x in left} == {r[1] for r in still}
    assert bool(left) == bool(still)

    # the obstacles gone, a second restore puts back the rest
    if still and change != "add not null column":  # (there, the table cannot take them at all)
        with open_db(store) as db:
            for r in {identity(r) for r in still}:
                where = f"{quote_ident(KEY)} = %s" + (f" and {quote_ident(OWNER)} = %s" if case["shared"] else "")
                db.execute(f"delete from {db.table(TABLE)} where {where}", [r[-1], *r[:-1]] if case["shared"] else [r[0]])
        again: list[dict[str, str]] = []
        assert restore_table(t, "incoming_message_id", "R1", not_restored=again) == sum(still.values())
        assert again == []
        with open_db(store) as db:
            assert _bag(db, journal, "R1") == Counter()


@pytest.mark.parametrize("kind", ["duckdb", "postgres", "mariadb"])
def test_a_restore_never_loses_a_journaled_row(kind: str, request, tmp_path_factory) -> None:
    server = None if kind == "duckdb" else request.getfixturevalue(kind)
    tmp = tmp_path_factory.mktemp(f"restore-{kind}")

    @settings(max_examples=60 if kind == "duckdb" else 40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=cases)
    def run(case: dict[str, Any]) -> None:
        with _fresh(kind, server, tmp) as store:
            _check(store, case)

    run()
