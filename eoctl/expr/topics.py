"""Topic checks (EO101-EO105) over the working copy (eoctl.expr.records), written once.

Each gives one expression with an `endpoint` column and the evidence columns of its code (as
the Spark checks in eoctl.checks.topics give them), split by endpoint into Hits. Full scans:
continuing from a recorded run's state (--since-last) is the engine's business (docs/engines.md).
EO106 (lines of a JSON archive that are not records) is in eoctl.expr.catalog: the reader names them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import ibis
from ibis import _

from eoctl.expr.functions import Dialect
from eoctl.expr.inputs import Hit, Scope
from eoctl.expr.outbox import pending_outgoing

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


def sequence_gaps(scope: Scope, records: ir.Table, dialect: Dialect) -> ir.Table:
    """EO104: missing sequence numbers between a producer's lowest and highest, except those that
    pending outbox entries hold (not sent yet: reported as stuck entries, EO301)."""
    prod = ["endpoint", "topic", "producer"]
    v = _valid(records)
    numbers = v.filter(v.producer.notnull() & v.seq.notnull()).select(*prod, "seq").distinct()
    after = numbers.mutate(_next=numbers.seq.lead().over(group_by=prod, order_by=numbers.seq))
    gaps = after.filter(after._next > after.seq + 1).select(
        *prod, missing_from=after.seq + 1, missing_to=after._next - 1)
    # by producer, not topic: archived topics are often renamed, the producer's name is not
    pending = pending_outgoing(scope, dialect)
    pending = pending.filter(pending.seq.notnull()).select(p_producer=pending.producer, p_seq=pending.seq).distinct()
    held = gaps.join(pending, (gaps.producer == pending.p_producer)
                     & pending.p_seq.between(gaps.missing_from, gaps.missing_to)).group_by(
        [*prod, "missing_from", "missing_to"]).aggregate(held=_.count())
    j = gaps.left_join(held, [*prod, "missing_from", "missing_to"])
    return j.filter(j.held.isnull() | (j.held < j.missing_to - j.missing_from + 1)).select(
        *prod, "missing_from", "missing_to", missing=j.missing_to - j.missing_from + 1)


def _per_endpoint(code: str, check: Callable[[Scope, ir.Table, Dialect], ir.Table],
                  ) -> Callable[[Scope, ir.Table, Dialect], Iterator[Hit]]:
    """A check over every audited input's records, split by endpoint."""
    def hits(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
        found = check(scope, records, dialect)
        for name, ep in scope.endpoints.items():
            if ep.input is not None:
                yield Hit(code, name, scope.topics(name), found.filter(found.endpoint == name).drop("endpoint"))
    return hits


#: record checks: one expression over every input's records (EO104 also reads pending entries)
RECORD_CHECKS: dict[str, Callable[[Scope, ir.Table, Dialect], ir.Table]] = {
    "EO101": lambda scope, records, dialect: redelivered_copies(records),
    "EO102": lambda scope, records, dialect: message_under_several_tokens(records),
    "EO103": lambda scope, records, dialect: sequence_on_several_messages(records),
    "EO104": sequence_gaps,
    "EO105": lambda scope, records, dialect: records_without_protocol(records),
}
CHECKS = {code: _per_endpoint(code, check) for code, check in RECORD_CHECKS.items()}
