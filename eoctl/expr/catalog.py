"""Every check of the catalog (eoctl.findings.CATALOG) as Ibis expressions: code -> a
function of (Scope, records, Dialect) giving Hits. What an engine runs to audit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from eoctl.expr import blobs, outbox, sinks, tokens, topics
from eoctl.expr.functions import Dialect
from eoctl.expr.inputs import Hit, Scope

if TYPE_CHECKING:
    import ibis.expr.types as ir

    from eoctl.expr.incremental import Continuation

Check = Callable[[Scope, "ir.Table", Dialect], Iterator[Hit]]


def undecodable_archive_lines(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO106: lines of a JSON topic archive that are not records, so no other check saw them (the
    engine's reader names them by file and line). They have no offset to place them in a range or
    an index, so every audit reads the archive's lines again until the file is repaired."""
    from eoctl.expr.inputs import undecodable_table

    t = undecodable_table()
    for name, ep in scope.endpoints.items():
        if ep.input is not None and ep.input.archive and ep.input.archive_format == "json":
            yield Hit("EO106", name, ep.input.archive, t.filter(t.ep == name).drop("ep").order_by("file", "line"))


def hanging_transactions(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO601: a live input's partition whose last stable offset has stayed behind its high
    watermark for longer than the transaction timeout (the engine asks the broker)."""
    from eoctl.expr.inputs import transactions_table

    t = transactions_table()
    for name, ep in scope.endpoints.items():
        if ep.input is not None and ep.input.kafka:
            yield Hit("EO601", name, scope.topics(name), t.filter(t.ep == name).drop("ep"))


CHECKS: dict[str, Check] = {
    **topics.CHECKS,
    "EO106": undecodable_archive_lines,
    "EO201": tokens.orphan_tokens,
    "EO202": tokens.silent_loss,
    "EO203": tokens.leaked_tokens,
    "EO204": tokens.committed_below_log_start,
    "EO301": outbox.stuck_entries,
    "EO302": outbox.ghost_messages,
    "EO303": outbox.sent_past_retention,
    "EO401": blobs.orphan_blobs,
    "EO402": blobs.dangling_references,
    "EO403": blobs.hash_mismatches,
    "EO501": sinks.applied_twice,
    "EO502": sinks.conflicting_values,
    "EO503": sinks.missing_effects,
    "EO601": hanging_transactions,
}


def shared_tables(codes: list[str], scope: Scope, records: ir.Table, dialect: Dialect,
                  continuation: Continuation | None = None) -> dict[str, ir.Table]:
    """The tables the checks of `codes` read besides their inputs (topics.SHARED, EO502's differing
    keys), by name: an engine computes each once (EngineRun.keep) before running the checks. With a
    `continuation` (eoctl.expr.incremental), each over its checks' records, and EO104's ranges
    continued from the kept ones."""
    out = {}
    for name, (users, build) in topics.SHARED.items():
        if not set(users) & set(codes):
            continue
        if continuation is None:
            out[name] = build(records, dialect)
        elif name == "sequence_ranges":
            out[name] = continuation.ranges(dialect)
        else:
            out[name] = build(continuation.records_of(users[0]), dialect)
    if "EO501" in codes:  # over the rows EO501 reads (eoctl.expr.sink_states)
        out.update(sinks.messages_applied_twice(continuation.scope_for("EO501", scope) if continuation else scope))
    if "EO502" in codes:  # over the rows EO502 reads (eoctl.expr.sink_states)
        out.update(sinks.differing_keys(continuation.scope_for("EO502", scope) if continuation else scope, dialect))
    if "EO503" in codes and continuation is not None and sinks.effect_endpoints(scope):
        # what EO503 reads and the next run's states hold (eoctl.expr.incremental)
        out[sinks.EFFECT_HOURS] = continuation.effect_hours(scope)
        out.update(continuation.without_effect(scope))
    return out
