"""The transaction checks: what the broker says of a live input's open transactions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from eoctl.expr.functions import Dialect
from eoctl.expr.inputs import Hit, Scope

if TYPE_CHECKING:
    import ibis.expr.types as ir


def hanging_transactions(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """A live input's partition whose last stable offset has stayed behind its high watermark for
    longer than the transaction timeout (the engine asks the broker)."""
    from eoctl.expr.inputs import transactions_table

    t = transactions_table()
    for name, ep in scope.endpoints.items():
        if ep.input is not None and ep.input.kafka:
            yield Hit(name, scope.topics(name), t.filter(t.ep == name).drop("ep"))
