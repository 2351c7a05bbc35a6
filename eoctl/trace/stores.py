"""Indexed lookups of one message in the stores (tokens, pending outbox entries, intents), read
straight from each store (no engine): a message has a handful of rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config
from eoctl.stores import sql
from eoctl.stores.connection import connection_key
from eoctl.stores.db import Db, in_list, open_db
from eoctl.stores.layout import EndpointTable, StoreLayout
from eoctl.trace.model import Entry, Intent, TokenRow, utc

if TYPE_CHECKING:
    from sqlglot import exp


def _text(column: str) -> exp.Expression:
    """`column` (a configured name) read as text."""
    return sql.fragment("cast(:c as varchar)", c=sql.column(column))


def _any_in(*conditions: tuple[str, set[str]]) -> tuple[list[exp.Expression], list[str]]:
    """Conditions `column in (...)` (compared as text) for the non-empty value sets, and their
    parameters; the caller joins them with `or`."""
    where: list[exp.Expression] = []
    params: list[str] = []
    for column, values in conditions:
        if values:
            where.append(sql.fragment(":c in :ids", c=_text(column), ids=in_list(sorted(values))))
            params += sorted(values)
    return where, params


def _any(conditions: list[exp.Expression]) -> exp.Expression:
    """The conditions joined with OR (in parentheses where an AND takes them)."""
    from sqlglot import exp

    return exp.or_(*conditions)


class StoreLookups:
    """Indexed lookups in every endpoint's tokens, outbox and intents tables (read-only); in a
    table several endpoints share, each endpoint's own rows (eoctl.stores.layout)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.layout = StoreLayout(config)
        #: (endpoint, kind) -> primary key -> the row by canonical column: every store row trace
        #: read, for the checks' scope
        self.rows: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._open: dict[tuple, Any] | None = None  # connection key -> connection, within held()
        self._stack: ExitStack | None = None

    @contextmanager
    def held(self) -> Iterator[StoreLookups]:
        """Within the block, each store's file or database is opened once, for every lookup and
        endpoint that reads it, and closed at the end: one short hold of a DuckDB file instead of
        one per lookup and endpoint (an open costs ~12 ms, and a writer waits while it lasts)."""
        if self._open is not None:
            yield self
            return
        self._open = {}
        try:
            with ExitStack() as stack:
                self._stack = stack
                yield self
        finally:
            self._open, self._stack = None, None

    def _db(self, store) -> Db:
        assert self._open is not None and self._stack is not None
        key = connection_key(store)
        if key not in self._open:
            self._open[key] = self._stack.enter_context(open_db(store, read_only=True)).conn
        return Db(store, self._open[key])

    def _keep(self, t: EndpointTable, key: str, **row: Any) -> None:
        self.rows.setdefault((t.endpoint, t.kind), {})[key] = row

    def _query(self, key: str, build) -> list[tuple[EndpointTable, tuple]]:
        out: list[tuple[EndpointTable, tuple]] = []
        with self.held():
            for name in self.config.endpoints:
                t = self.layout.lookup(name, key)
                if not isinstance(t, EndpointTable):  # trace reads what there is; doctor names a missing table
                    continue
                owned, owner = t.owned_cond()
                pending, sent = t.pending_cond()  # a sent row of an outbox that keeps them is not an entry
                db = self._db(t.store)
                items, where, params = build(SimpleNamespace(**t.columns))
                tree = sql.statement("select :items from :t where :cond", items=items, t=db.table(t.table),
                                     cond=sql.every(_any(where), owned, pending))
                out += [(t, row) for row in db.execute(tree, [*params, *owner, *sent])]
        return out

    def tokens(self, *, message_ids: set[str], token_ids: set[str]) -> list[TokenRow]:
        if not message_ids and not token_ids:
            return []

        def build(c) -> tuple[list[exp.Expression], list[exp.Expression], list]:
            where, params = _any_in((c.message_id, message_ids), (c.token_id, token_ids))
            return [_text(c.token_id), _text(c.message_id), _text(c.attempt_id), sql.column(c.created_at)], where, params

        out = []
        for t, (tid, m, a, c) in self._query("tokens", build):
            self._keep(t, tid, token_id=tid, message_id=m, destination=t.owner, attempt_id=a, created_at=utc(c))
            out.append(TokenRow(t.endpoint, tid, m, t.owner, a, utc(c)))
        return out

    def entries(self, *, incoming: set[str], outgoing: set[str], tokens: set[str]) -> list[Entry]:
        """Pending entries processing one of `incoming`, or holding one of `outgoing` (message
        ids) or `tokens` (token ids) among their outgoing messages."""
        needles = sorted(outgoing | tokens)
        if not incoming and not needles:
            return []

        def build(c) -> tuple[list[exp.Expression], list[exp.Expression], list]:
            where, params = _any_in((c.incoming_message_id, incoming))
            for needle in needles:  # outgoing is JSON text: a LIKE narrows, the parse below decides
                where.append(sql.fragment(":c like %s", c=_text(c.outgoing)))
                params.append(f"%{needle}%")
            return ([_text(c.incoming_message_id), _text(c.incoming_token_id), _text(c.attempt_id),
                     sql.column(c.tokens_committed_at), sql.column(c.created_at), _text(c.outgoing)], where, params)

        out = []
        for table, (m, t, a, committed, created, outgoing_json) in self._query("outbox", build):
            try:
                messages = json.loads(outgoing_json) if outgoing_json else []
            except ValueError:
                messages = []
            if not isinstance(messages, list):
                messages = []
            messages = [x for x in messages if isinstance(x, dict)]
            holds = any(x.get("message_id") in outgoing or x.get("token_id") in tokens for x in messages)
            if m in incoming or holds:
                self._keep(table, m, endpoint=table.owner, incoming_message_id=m, incoming_token_id=t, attempt_id=a,
                           outgoing=outgoing_json, tokens_committed_at=utc(committed), created_at=utc(created))
                out.append(Entry(table.endpoint, m, t, a, utc(committed), utc(created), messages))
        return out

    def intents(self, *, incoming: set[str], refs: set[str]) -> list[Intent]:
        if not incoming and not refs:
            return []

        def build(c) -> tuple[list[exp.Expression], list[exp.Expression], list]:
            where, params = _any_in((c.incoming_message_id, incoming), (c.ref, refs))
            return ([_text(c.intent_id), _text(c.incoming_message_id), _text(c.attempt_id), sql.column(c.kind),
                     _text(c.ref), sql.column(c.created_at)], where, params)

        out = []
        for t, (i, m, a, k, r, c) in self._query("intents", build):
            self._keep(t, i, intent_id=i, endpoint=t.owner, incoming_message_id=m, attempt_id=a, kind=k, ref=r,
                       created_at=utc(c))
            out.append(Intent(t.endpoint, i, m, a, k, r, utc(c)))
        return out
