"""Topic checks (EO101-EO105) over the working copy (eoctl.expr.records), written once.

Each gives one expression with an `endpoint` column and the evidence columns of its code, split
by endpoint into Hits. Full scans over every record (with --since-last, the record index's and the
new ones).
EO106 (lines of a JSON archive that are not records) is in eoctl.expr.catalog: the reader names them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import ibis
from ibis import _

from eoctl.expr.functions import Dialect, bit_or, keys_of_several
from eoctl.expr.inputs import Hit, Scope
from eoctl.expr.outbox import pending_outgoing

if TYPE_CHECKING:
    import ibis.expr.types as ir


#: a 32-bit word of EO104's bitmaps with every bit set (number_runs)
_FULL_WORD = (1 << 32) - 1


def _valid(records: ir.Table) -> ir.Table:
    return records.filter(records.problem.isnull())


def _positions(t: ir.Table) -> ir.ArrayValue:
    """Each record's (partition, offset), sorted: where the copies are."""
    return ibis.struct({"partition": t.partition, "offset": t.offset}).collect().sort()


_MESSAGE = ["endpoint", "topic", "message_id"]


def repeated_keys(records: ir.Table, dialect: Dialect) -> ir.Table:
    """(endpoint, topic, message_id) of every message with more than one valid record: the only
    ones EO101 (copies of one token) and EO102 (several tokens) can flag, usually few."""
    return keys_of_several(_valid(records), _MESSAGE, dialect)


def repeated_messages(records: ir.Table, dialect: Dialect) -> ir.Table:
    """The valid records of the repeated messages. A table of its own, computed after
    repeated_keys: the engine then knows how few keys there are (Spark broadcasts them instead of
    shuffling every record to meet them)."""
    keys = ibis.table(ibis.schema({c: "string" for c in _MESSAGE}), name="repeated_keys")
    return _valid(records).semi_join(keys, _MESSAGE)


def _repeated(records: ir.Table) -> ir.Table:
    """The run's `repeated_messages` table."""
    return ibis.table(records.schema(), name="repeated_messages")


def redelivered_copies(records: ir.Table, dialect: Dialect) -> ir.Table:
    """EO101: the same message id and token at more than one offset (harmless if handled)."""
    v = _repeated(records)
    return v.group_by([*_MESSAGE, "token_id"]).aggregate(
        copies=_.count(), positions=_positions(v)).filter(_.copies > 1)


def message_under_several_tokens(records: ir.Table, dialect: Dialect) -> ir.Table:
    """EO102: one logical message carried by two or more tokens: each token lets it through once."""
    v = _repeated(records)
    return v.group_by(_MESSAGE).aggregate(
        tokens=v.token_id.nunique(), token_ids=v.token_id.collect(distinct=True).sort(),
        positions=_positions(v)).filter(_.tokens > 1)


_SEQUENCE = ["endpoint", "topic", "producer", "seq"]


def _sequenced(records: ir.Table) -> ir.Table:
    v = _valid(records)
    return v.filter(v.producer.notnull() & v.seq.notnull())


def reused_sequence_keys(records: ir.Table, dialect: Dialect) -> ir.Table:
    """(endpoint, topic, producer, seq) carried by more than one message id: a cheap aggregate
    (min != max of the ids' hash64), usually few keys; EO103's evidence is built for these only."""
    return keys_of_several(_sequenced(records), _SEQUENCE, dialect, values="message_id")


def sequence_on_several_messages(records: ir.Table, dialect: Dialect) -> ir.Table:
    """EO103: PIP-6 (producer, sequence) reused by different message ids."""
    keys = ibis.table(ibis.schema({"endpoint": "string", "topic": "string", "producer": "string", "seq": "int64"}),
                      name="reused_sequence_keys")
    v = _sequenced(records).semi_join(keys, _SEQUENCE)
    return v.group_by(_SEQUENCE).aggregate(
        messages=v.message_id.nunique(), message_ids=v.message_id.collect(distinct=True).sort(),
        positions=_positions(v)).rename(sequence="seq")


def records_without_protocol(records: ir.Table) -> ir.Table:
    """EO105: records the protocol cannot account for, with why. The message id is text only
    where it is UTF-8 (the working copy makes it NULL elsewhere)."""
    bad = records.filter(records.problem.notnull())
    return bad.select("endpoint", "topic", "partition", "offset", "problem", "message_id")


_PRODUCER = ["endpoint", "topic", "producer"]
RANGES_SCHEMA = {"endpoint": "string", "topic": "string", "producer": "string", "lo": "int64", "hi": "int64"}


def number_runs(records: ir.Table, dialect: Dialect) -> ir.Table:
    """Each producer's sequence numbers as ranges [lo, hi], overlapping or adjacent ones not yet
    joined (coalesce_ranges): the numbers folded into 32-bit words (a hash aggregate of fixed-width
    bit_or, no sort of every number); a full word is one range, any other word a range per number
    it holds. The window that joins them then runs over about a 32nd of the numbers (a window over
    every number would be one task per producer)."""
    v = _valid(records)
    numbers = v.filter(v.producer.notnull() & v.seq.notnull()).select(*_PRODUCER, "seq")
    words = numbers.group_by([*_PRODUCER, numbers.seq >> 5]).aggregate(
        _bits=bit_or(ibis.literal(1, "int32").cast("int64") << (numbers.seq & 31)))
    words = words.rename(_word=words.columns[3])
    full = words._bits == _FULL_WORD
    present = ibis.ifelse(full, ibis.literal([0], type="array<int64>"),
                          ibis.range(0, 32).cast("array<int64>").filter(lambda i: ((words._bits >> i) & 1) == 1))
    kept = words.select(*_PRODUCER, _full=full, _word=words._word, _at=present.unnest())
    lo = kept._word * 32 + kept._at
    return kept.select(*_PRODUCER, lo=lo, hi=ibis.ifelse(kept._full, lo + 31, lo))


def coalesce_ranges(ranges: ir.Table) -> ir.Table:
    """Ranges [lo, hi] per producer joined where they overlap or touch: the fewest ranges that
    hold the same numbers. Also how a run's new numbers join the ranges an earlier run kept
    (eoctl.expr.incremental)."""
    before = ranges.mutate(_reach=ranges.hi.max().over(
        ibis.window(group_by=_PRODUCER, order_by=[ranges.lo, ranges.hi], rows=(None, -1))))
    starts = before.mutate(_start=ibis.ifelse(before._reach.isnull() | (before.lo > before._reach + 1), 1, 0))
    runs = starts.mutate(_run=starts._start.sum().over(
        ibis.cumulative_window(group_by=_PRODUCER, order_by=[starts.lo, starts.hi])))
    return runs.group_by([*_PRODUCER, "_run"]).aggregate(lo=runs.lo.min(), hi=runs.hi.max()).drop("_run")


def sequence_ranges(records: ir.Table, dialect: Dialect) -> ir.Table:
    """Each producer's sequence numbers as the fewest ranges: what EO104 reads (its gaps lie
    between them), and what an incremental audit keeps of the numbers."""
    return coalesce_ranges(number_runs(records, dialect))


def missing_sequences(scope: Scope, records: ir.Table, dialect: Dialect) -> ir.Table:
    """EO104: missing sequence numbers between a producer's lowest and highest (between its kept
    `sequence_ranges`), except those that pending outbox entries hold (not sent yet: reported as
    stuck entries, EO301)."""
    prod = _PRODUCER
    ranges = ibis.table(ibis.schema(RANGES_SCHEMA), name="sequence_ranges")
    after = ranges.mutate(_next=ranges.lo.lead().over(group_by=prod, order_by=ranges.lo))
    gaps = after.filter(after._next.notnull()).select(*prod, missing_from=after.hi + 1, missing_to=after._next - 1)
    # by producer, not topic: archived topics are often renamed, the producer's name is not
    pending = pending_outgoing(scope, dialect)
    pending = pending.filter(pending.seq.notnull()).select(p_producer=pending.producer, p_seq=pending.seq).distinct()
    held = gaps.join(pending, (gaps.producer == pending.p_producer)
                     & pending.p_seq.between(gaps.missing_from, gaps.missing_to)).group_by(
        [*prod, "missing_from", "missing_to"]).aggregate(held=_.count())
    j = gaps.left_join(held, [*prod, "missing_from", "missing_to"])
    return j.filter(j.held.isnull() | (j.held < j.missing_to - j.missing_from + 1)).select(
        *prod, "missing_from", "missing_to", missing=j.missing_to - j.missing_from + 1)


def _per_endpoint(check: Callable[[Scope, ir.Table, Dialect], ir.Table],
                  ) -> Callable[[Scope, ir.Table, Dialect], Iterator[Hit]]:
    """A check over every audited input's records, split by endpoint."""
    def hits(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
        found = check(scope, records, dialect)
        for name, ep in scope.endpoints.items():
            if ep.input is not None:
                yield Hit(name, scope.topics(name), found.filter(found.endpoint == name).drop("endpoint"))
    hits.__doc__ = check.__doc__
    return hits


# the record checks (eoctl.findings.CodeInfo.check names them): one expression over every input's
# records, split by endpoint
@_per_endpoint
def redelivered(scope: Scope, records: ir.Table, dialect: Dialect) -> ir.Table:
    return redelivered_copies(records, dialect)


@_per_endpoint
def under_several_tokens(scope: Scope, records: ir.Table, dialect: Dialect) -> ir.Table:
    return message_under_several_tokens(records, dialect)


@_per_endpoint
def sequence_reused(scope: Scope, records: ir.Table, dialect: Dialect) -> ir.Table:
    return sequence_on_several_messages(records, dialect)


sequence_gaps = _per_endpoint(missing_sequences)  # EO104 also reads pending entries


@_per_endpoint
def without_protocol(scope: Scope, records: ir.Table, dialect: Dialect) -> ir.Table:
    return records_without_protocol(records)


def undecodable_archive_lines(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """Lines of a JSON topic archive that are not records, so no other check saw them (the
    engine's reader names them by file and line). They have no offset to place them in a range or
    an index, so every audit reads the archive's lines again until the file is repaired."""
    from eoctl.expr.inputs import undecodable_table

    t = undecodable_table()
    for name, ep in scope.endpoints.items():
        if ep.input is not None and ep.input.archive and ep.input.archive_format == "json":
            yield Hit(name, ep.input.archive, t.filter(t.ep == name).drop("ep").order_by("file", "line"))
