"""Topic checks (EO101-EO103, EO105) over the working copy (eoctl.expr.records), written once.

Each returns one expression with an `endpoint` column and the evidence columns of its code (as
the Spark checks in eoctl.checks.topics give them); the runner splits it by endpoint. Full scans:
continuing from a recorded run's state (--since-last) is the engine's business (docs/engines.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ibis
from ibis import _

if TYPE_CHECKING:
    import ibis.expr.types as ir


def _valid(records: ir.Table) -> ir.Table:
    return records.filter(records.problem.isnull())


def _positions(t: ir.Table) -> ir.ArrayValue:
    """Each record's (partition, offset), sorted: where the copies are."""
    return ibis.struct({"partition": t.partition, "offset": t.offset}).collect().sort()


def redelivered_copies(records: ir.Table) -> ir.Table:
    """EO101: the same message id and token at more than one offset (harmless if handled)."""
    v = _valid(records)
    return v.group_by(["endpoint", "topic", "message_id", "token_id"]).aggregate(
        copies=_.count(), positions=_positions(v)).filter(_.copies > 1)


def message_under_several_tokens(records: ir.Table) -> ir.Table:
    """EO102: one logical message carried by two or more tokens: each token lets it through once."""
    v = _valid(records)
    return v.group_by(["endpoint", "topic", "message_id"]).aggregate(
        tokens=v.token_id.nunique(), token_ids=v.token_id.collect(distinct=True).sort(),
        positions=_positions(v)).filter(_.tokens > 1)


def sequence_on_several_messages(records: ir.Table) -> ir.Table:
    """EO103: PIP-6 (producer, sequence) reused by different message ids."""
    v = _valid(records)
    v = v.filter(v.producer.notnull() & v.seq.notnull())
    return v.group_by(["endpoint", "topic", "producer", "seq"]).aggregate(
        messages=v.message_id.nunique(), message_ids=v.message_id.collect(distinct=True).sort(),
        positions=_positions(v)).filter(_.messages > 1).rename(sequence="seq")


def records_without_protocol(records: ir.Table) -> ir.Table:
    """EO105: records the protocol cannot account for, with why. The message id is text only
    where it is UTF-8 (the working copy makes it NULL elsewhere)."""
    bad = records.filter(records.problem.notnull())
    return bad.select("endpoint", "topic", "partition", "offset", "problem", "message_id")


CHECKS = {
    "EO101": redelivered_copies,
    "EO102": message_under_several_tokens,
    "EO103": sequence_on_several_messages,
    "EO105": records_without_protocol,
}
