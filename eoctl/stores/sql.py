"""Store SQL as sqlglot builds it (the dialect compiler Ibis brings along): every statement eoctl
runs on a store is written once, as a template in PostgreSQL's SQL, and compiled for the store's
dialect (DuckDB, PostgreSQL, MySQL/MariaDB) and its driver's placeholders.

A configured name never enters SQL as text: a template holds `:name` placeholders, which
`statement()` replaces with syntax-tree nodes (a quoted identifier, a schema-qualified table, a
fragment built here), and the generator quotes it for the dialect (`"..."`, MySQL's backticks).
A value is always bound: `%s` in a template, `param()` in a fragment. Fragments compose as nodes,
so the bound values follow the rendered order, which is the template's.

Why sqlglot and not a string per dialect: MySQL has no CAST AS VARCHAR, no `||`, and TIMESTAMPTZ
is DATETIME there; the regular expressions that translated eoctl's SQL also saw the inside of a
quoted name.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.dialects.mysql import MySQL
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ErrorLevel

#: a node or a list of nodes (spliced into the list the placeholder stands in: a select list, a
#: column list, the values of IN)
Part = exp.Expression | Sequence[exp.Expression]


def ident(name: str) -> exp.Identifier:
    """A configured name as an identifier, quoted whatever it holds (case, a space, a quote, `%s`)."""
    return exp.Identifier(this=name, quoted=True)


def column(name: str, table: str | None = None) -> exp.Column:
    """A column, of the table aliased `table` (an alias eoctl's template gives) when named."""
    return exp.Column(this=ident(name), table=exp.Identifier(this=table, quoted=False) if table else None)


def columns(names: Iterable[str], table: str | None = None) -> list[exp.Column]:
    return [column(n, table) for n in names]


def table(schema: str | None, name: str, alias: str | None = None) -> exp.Table:
    """A table of `schema` (None: the connection's default)."""
    node = exp.Table(this=ident(name), db=ident(schema) if schema else None)
    if alias:
        node.set("alias", exp.TableAlias(this=exp.Identifier(this=alias, quoted=False)))
    return node


def param() -> exp.Placeholder:
    """One bound value."""
    return exp.Placeholder()


def params(count: int) -> list[exp.Placeholder]:
    return [param() for _ in range(count)]


def call(function: str, *args: exp.Expression | str) -> exp.Anonymous:
    """A function as the store names it, passed through every dialect as written (a store-specific
    fragment: `unhex`, `convert_to`, ...); a str argument is a string literal."""
    return exp.Anonymous(this=function, expressions=[exp.Literal.string(a) if isinstance(a, str) else a for a in args])


def literal(value: str | int) -> exp.Literal:
    """A constant of eoctl's own (a state name, a separator), never a value from data or config."""
    return exp.Literal.string(value) if isinstance(value, str) else exp.Literal.number(value)


def every(*conditions: exp.Expression | None) -> exp.Expression:
    """The conditions joined with AND (None left out); TRUE when there is none."""
    present = [c for c in conditions if c is not None]
    return exp.and_(*present) if present else exp.true()


@functools.lru_cache(maxsize=512)
def _parsed(template: str) -> exp.Expression:
    return sqlglot.parse_one(template, read="postgres")


def fragment(template: str, **parts: Part) -> exp.Expression:
    """An expression (a condition, a select item) from a template, for a statement to take."""
    return statement(template, **parts)


def statement(template: str, **parts: Part) -> exp.Expression:
    """The template (PostgreSQL SQL, `%s` for bound values, `:name` for `parts`) as a syntax tree
    with each `:name` replaced by its node, or its nodes spliced in where a list stands."""
    tree = _parsed(template).copy()
    unused = set(parts)
    for node in list(tree.find_all(exp.Placeholder)):
        name = node.name
        if not node.this:
            continue
        if name not in parts:
            raise KeyError(f"no part {name!r} for the SQL template {template!r}")
        unused.discard(name)
        value = parts[name]
        target: exp.Expression = node
        # `from :t`, `into :t`: the parser wraps the placeholder in a Table (or a Column in a
        # select list); a table or column node replaces the wrapper
        if isinstance(node.parent, (exp.Table, exp.Column)) and len([v for v in node.parent.args.values() if v]) == 1:
            target = node.parent
        if isinstance(value, exp.Expression):
            target.replace(value.copy())
            continue
        parent, key = target.parent, target.arg_key
        siblings = parent.args.get(key) if parent is not None else None
        if not isinstance(siblings, list):
            raise TypeError(f"part {name!r} of {template!r} is a list where one node stands")
        at = siblings.index(target)
        parent.set(key, siblings[:at] + [v.copy() for v in value] + siblings[at + 1:])
    if unused:
        raise KeyError(f"parts {sorted(unused)} are not in the SQL template {template!r}")
    return tree


class _PercentParams:
    """A generator for a driver whose placeholder is `%s` (psycopg, PyMySQL): every other `%`, in
    a quoted name or a string, doubled, so it is never read as a placeholder."""

    def placeholder_sql(self, expression: exp.Placeholder) -> str:
        return "%s"

    def identifier_sql(self, expression: exp.Identifier) -> str:
        return super().identifier_sql(expression).replace("%", "%%")  # type: ignore[misc]

    def literal_sql(self, expression: exp.Literal) -> str:
        text = super().literal_sql(expression)  # type: ignore[misc]
        return text.replace("%", "%%") if expression.is_string else text


class EoctlPostgres(Postgres):
    class Generator(_PercentParams, Postgres.Generator):
        pass


class EoctlMySQL(MySQL):
    class Generator(_PercentParams, MySQL.Generator):
        def datatype_sql(self, expression: exp.DataType) -> str:
            # a VARCHAR of eoctl's DDL is a name or an id: a key may hold it (TEXT cannot be one
            # without a prefix length); a time with a zone is a DATETIME in UTC, as sessions run
            if expression.is_type(exp.DataType.Type.VARCHAR) and not expression.expressions:
                return "VARCHAR(255)"
            if expression.is_type(exp.DataType.Type.TIMESTAMPTZ):
                return "DATETIME(6)"
            return super().datatype_sql(expression)

        def not_sql(self, expression: exp.Not) -> str:
            # `NOT (x IN (...))`: a server in HIGH_NOT_PRECEDENCE mode reads `NOT x IN` as `(NOT x) IN`
            inner = expression.this
            return f"NOT {self.sql(inner) if isinstance(inner, exp.Paren) else '(' + self.sql(inner) + ')'}"

        def cast_sql(self, expression: exp.Cast, safe_prefix: str | None = None) -> str:
            if expression.to.is_type(exp.DataType.Type.TIMESTAMPTZ):
                return f"CAST({self.sql(expression, 'this')} AS DATETIME(6))"
            return super().cast_sql(expression, safe_prefix)


_DIALECTS = {"duckdb": DuckDB(), "postgres": EoctlPostgres(), "mysql": EoctlMySQL()}


def dialect_of(store: Any) -> str:
    from eoctl.config.model import DuckDBStore, MySQLStore

    if isinstance(store, DuckDBStore):
        return "duckdb"
    return "mysql" if isinstance(store, MySQLStore) else "postgres"


def render(store: Any, tree: exp.Expression) -> str:
    """The statement as `store`'s driver takes it. A construct the dialect lacks raises: eoctl's
    statements are written for every store, and a warning on stderr would hide a changed meaning.
    On DuckDB a `for update` is left out: one process writes a file at a time, so the rows a
    transaction reads are not written by another meanwhile."""
    dialect = dialect_of(store)
    if dialect == "duckdb" and any(tree.find_all(exp.Lock)):
        tree = tree.copy()
        for lock in list(tree.find_all(exp.Lock)):
            lock.pop()
    target = _DIALECTS[dialect]
    if any(tree.find_all(exp.Ordered)):
        # NULLs sort where the store puts them: eoctl's orders make listings stable and pages follow
        # a key (`key > %s`, never NULL), and a CASE spelling PostgreSQL's order on MySQL would keep
        # an index from serving the order (and `order by 2, 1` has no such spelling)
        tree = tree.copy()
        for ordered in tree.find_all(exp.Ordered):
            desc = bool(ordered.args.get("desc"))
            ordered.set("nulls_first", {"nulls_are_small": not desc, "nulls_are_large": desc}
                        .get(target.NULL_ORDERING, False))
    return tree.sql(dialect=target, unsupported_level=ErrorLevel.RAISE)


def compiled(store: Any, sql: str | exp.Expression, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """A statement (a tree, or a template without names) and its bound values as `store`'s driver
    takes them: MySQL's DATETIME has no zone, so an aware time is bound as its UTC wall time (every
    session runs in UTC)."""
    import datetime as dt

    tree = statement(sql) if isinstance(sql, str) else sql
    text = render(store, tree)
    if dialect_of(store) == "mysql":
        values = [v.astimezone(dt.timezone.utc).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v
                  for v in values]
    return text, list(values)
