"""Sink checks (EO501, EO502), written once over each sink's rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import ibis

from eoctl.expr.functions import Dialect, first_n, to_json
from eoctl.expr.inputs import Hit, Scope

if TYPE_CHECKING:
    import ibis.expr.types as ir


def _sinks(scope: Scope):
    for name, ep in scope.endpoints.items():
        for sink in ep.sinks:
            yield name, sink


def applied_twice(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO501: more than one sink row for one source message: its effect was applied twice."""
    for name, sink in _sinks(scope):
        rows = scope.sink(name, sink)
        g = rows.group_by(source_message_id=rows[sink.message_id_column].cast("string")).aggregate(
            rows=ibis._.count())
        yield Hit("EO501", name, sink.name, g.filter(g.rows > 1))


def conflicting_values(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO502: one idempotency key with different values (value_columns; default all other
    columns); `values` lists up to five of them, as JSON, sorted."""
    for name, sink in _sinks(scope):
        if not sink.key_columns:
            continue
        rows = scope.sink(name, sink)
        values = sink.value_columns or [c for c in rows.columns if c not in sink.key_columns]
        value = ibis.struct({c: rows[c] for c in values})
        g = rows.group_by(sink.key_columns).aggregate(
            distinct_values=value.nunique(),
            values=first_n(to_json(value, dialect).collect(distinct=True).sort(), 5, dialect))
        yield Hit("EO502", name, sink.name, g.filter(g.distinct_values > 1))
