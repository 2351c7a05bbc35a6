"""Store SQL through stores.sql: names enter as quoted identifiers (never pasted text), values are
bound, and one template compiles for each store's dialect and driver."""

from __future__ import annotations

import duckdb
import pytest

from eoctl.config.model import DuckDBStore, MySQLStore, PostgresStore
from eoctl.stores import sql
from eoctl.stores.connection import query

PG = PostgresStore(type="postgres", database="d", user="u")
MY = MySQLStore(type="mysql", database="d", user="u")

#: names a user's store may have: a quote, a placeholder, a percent sign, a space, a reserved word
HOSTILE = ['order', 'Note "x"', "50% off", "%s", "a'; drop table t; --"]


def test_hostile_names_are_identifiers_and_values_are_bound_on_duckdb(tmp_path) -> None:
    store = DuckDBStore(type="duckdb", path=str(tmp_path / "s.duckdb"))
    con = duckdb.connect(store.path)
    table = sql.table("main", "My Table %s")
    from sqlglot import exp

    columns = [exp.ColumnDef(this=sql.ident(n), kind=exp.DataType.build("varchar")) for n in HOSTILE]
    query(con, store, exp.Create(this=exp.Schema(this=table, expressions=columns), kind="TABLE"))
    values = ["%s", "it's", "?", "'; --", "x"]
    query(con, store, sql.statement("insert into :t (:cols) values (%s, %s, %s, %s, %s)", t=table,
                                    cols=sql.columns(HOSTILE)), values)
    rows = query(con, store, sql.statement("select :cols from :t where :first = %s and :last in :ids", t=table,
                                           cols=sql.columns(HOSTILE), first=sql.column(HOSTILE[0]),
                                           last=sql.column(HOSTILE[-1]), ids=sql.fragment("(%s, %s)")), ["%s", "y", "x"])
    assert rows == [tuple(values)]
    assert [r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()] == ["My Table %s"]


@pytest.mark.parametrize("store, expected", [
    (PG, 'SELECT "50%% off" FROM "d"."T" WHERE "%%s" = %s AND x LIKE \'a%%\' FOR UPDATE'),
    (MY, "SELECT `50%% off` FROM `d`.`T` WHERE `%%s` = %s AND x LIKE 'a%%' FOR UPDATE"),
    (DuckDBStore(type="duckdb", path="/x"), 'SELECT "50% off" FROM "d"."T" WHERE "%s" = ? AND x LIKE \'a%\''),
], ids=["postgres", "mysql", "duckdb"])
def test_one_template_compiles_for_each_driver(store, expected: str) -> None:
    """psycopg and PyMySQL take `%s` and read every other `%` doubled; DuckDB takes `?` and needs no
    row lock (one writer per file)."""
    tree = sql.statement("select :c from :t where :k = %s and x like 'a%' for update",
                         c=sql.column("50% off"), t=sql.table("d", "T"), k=sql.column("%s"))
    assert sql.render(store, tree) == expected


def test_mysql_gets_its_own_types_casts_and_not() -> None:
    ddl = sql.statement("create table if not exists :t (name varchar primary key, at timestamptz)", t=sql.table("d", "L"))
    assert sql.render(MY, ddl) == "CREATE TABLE IF NOT EXISTS `d`.`L` (name VARCHAR(255) PRIMARY KEY, at DATETIME(6))"
    where = sql.statement("select cast(a as varchar), a || b from t where a not in (%s) and b < cast(%s as timestamptz)")
    assert sql.render(MY, where) == ("SELECT CAST(a AS CHAR), CONCAT(a, b) FROM t WHERE NOT (a IN (%s)) "
                                     "AND b < CAST(%s AS DATETIME(6))")


def test_a_part_the_template_lacks_or_a_missing_part_is_an_error() -> None:
    with pytest.raises(KeyError, match="no part 't'"):
        sql.statement("select 1 from :t")
    with pytest.raises(KeyError, match=r"parts \['u'\] are not in"):
        sql.statement("select 1 from :t", t=sql.table(None, "x"), u=sql.column("y"))
