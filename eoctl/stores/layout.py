"""Which rows of a store table are an endpoint's: the one definition that audit, reconcile-tokens,
gc-tokens, gc-blobs, replay-outbox, trace and doctor read the tokens, outbox and intents tables by.

DESIGN.md §2 gives `eo_outbox` and `eo_intents` an `endpoint` column and `eo_tokens` a `destination`
column so that several endpoints can share one table (NServiceBus, MassTransit and Wolverine all
default to one table per database). An endpoint's rows are those whose *owner column* holds its
name in the store (`[endpoints.X] name_in_store`, default X). A table without that column (a
remapped table of another library) is the endpoint's alone.

An owner column that holds other names but never the endpoint's is a configuration problem, not an
empty table: the endpoint was renamed in the configuration, or its `name_in_store` is wrong. Judged
as it reads, every in-flight record would be a silent loss and every token gone (EO202). So each
lookup also asks, per shared table, whether each configured name has a row (one `limit 1` query
each); for a name without one it counts the rows per name, and `misnamed()` says which endpoints
must not be judged, naming the names found and the key to set. It is careful not to cry wolf: names
other configured endpoints of the table claim are theirs (an endpoint with no row beside them is
empty), and an endpoint with a row under its name in any of its tables is named right (an endpoint
with tokens but no intents is just idle there). Left undetected: a name that differs in one table
alone (no key could fix that), and an idle endpoint beside unconfigured ones (flagged: the note says
"if one of them is its name").

The intents table is optional: pipelines without register-cleanup have none. What needs it (which
attempt registered a token or blob, and so garbage of attempts that lost) is then skipped, and
`notes()` says so.

Tables are looked up once per run through a short DB-API connection (columns only, no rows), or,
on the DuckDB engine, through its own connection with the store's file attached for the lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config
from eoctl.errors import Misconfigured, SourceError
from eoctl.findings import code_of
from eoctl.inert import inert
from eoctl.stores.connection import store_named
from eoctl.stores.connection import StoreConfig, describe

if TYPE_CHECKING:
    from sqlglot import exp

KINDS = ("tokens", "outbox", "intents")
#: the canonical column that names the endpoint a row belongs to
OWNER = {"tokens": "destination", "outbox": "endpoint", "intents": "endpoint"}
#: tables a pipeline may not have: what needs them is skipped, never an error
OPTIONAL = frozenset({"intents"})
#: what an absent optional table takes away (said in the audit's, reconcile's and gc's notes, and by doctor)
WITHOUT = {
    "intents": f"no register-cleanup evidence: {code_of('tokens.orphan_tokens')}/{code_of('blobs.orphan_blobs')} evidence has no registered_by_* columns, and "
               "reconcile-tokens, gc-tokens and gc-blobs tell garbage by age past --grace only (not by an "
               "attempt that lost)",
}


@dataclass(frozen=True)
class EndpointTable:
    """An endpoint's tokens, outbox or intents table as it is in the store."""

    endpoint: str  # eoctl's name of the endpoint
    kind: str  # tokens | outbox | intents
    store_name: str
    store: StoreConfig
    table: str
    columns: dict[str, str]  # canonical name -> the table's column
    owner: str  # the endpoint's name in the store (name_in_store)
    owner_column: str | None  # the table's column holding it; None: every row is this endpoint's
    shared: bool  # other configured endpoints use the same table
    #: an outbox that keeps its rows once sent: the column that says so, and its values that mean sent
    #: (None: true or not null); None: the reference protocol's outbox, whose rows are all pending
    sent_column: str | None = None
    sent_values: tuple[str, ...] | None = None

    @property
    def keeps_sent(self) -> bool:
        return self.sent_column is not None

    @property
    def owner_canonical(self) -> str:
        return OWNER[self.kind]

    def col(self, canonical: str) -> str:
        return self.columns[canonical]

    # conditions as nodes of stores.sql (a configured name enters SQL as a quoted identifier, a
    # value is bound), each with the values its placeholders bind, in their order

    def c(self, canonical: str, alias: str | None = None) -> exp.Column:
        """The column of a canonical name (of the table aliased `alias` in the statement)."""
        from eoctl.stores import sql

        return sql.column(self.columns[canonical], alias)

    def owned_cond(self, alias: str | None = None) -> tuple[exp.Expression | None, list[Any]]:
        """(`<owner column> = %s`, [owner]): the condition that keeps this endpoint's rows; (None, [])
        when the table is the endpoint's alone (sql.every leaves it out)."""
        if self.owner_column is None:
            return None, []
        from eoctl.stores import sql

        return sql.fragment(":owner = %s", owner=sql.column(self.owner_column, alias)), [self.owner]

    def sent_cond(self, alias: str | None = None) -> tuple[exp.Expression, list[Any]]:
        """The condition of a sent row (never NULL; see sent_node), the configured values bound."""
        assert self.sent_column is not None
        from eoctl.stores import sql

        return sent_node(sql.column(self.sent_column, alias), self.sent_values, self.store.type)

    def pending_cond(self, alias: str | None = None) -> tuple[exp.Expression | None, list[Any]]:
        """`not <sent>`: the condition that keeps pending rows; (None, []) for an outbox whose rows are
        all pending."""
        if not self.keeps_sent:
            return None, []
        sent, values = self.sent_cond(alias)
        from eoctl.stores import sql

        return sql.fragment("not :sent", sent=sent), values


class Disagreement(str):
    """A lookup's sentence about a table that exists but does not match its configuration (a
    configured column it lacks): a configuration problem, not an unreachable source."""


def needed_columns(key: str, kind: str, columns: dict[str, str], sent_column: str | None = None
                   ) -> list[tuple[str, str]]:
    """(configuration key, column) of every column eoctl reads from a `kind` table configured at
    `key` (`endpoints.billing.tokens`): each canonical column but the owner (a table without it is
    the endpoint's alone), and an outbox's sent_column."""
    out = [(f"{key}.columns.{canonical}", column) for canonical, column in columns.items() if canonical != OWNER[kind]]
    return out + ([(f"{key}.sent_column", sent_column)] if sent_column is not None else [])


def missing_column(what: str, found: list[str], needed: list[tuple[str, str]]) -> Disagreement | None:
    """The one sentence of a configured column a table or sink (`what`: "table T (where)") lacks:
    what was found and the key to set (every command refuses it with exit 6; doctor fails the
    row with it)."""
    for key, column in needed:
        if column not in found:
            return Disagreement(f"{what} has no column '{inert(column)}', which {key} names "
                                f"(its columns: {', '.join(inert(c) for c in found)})")
    return None


#: the canonical columns eoctl reads as times, by kind of table
TIME_COLUMNS = {"tokens": ("created_at",), "outbox": ("created_at", "updated_at", "tokens_committed_at"),
                "intents": ("created_at",)}
#: the words of a column type that can hold a time: a time type, or text holding ISO times
_TIME_TYPES = ("time", "date", "char", "text", "string")


def wrong_type(what: str, found: Any, key: str, kind: str, columns: dict[str, str]) -> Disagreement | None:
    """The one sentence of a column eoctl reads as a time whose type cannot hold one (`found`: the
    table's TableColumns; `key`: the table's configuration key): a number or a flag mapped as
    `created_at` would be judged by values it never held."""
    types = getattr(found, "types", {})
    for canonical in TIME_COLUMNS.get(kind, ()):
        column = columns[canonical]
        data_type = types.get(column)
        if data_type and not any(word in data_type for word in _TIME_TYPES):
            return Disagreement(f"{what} has column '{inert(column)}' of type {inert(data_type)}, which "
                                f"{key}.columns.{canonical} names as a time (a timestamp, datetime or date column, "
                                "or text holding ISO times)")
    return None


def text_time_columns(kind: str, columns: dict[str, str], types: dict[str, str]) -> list[tuple[str, str]]:
    """(canonical, column) of each column eoctl reads as a time that the store keeps as text
    (`types`: column -> information_schema's type, or an engine's): its values are parsed as the
    engines read them, and one that is no time is a configuration problem (unparsed_time)."""
    out = []
    for canonical in TIME_COLUMNS.get(kind, ()):
        data_type = types.get(columns[canonical], "").lower()
        if data_type and not any(word in data_type for word in ("time", "date")):
            out.append((canonical, columns[canonical]))
    return out


#: how much of a value a sentence shows
_VALUE_SHOWN = 60


def unparsed_time(what: str, key: str, canonical: str, column: str, value: Any) -> Disagreement:
    """The one sentence of a text column eoctl reads as a time holding a value that is no time
    (every command refuses it with exit 6; doctor fails the row with it)."""
    text = str(value)
    shown = inert(text[:_VALUE_SHOWN]) + ("..." if len(text) > _VALUE_SHOWN else "")
    return Disagreement(f"{what} has column '{inert(column)}' holding '{shown}', which is not a time, but "
                        f"{key}.columns.{canonical} names it as a time (a timestamp, datetime or date column, "
                        "or text holding ISO times)")


def endpoint_unparsed_time(t: EndpointTable, canonical: str, value: Any) -> Misconfigured:
    """unparsed_time of an endpoint's table, as the error every command stops with (exit 6)."""
    what = f"table {t.table} ({describe(t.store)}, schema {t.store.schema_name})"
    return Misconfigured(unparsed_time(what, f"endpoints.{t.endpoint}.{t.kind}", canonical, t.col(canonical), value))


def sent_node(column: exp.Expression, values: tuple[str, ...] | None, dialect: str = "duckdb"
              ) -> tuple[exp.Expression, list[Any]]:
    """SQL true for a sent row, never NULL, as a node of stores.sql, and the values it binds (the configuration's `values`,
    in order): `column` holds one of them as text, or, without values, is set and not false. (`not
    (x in ...)`, never `x not in`: sqlglot writes that `NOT x IN`, which MySQL's HIGH_NOT_PRECEDENCE
    reads as `(NOT x) IN`.)"""
    from sqlglot import exp

    from eoctl.stores import sql

    if values is None:
        falses = [sql.literal("false"), sql.literal("0")] + ([sql.call("char", sql.literal(0))] if dialect == "mysql" else [])
        return sql.fragment("(:c is not null and not (cast(:c as varchar) in :falses))", c=column,
                            falses=exp.Tuple(expressions=falses)), []
    return sql.fragment("(:c is not null and cast(:c as varchar) in :listed)", c=column,
                        listed=exp.Tuple(expressions=sql.params(len(values)))), list(values)


#: how many of the names a misnamed endpoint's table holds are named (most rows first)
NAMES_SHOWN = 5


@dataclass(frozen=True)
class Misnamed:
    """An endpoint table's owner column holds other names but never the endpoint's: a configuration
    problem, so nothing read from that table for the endpoint is judged."""

    endpoint: str
    kind: str  # tokens | outbox | intents
    store: str  # the configured store's name
    table: str
    where: str  # the store, as describe() says it, and its schema
    column: str  # the owner column as the table names it
    name: str  # the name looked for (name_in_store, default the endpoint's)
    found: tuple[tuple[str, int], ...]  # other names the rows carry, with their row counts, most first

    @property
    def key(self) -> str:
        return f"endpoints.{self.endpoint}.name_in_store"

    def sentence(self) -> str:
        names = ", ".join(f"'{inert(n)}' ({c:,} row{'s' if c != 1 else ''})" for n, c in self.found)
        return (f"endpoint {self.endpoint} not judged: its {self.kind} table {self.table} ({self.where}) has no row "
                f"whose {self.column} is '{inert(self.name)}', but rows under {names}: if one of them is "
                f"{self.endpoint}'s name in the store, set {self.key} to it")

    def to_dict(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "kind": self.kind, "store": self.store, "table": self.table,
                "where": self.where,
                "column": self.column, "name": self.name, "key": self.key,
                "found": [{"name": n, "rows": c} for n, c in self.found], "note": self.sentence()}


def owner_census(conn: Any, store: StoreConfig, table: str, column: str, names: list[str],
                 catalog: str | None = None) -> tuple[set[str], list[tuple[str, int]]]:
    """Of `names`, those no row of `table` carries in `column`, and, when there are any, the names
    its rows do carry with their counts (most first, NAMES_SHOWN more than `names`). One `limit 1`
    query per name (the endpoint's rows are usually found at once); the count only when one is
    absent. `catalog`: the name a DuckDB store's file is attached as on `conn`."""
    from eoctl.config.model import DuckDBStore
    from eoctl.stores import sql
    from eoctl.stores.connection import DRIVER_MODULES
    from eoctl.stores.connection import query as run_query

    source = sql.table(store.schema_name, table)
    if catalog:
        source.set("catalog", sql.ident(catalog))
    col = sql.column(column)

    def query(template: str, params: list[Any], **parts: Any) -> list[tuple]:
        return run_query(conn, store, sql.statement(template, t=source, c=col, **parts), params)

    try:
        absent = {n for n in names if not query("select 1 from :t where :c = %s limit 1", [n])}
        if not absent:
            return absent, []
        rows = query("select cast(:c as varchar) as name, count(*) as n from :t where :c is not null "
                     "group by 1 order by 2 desc, 1 limit :shown", [], shown=sql.literal(NAMES_SHOWN + len(names)))
    except Exception as exc:
        if not type(exc).__module__.startswith(DRIVER_MODULES):
            raise
        if not isinstance(store, DuckDBStore):
            conn.rollback()  # the connection stays usable for the next question
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SourceError(f"table {table} of {describe(store)} cannot be read: {reason}") from None
    return absent, [(str(n), int(c)) for n, c in rows]


#: misnamed tables other endpoints' checks read too: a pending entry holds the tokens, sequences
#: and blobs of the messages it will send to other endpoints, so without it none can be judged
READ_BY_ALL = frozenset({"outbox"})


def refused(misnamed: list[Misnamed], endpoints: list[str]) -> set[str]:
    """Of `endpoints`, those not to judge: the misnamed ones, and all when an outbox is misnamed."""
    return unjudged([(m.endpoint, m.kind) for m in misnamed], endpoints)


def unjudged(misnamed: list[tuple[str, str]], endpoints: list[str]) -> set[str]:
    """refused() of misnamed tables given as (endpoint, kind), as a report's JSON keeps them."""
    if any(kind in READ_BY_ALL for _, kind in misnamed):
        return set(endpoints)
    return {endpoint for endpoint, _ in misnamed}


class StoreLayout:
    """Every configured endpoint's tables, resolved against the stores once (lazily, per table)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._columns: dict[str, dict[str, list[str]]] = {}  # store -> table -> columns
        # (store, table, owner column) -> (configured names without a row, the names rows carry)
        self._census: dict[tuple[str, str, str], tuple[set[str], list[tuple[str, int]]]] = {}

    def _table_columns(self, store_name: str, table: str) -> list[str] | None:
        """The columns of a table; every table of the store's schema is looked up in its first
        open, with those of every configured store the same connection reaches (one short
        connection per file or database and run, however many stores and endpoints share it)."""
        from eoctl.stores.connection import connect, schema_columns

        if store_name not in self._columns:
            with connect(store_named(self.config, store_name)) as conn:
                reached = self._reached(store_name)
                found = {name: schema_columns(conn, store_named(self.config, name)) for name in reached}
                self._columns.update(found)
                try:
                    self._take_census(conn, reached)
                except BaseException:
                    for n in reached:  # all or nothing: a failed census is never taken for "all named"
                        self._columns.pop(n, None)
                    raise
        return self._columns[store_name].get(table)

    def _reached(self, store_name: str) -> list[str]:
        """The configured stores one connection to `store_name`'s file or database reaches."""
        from eoctl.stores.connection import connection_key

        key = connection_key(store_named(self.config, store_name))
        return [n for n in self.config.stores if connection_key(store_named(self.config, n)) == key]

    def _owned_tables(self, stores: list[str]) -> dict[tuple[str, str, str], list[str]]:
        """(store, table, owner column) -> the names configured endpoints look for in it, for every
        endpoint table in `stores` that exists and has its owner column."""
        out: dict[tuple[str, str, str], list[str]] = {}
        for name, ep in self.config.endpoints.items():
            for kind in KINDS:
                spec = getattr(ep, kind)
                store_name = ep.store_of(spec)
                if store_name is None:
                    continue
                column = spec.columns.model_dump()[OWNER[kind]]
                if store_name in stores and column in (self._columns[store_name].get(spec.table) or ()):
                    names = out.setdefault((store_name, spec.table, column), [])
                    if (ep.name_in_store or name) not in names:
                        names.append(ep.name_in_store or name)
        return out

    def _take_census(self, conn: Any, stores: list[str], catalog: str | None = None) -> None:
        """owner_census of every shared table of `stores` (their columns looked up already)."""
        for (store_name, table, column), names in self._owned_tables(stores).items():
            store = store_named(self.config, store_name)
            self._census[(store_name, table, column)] = owner_census(conn, store, table, column, names, catalog)

    def look_up_attached(self, con: Any, store_name: str) -> None:
        """Look up the tables of DuckDB store `store_name` (and of every store its file holds)
        through `con`, a DuckDB connection of the engine's own, with the file attached read-only
        for this one query: 0.5 ms, against 20 ms for an open of its own. Never waits for a file
        another process holds (SourceError: the lookup is then made at the first use, as usual).
        The DuckDB engine calls it while it copies the stores, before the run reads the layout."""
        from eoctl.stores.connection import attached_read_only, schema_columns

        if store_name in self._columns:
            return
        reached = self._reached(store_name)
        with attached_read_only(con, store_named(self.config, store_name), wait=False) as catalog:
            found = {n: schema_columns(con, store_named(self.config, n), catalog=catalog) for n in reached}
            self._columns.update(found)
            try:
                self._take_census(con, reached, catalog)
            except BaseException:
                for n in reached:  # all or nothing: the lookup at first use makes it again
                    self._columns.pop(n, None)
                raise

    def sharing(self, store_name: str, table: str, kind: str) -> list[str]:
        """The endpoints whose `kind` table is `table` in `store_name` (more than one: it is shared)."""
        out = []
        for name, ep in self.config.endpoints.items():
            spec = getattr(ep, kind)
            if ep.store_of(spec) == store_name and spec.table == table:
                out.append(name)
        return out

    def table(self, endpoint: str, kind: str) -> EndpointTable | None:
        """The endpoint's `kind` table; None when it has no store for it, or when an optional table
        (intents) does not exist. A missing required table is a SourceError."""
        found = self.lookup(endpoint, kind)
        if found is None or isinstance(found, EndpointTable):
            return found
        if isinstance(found, Disagreement):
            raise Misconfigured(found)
        raise SourceError(found)

    def lookup(self, endpoint: str, kind: str) -> EndpointTable | str | None:
        """Like table(), but a missing table (also a required one) is a sentence saying so."""
        ep = self.config.endpoint(endpoint)
        spec = getattr(ep, kind)
        store_name = ep.store_of(spec)
        if store_name is None:
            return None
        store = store_named(self.config, store_name)
        found = self._table_columns(store_name, spec.table)
        if found is None:
            if kind in OPTIONAL:
                return None
            return f"table {spec.table} does not exist in {describe(store)} (schema {store.schema_name})"
        columns = spec.columns.model_dump()
        owner_column = columns[OWNER[kind]]
        sent_column = getattr(spec, "sent_column", None)
        what = f"table {spec.table} ({describe(store)}, schema {store.schema_name})"
        key = f"endpoints.{endpoint}.{kind}"
        wrong = missing_column(what, found, needed_columns(key, kind, columns, sent_column)) or wrong_type(
            what, found, key, kind, columns)
        if wrong is not None:
            return wrong
        return EndpointTable(
            endpoint, kind, store_name, store, spec.table, columns, ep.name_in_store or endpoint,
            owner_column if owner_column in found else None,
            len(self.sharing(store_name, spec.table, kind)) > 1,
            sent_column, tuple(spec.sent_values) if sent_column is not None and spec.sent_values else None)

    def missing(self, kind: str, endpoints: list[str] | None = None) -> list[str]:
        """Endpoints (of `endpoints`, default all) with a store for `kind` whose table does not exist."""
        out = []
        for name in endpoints or list(self.config.endpoints):
            ep = self.config.endpoint(name)
            spec = getattr(ep, kind)
            store_name = ep.store_of(spec)
            if store_name is not None and self._table_columns(store_name, spec.table) is None:
                out.append(name)
        return out

    def tables(self, kind: str, endpoints: list[str] | None = None) -> list[EndpointTable]:
        """Each endpoint's `kind` table that exists (of `endpoints`, default all)."""
        out = []
        for name in endpoints or list(self.config.endpoints):
            t = self.table(name, kind)
            if t is not None:
                out.append(t)
        return out

    def distinct_tables(self, kind: str) -> list[EndpointTable]:
        """One entry per physical table (store and table name): for work on a whole table, such as a
        journal's purge or restore, that must not run once per endpoint sharing it."""
        seen: dict[tuple[str, str], EndpointTable] = {}
        for t in self.tables(kind):
            seen.setdefault((t.store_name, t.table), t)
        return list(seen.values())

    def misnamed(self, endpoints: list[str] | None = None) -> list[Misnamed]:
        """The tables of `endpoints` (default all) whose owner column holds names no configured
        endpoint of the table claims, of endpoints whose name no row of any of their tables holds
        (see the module's doc)."""
        out = []
        for name in endpoints or list(self.config.endpoints):
            owned = [t for t in (self.lookup(name, kind) for kind in KINDS)
                     if isinstance(t, EndpointTable) and t.owner_column is not None]
            if any(t.owner not in self._census[(t.store_name, t.table, t.owner_column)][0] for t in owned):
                continue  # rows under its name in one of its tables: named right, just empty elsewhere
            for t in owned:
                absent, found = self._census[(t.store_name, t.table, t.owner_column)]
                claimed = set(self._owned_tables([t.store_name]).get((t.store_name, t.table, t.owner_column), []))
                others = tuple((n, c) for n, c in found if n not in claimed)[:NAMES_SHOWN]
                if others:
                    out.append(Misnamed(name, t.kind, t.store_name, t.table,
                                        f"{describe(t.store)}, schema {t.store.schema_name}",
                                        t.owner_column, t.owner, others))
        return out

    def notes(self, endpoints: list[str] | None = None, misnamed: list[Misnamed] | None = None) -> list[str]:
        """What this run could not use: one sentence per misnamed endpoint table (`misnamed`, default
        misnamed(endpoints): a run that reads every endpoint's tables for evidence gives its own)
        and per missing optional table of `endpoints` (default all)."""
        misnamed = self.misnamed(endpoints) if misnamed is None else misnamed
        out = [m.sentence() for m in misnamed]
        others = sorted(refused(misnamed, endpoints or list(self.config.endpoints)) - {m.endpoint for m in misnamed})
        if others:
            out.append(f"endpoints {', '.join(others)} not judged either: the pending outbox entries eoctl cannot "
                       "tell apart hold the tokens, sequences and blobs of the messages they will send")
        for kind in sorted(OPTIONAL):
            absent = self.missing(kind, endpoints)
            if absent:
                out.append(f"no {kind} table for {', '.join(absent)}: {WITHOUT[kind]}")
        return out
