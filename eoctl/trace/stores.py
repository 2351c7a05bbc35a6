"""Indexed lookups of one message in the stores (tokens, pending outbox entries, intents), read
straight from each store (no engine): a message has a handful of rows."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from eoctl.config.model import Config
from eoctl.stores import sql
from eoctl.stores.connection import connection_key
from eoctl.stores.db import Db, in_list, open_db
from eoctl.stores.layout import EndpointTable, StoreLayout
from eoctl.trace.blobs import blob_refs
from eoctl.trace.model import SHOWN_MESSAGES, Entry, Intent, TokenRow, utc

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


_BLANK = re.compile(r"[ \t\n\r]*")


def json_list_items(text: str) -> Iterator[Any]:
    """The items of the JSON list `text`, decoded one at a time (json.JSONDecoder.raw_decode reads
    one value where a longer text goes on); ValueError where `text` is not a JSON list."""
    decoder = json.JSONDecoder()
    at = _BLANK.match(text).end()
    if text[at:at + 1] != "[":
        raise ValueError("not a JSON list")
    at = _BLANK.match(text, at + 1).end()
    if text[at:at + 1] == "]":
        closed = at + 1
    else:
        while True:
            item, at = decoder.raw_decode(text, at)
            yield item
            at = _BLANK.match(text, at).end()
            if text[at:at + 1] == "]":
                closed = at + 1
                break
            if text[at:at + 1] != ",":
                raise ValueError(f"not a JSON list: {text[at:at + 1]!r} at {at}")
            at = _BLANK.match(text, at + 1).end()
    if _BLANK.match(text, closed).end() != len(text):
        raise ValueError("not a JSON list: text after its end")


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

        def wanted(x: dict[str, Any]) -> bool:
            m, t = x.get("message_id"), x.get("token_id")
            return (isinstance(m, str) and m in outgoing) or (isinstance(t, str) and t in tokens)

        out = []
        for table, (m, t, a, committed, created, outgoing_json) in self._query("outbox", build):
            entry = self._entry(table, m, t, a, utc(committed), utc(created), outgoing_json, wanted, whole=m in incoming)
            if m in incoming or any(wanted(x) for x in entry.outgoing):  # the wanted are always shown
                self._keep(table, m, endpoint=table.owner, incoming_message_id=m, incoming_token_id=t, attempt_id=a,
                           outgoing=outgoing_json, tokens_committed_at=utc(committed), created_at=utc(created))
                out.append(entry)
        return out

    def _entry(self, table: EndpointTable, m: str, t: str | None, a: str | None, committed: Any, created: Any,
               outgoing_json: str | None, wanted: Callable[[dict[str, Any]], bool], whole: bool) -> Entry:
        """The entry with the messages trace shows (every one, or past SHOWN_MESSAGES the `wanted`
        ones), read one message at a time: a batch job's entry of a million messages is 180 MB of
        JSON, 4 GB as Python objects at once. `whole`: also every message id and blob URI it holds
        (an entry processing a traced message). Text that is not a JSON list holds no message,
        and an item that is not an object is not a message."""
        blobs_header = self.config.protocol.headers.blobs
        shown: list[dict[str, Any]] = []
        ids: set[str | None] = set()
        uris: set[str] = set()
        count = 0
        try:
            for x in json_list_items(outgoing_json or "[]"):
                if not isinstance(x, dict):
                    continue
                count += 1
                if count <= SHOWN_MESSAGES or wanted(x):
                    shown.append(x)
                if whole:
                    message_id = x.get("message_id")  # one without an id is never seen sent
                    ids.add(message_id if isinstance(message_id, str) else None)
                    headers = x.get("headers")
                    uris |= {r["uri"] for r in blob_refs(headers.get(blobs_header) if isinstance(headers, dict) else None)}
        except ValueError:
            shown, ids, uris, count = [], set(), set(), 0
        if count > SHOWN_MESSAGES:
            shown = [x for x in shown if wanted(x)]
        return Entry(table.endpoint, m, t, a, committed, created, shown, count,
                     message_ids=frozenset(ids), blob_uris=frozenset(uris))

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
