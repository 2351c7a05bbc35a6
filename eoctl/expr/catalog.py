"""Every check of the catalog (eoctl.findings.CATALOG) as Ibis expressions, derived from the
declarations: code -> the function its CodeInfo.check names, of (Scope, records, Dialect) giving
Hits; and the tables several checks share (SHARED). What an engine runs to audit."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from eoctl.expr import sinks, topics
from eoctl.expr.functions import Dialect
from eoctl.expr.inputs import Hit, Scope
from eoctl.findings import CATALOG

if TYPE_CHECKING:
    import ibis.expr.types as ir

    from eoctl.expr.incremental import Continuation

Check = Callable[[Scope, "ir.Table", Dialect], Iterator[Hit]]


def _resolve(path: str) -> Check:
    """`module.function` of eoctl.expr."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(f"eoctl.expr.{module}"), name)


CHECKS: dict[str, Check] = {code: _resolve(info.check) for code, info in CATALOG.items()}

#: (the check's scope, its records, dialect, the continuation or None) -> tables by name
SharedBuild = Callable[[Scope, "ir.Table", Dialect, "Continuation | None"], "dict[str, ir.Table]"]


def _effect_states(scope: Scope, records: ir.Table, dialect: Dialect, c: Continuation | None) -> dict[str, ir.Table]:
    """What the incremental EO503 reads and the next run's states hold (eoctl.expr.incremental):
    each hour's processed messages and the messages without a row, per sink. Nothing in a full audit."""
    if c is None or not sinks.effect_endpoints(scope):
        return {}
    return {sinks.EFFECT_HOURS: c.effect_hours(scope), **c.without_effect(scope)}


#: the tables several checks read besides their inputs (CodeInfo.shared), computed once per run in
#: this order (a later one may read an earlier one), each over the records and scope of the first
#: selected check that reads it
SHARED: dict[str, SharedBuild] = {
    "repeated_keys": lambda scope, records, dialect, c: {"repeated_keys": topics.repeated_keys(records, dialect)},
    "repeated_messages": lambda scope, records, dialect, c: {
        "repeated_messages": topics.repeated_messages(records, dialect)},
    "reused_sequence_keys": lambda scope, records, dialect, c: {
        "reused_sequence_keys": topics.reused_sequence_keys(records, dialect)},
    # continued from the kept ranges (Continuation.ranges), not rebuilt from a family
    "sequence_ranges": lambda scope, records, dialect, c: {
        "sequence_ranges": c.ranges(dialect) if c is not None else topics.sequence_ranges(records, dialect)},
    # over the rows the check reads (eoctl.expr.sink_states)
    "messages_applied_twice": lambda scope, records, dialect, c: sinks.messages_applied_twice(scope),
    "differing_keys": lambda scope, records, dialect, c: sinks.differing_keys(scope, dialect),
    "effect_states": _effect_states,
}


def shared_tables(codes: list[str], scope: Scope, records: ir.Table, dialect: Dialect,
                  continuation: Continuation | None = None) -> dict[str, ir.Table]:
    """The tables the checks of `codes` read besides their inputs (SHARED), by name: an engine
    computes each once (EngineRun.keep) before running the checks. With a `continuation`
    (eoctl.expr.incremental), each over its check's family of records and narrowed scope."""
    out: dict[str, ir.Table] = {}
    for name, build in SHARED.items():
        code = next((c for c in codes if name in CATALOG[c].shared), None)
        if code is None:
            continue
        if continuation is None:
            out.update(build(scope, records, dialect, None))
        else:
            out.update(build(continuation.scope_for(code, scope), continuation.records_of(code), dialect, continuation))
    return out
