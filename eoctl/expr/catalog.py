"""Every check of the catalog (eoctl.report.findings.CATALOG) as Ibis expressions: code -> a
function of (Scope, records, Dialect) giving Hits. What an engine runs to audit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from eoctl.expr import blobs, outbox, sinks, tokens, topics
from eoctl.expr.functions import Dialect
from eoctl.expr.inputs import Hit, Scope

if TYPE_CHECKING:
    import ibis.expr.types as ir

Check = Callable[[Scope, "ir.Table", Dialect], Iterator[Hit]]


def _reader_checks(code: str) -> Check:
    """EO106 and EO601 come from what the engine's readers saw (lines of a JSON archive that are
    not records; a broker's transaction state), not from a query over tables: the engine runs
    them itself (see its `reader_findings`)."""
    def none(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
        return iter(())
    none.__doc__ = f"{code}: found by the engine's readers"
    return none


CHECKS: dict[str, Check] = {
    **topics.CHECKS,
    "EO106": _reader_checks("EO106"),
    "EO201": tokens.orphan_tokens,
    "EO202": tokens.silent_loss,
    "EO203": tokens.leaked_tokens,
    "EO204": tokens.committed_below_log_start,
    "EO301": outbox.stuck_entries,
    "EO302": outbox.ghost_messages,
    "EO401": blobs.orphan_blobs,
    "EO402": blobs.dangling_references,
    "EO403": blobs.hash_mismatches,
    "EO501": sinks.applied_twice,
    "EO502": sinks.conflicting_values,
    "EO601": _reader_checks("EO601"),
}
