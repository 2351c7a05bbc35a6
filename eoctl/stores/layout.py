"""Which rows of a store table are an endpoint's: the one definition that audit, reconcile-tokens,
gc-tokens, gc-blobs, replay-outbox, trace and doctor read the tokens, outbox and intents tables by.

DESIGN.md §2 gives `eo_outbox` and `eo_intents` an `endpoint` column and `eo_tokens` a `destination`
column so that several endpoints can share one table (NServiceBus, MassTransit and Wolverine all
default to one table per database). An endpoint's rows are those whose *owner column* holds its
name in the store (`[endpoints.X] name_in_store`, default X). A table without that column (a
remapped table of another library) is the endpoint's alone.

The intents table is optional: pipelines without register-cleanup have none. What needs it (which
attempt registered a token or blob, and so garbage of attempts that lost) is then skipped, and
`notes()` says so.

Tables are looked up once per run through a short DB-API connection (columns only, no rows), or,
on the DuckDB engine, through its own connection with the store's file attached for the lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eoctl.config.model import Config
from eoctl.errors import SourceError
from eoctl.sources.tables import quote_ident, store_named
from eoctl.stores.connection import StoreConfig, describe

KINDS = ("tokens", "outbox", "intents")
#: the canonical column that names the endpoint a row belongs to
OWNER = {"tokens": "destination", "outbox": "endpoint", "intents": "endpoint"}
#: tables a pipeline may not have: what needs them is skipped, never an error
OPTIONAL = frozenset({"intents"})
#: what an absent optional table takes away (said in the audit's, reconcile's and gc's notes, and by doctor)
WITHOUT = {
    "intents": "no register-cleanup evidence: EO201/EO401 evidence has no registered_by_* columns, and "
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

    @property
    def owner_canonical(self) -> str:
        return OWNER[self.kind]

    def col(self, canonical: str) -> str:
        return self.columns[canonical]

    def q(self, canonical: str) -> str:
        """The quoted column of a canonical name, for SQL."""
        return quote_ident(self.columns[canonical])

    def owned(self, alias: str = "") -> tuple[str, list[Any]]:
        """(` and <owner column> = %s`, [owner]): the SQL condition that keeps this endpoint's rows
        (empty when the table is the endpoint's alone). Appended to a WHERE clause."""
        if self.owner_column is None:
            return "", []
        prefix = f"{alias}." if alias else ""
        return f" and {prefix}{quote_ident(self.owner_column)} = %s", [self.owner]


class StoreLayout:
    """Every configured endpoint's tables, resolved against the stores once (lazily, per table)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._columns: dict[str, dict[str, list[str]]] = {}  # store -> table -> columns

    def _table_columns(self, store_name: str, table: str) -> list[str] | None:
        """The columns of a table; every table of the store's schema is looked up in its first
        open, with those of every configured store the same connection reaches (one short
        connection per file or database and run, however many stores and endpoints share it)."""
        from eoctl.stores.connection import connect, schema_columns

        if store_name not in self._columns:
            with connect(store_named(self.config, store_name)) as conn:
                for name in self._reached(store_name):
                    self._columns[name] = schema_columns(conn, store_named(self.config, name))
        return self._columns[store_name].get(table)

    def _reached(self, store_name: str) -> list[str]:
        """The configured stores one connection to `store_name`'s file or database reaches."""
        from eoctl.stores.connection import connection_key

        key = connection_key(store_named(self.config, store_name))
        return [n for n in self.config.stores if connection_key(store_named(self.config, n)) == key]

    def look_up_attached(self, con: Any, store_name: str) -> None:
        """Look up the tables of DuckDB store `store_name` (and of every store its file holds)
        through `con`, a DuckDB connection of the engine's own, with the file attached read-only
        for this one query: 0.5 ms, against 20 ms for an open of its own. Never waits for a file
        another process holds (SourceError: the lookup is then made at the first use, as usual).
        The DuckDB engine calls it while it copies the stores, before the run reads the layout."""
        from eoctl.stores.connection import attached_read_only, schema_columns

        if store_name in self._columns:
            return
        with attached_read_only(con, store_named(self.config, store_name), wait=False) as catalog:
            found = {n: schema_columns(con, store_named(self.config, n), catalog=catalog)
                     for n in self._reached(store_name)}
        self._columns.update(found)

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
        return EndpointTable(
            endpoint, kind, store_name, store, spec.table, columns, ep.name_in_store or endpoint,
            owner_column if owner_column in found else None,
            len(self.sharing(store_name, spec.table, kind)) > 1)

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

    def notes(self, endpoints: list[str] | None = None) -> list[str]:
        """What this run could not use, one sentence per missing optional table."""
        out = []
        for kind in sorted(OPTIONAL):
            absent = self.missing(kind, endpoints)
            if absent:
                out.append(f"no {kind} table for {', '.join(absent)}: {WITHOUT[kind]}")
        return out
