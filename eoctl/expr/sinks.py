"""Sink checks (EO501, EO502, EO503), written once over each sink's rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import ibis

from eoctl.expr.functions import Dialect, first_n, hash64, to_json
from eoctl.expr.inputs import Hit, Scope, store_table

if TYPE_CHECKING:
    import ibis.expr.types as ir


def _sinks(scope: Scope):
    for name, ep in scope.endpoints.items():
        for sink in ep.sinks:
            yield name, sink


def applied_twice(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO501: more than one sink row for one source message: its effect was applied twice. The
    messages are the kept applied_twice_view (messages_applied_twice)."""
    for name, sink in _sinks(scope):
        yield Hit(name, sink.name, ibis.table(ibis.schema(APPLIED_TWICE_SCHEMA),
                                                       name=applied_twice_view(scope, name, sink)))


#: EO501's evidence: a source message id with more than one row, and how many
APPLIED_TWICE_SCHEMA = {"source_message_id": "string", "rows": "int64"}


def applied_twice_view(scope: Scope, name: str, sink) -> str:
    return f"{scope.sink_view(name, sink)}_applied_twice"


def messages_applied_twice(scope: Scope) -> dict[str, ir.Table]:
    """Per sink, each source message id with more than one row, and how many. Kept by the engine
    before EO501 runs (catalog.shared_tables): an incremental audit keeps the same rows as a state
    for the next run (eoctl.expr.sink_states) without reading the sink again."""
    out = {}
    for name, sink in _sinks(scope):
        rows = scope.sink(name, sink)
        ids = rows.select(source_message_id=rows[sink.message_id_column].cast("string"))
        # a row without a source message id is not a copy of any message
        ids = ids.filter(ids.source_message_id.notnull())
        g = ids.group_by("source_message_id").aggregate(rows=ibis._.count().cast("int64"))
        out[applied_twice_view(scope, name, sink)] = g.filter(g.rows > 1)
    return out


def _keyed_sinks(scope: Scope):
    for name, sink in _sinks(scope):
        if sink.key_columns:
            yield name, sink


def _value_columns(rows: ir.Table, sink) -> list[str]:
    return sink.value_columns or [c for c in rows.columns if c not in sink.key_columns]


def differing_keys_view(scope: Scope, name: str, sink) -> str:
    return f"{scope.sink_view(name, sink)}_differing_keys"


def differing_keys(scope: Scope, dialect: Dialect) -> dict[str, ir.Table]:
    """Per sink with key columns, the keys whose rows hold more than one value, by a cheap
    aggregate of the values' hash (eoctl.expr.functions.hash64; with the null flags, as Spark's
    hash skips null fields): usually few. Kept by the engine before EO502 runs (catalog.
    shared_tables), so that on Spark the sink's rows meet them in a broadcast join, streamed
    once, instead of being shuffled for it."""
    out = {}
    for name, sink in _keyed_sinks(scope):
        rows = scope.sink(name, sink)
        values = _value_columns(rows, sink)
        h = hash64(ibis.struct({**{c: rows[c] for c in values},
                                **{f"_null_{i}": rows[c].isnull() for i, c in enumerate(values)}}), dialect)
        differ = rows.group_by(list(sink.key_columns)).aggregate(_lo=h.min(), _hi=h.max())
        out[differing_keys_view(scope, name, sink)] = differ.filter(differ._lo != differ._hi).drop("_lo", "_hi")
    return out


def conflicting_values(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO502: one idempotency key with different values (value_columns; default all other
    columns); `values` lists up to five of them, as JSON, sorted. The keys to look at are the kept
    differing_keys; the values are written as JSON, counted and listed for those keys only."""
    for name, sink in _keyed_sinks(scope):
        rows = scope.sink(name, sink)
        keys = list(sink.key_columns)
        values = _value_columns(rows, sink)
        differ = ibis.table(rows.select(keys).schema(), name=differing_keys_view(scope, name, sink))
        # null-safe: a NULL key is a group of its own, as in the aggregate
        flagged = rows.semi_join(differ, [rows[k].identical_to(differ[k]) for k in keys])
        flagged = flagged.mutate(_value=to_json(ibis.struct({c: flagged[c] for c in values}), dialect))
        g = flagged.group_by(keys).aggregate(
            distinct_values=flagged._value.nunique(),
            values=first_n(flagged._value.collect(distinct=True).sort(), 5, dialect))
        # values that differ only where JSON does not show it (a time's digits past what the
        # engine writes) are one value, as the report shows them
        g = g.filter(g.distinct_values > 1)
        yield Hit(name, sink.name, g)


def every_message_sinks(scope: Scope):
    for name, sink in _sinks(scope):
        if sink.every_message:
            yield name, sink


def effect_endpoints(scope: Scope) -> list[str]:
    """The judged endpoints with a sink that must hold every message (EO503's)."""
    return sorted({name for name, _ in every_message_sinks(scope)})


def _processed(records: ir.Table, endpoints: list[str]) -> ir.Table:
    """The processed copies EO503 judges: of `endpoints`, below the committed offset, with
    protocol headers."""
    return records.filter(records.endpoint.isin(endpoints) & records.processed & records.message_id.notnull()
                          & records.problem.isnull())


def _effects(scope: Scope, name: str, sink) -> ir.Table:
    rows = scope.sink(name, sink)
    effects = rows.select(_effect=rows[sink.message_id_column].cast("string"))
    return effects.filter(effects._effect.notnull()).distinct()


#: the kept table of processed_per_hour, and its columns (the `effect_hours` state's)
EFFECT_HOURS = "effect_hours"
EFFECT_HOURS_SCHEMA = {"endpoint": "string", "hour": "timestamp", "messages": "int64"}
#: a `without_effect_view`'s columns
WITHOUT_EFFECT_SCHEMA = {"message_id": "string"}


def processed_per_hour(scope: Scope, records: ir.Table, before=None, kept: ir.Table | None = None) -> ir.Table:
    """Per endpoint with a sink that must hold every message and per hour of record time, how many
    messages have a processed copy in it (EO503's `hour_processed`). Continuing (`before`, a
    function of a table giving True for the indexed copies the recorded run had processed, and
    `kept`, its counts): its counts, plus the messages of `records` with a copy processed since
    in an hour where they had none then. `records` must then hold every record of each message
    processed since (eoctl.expr.incremental)."""
    r = _processed(records, effect_endpoints(scope))
    r = r.select("endpoint", "message_id", hour=r.timestamp.truncate("h"),
                 _old=before(r) if before is not None else ibis.literal(False))
    if before is None:
        return _distinct_per_hour(r.select("endpoint", "hour", "message_id"), ["endpoint", "hour"], "messages")
    per = r.group_by(["endpoint", "hour", "message_id"]).aggregate(_old=r._old.any())
    per = per.filter(~per._old)
    added = per.group_by(["endpoint", "hour"]).aggregate(messages=per.count().cast("int64"))
    both = kept.select(*EFFECT_HOURS_SCHEMA).union(added)
    return both.group_by(["endpoint", "hour"]).aggregate(messages=both.messages.sum().cast("int64"))


def _distinct_per_hour(t: ir.Table, by: list[str], name: str) -> ir.Table:
    """How many distinct message ids `t` holds per `by`, as two aggregates: DuckDB's count of
    distinct values keeps each group's values in memory (an audit of 100M records ran out of
    1.5 GB), where a grouping of every (hour, message) spills to disk."""
    pairs = t.distinct()
    return pairs.group_by(by).aggregate(**{name: pairs.count().cast("int64")})


def without_effect_view(scope: Scope, name: str, sink) -> str:
    return f"{scope.sink_view(name, sink)}_without_effect"


def messages_without_effect(scope: Scope, records: ir.Table) -> dict[str, ir.Table]:
    """Per sink that must hold every message, the messages its endpoint processed (of `records`)
    with no row in it, pending or not: kept by the engine before EO503 runs in a run that keeps
    states, EO503's and the next run's (eoctl.expr.sink_states)."""
    out = {}
    for name, sink in every_message_sinks(scope):
        r = _processed(records, [name]).select("message_id").distinct()
        effects = _effects(scope, name, sink)
        out[without_effect_view(scope, name, sink)] = r.anti_join(effects, r.message_id == effects._effect)
    return out


def missing_effects(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO503: a message the endpoint processed (a copy below its committed offset, with protocol
    headers) without a row in a sink that must hold every message (`every_message`): its effect is
    lost downstream. Each message once, at its first processed copy (record time, then topic,
    partition, offset), with the counts of that hour of record time beside it, so an operator sees
    when it started: the messages processed in it (a processed copy's record time falls in it), those
    with a row, those missing. A message whose pending outbox entry is still in progress is not
    judged (counted as processed only). Messages EO202 names are in flight, never processed, and
    records without headers (EO105) carry no id.

    Only the copies without a row are ranked and counted per message (few); the processed copies
    are read once more for the hours that have a missing message, as counts. In a run that keeps
    states (scope.kept_effects), the messages without a row and the hours' counts are the kept
    tables of messages_without_effect and processed_per_hour."""
    outbox = store_table("outbox")
    for name, sink in every_message_sinks(scope):
        r = _processed(records, [name])
        r = r.select("message_id", "topic", "partition", "offset", "timestamp", hour=r.timestamp.truncate("h"))
        if scope.kept_effects:
            ids = ibis.table(ibis.schema(WITHOUT_EFFECT_SCHEMA), name=without_effect_view(scope, name, sink))
            without = r.semi_join(ids, r.message_id == ids.message_id)
        else:
            effects = _effects(scope, name, sink)
            without = r.anti_join(effects, r.message_id == effects._effect)
        missing = without
        if scope.has(name, "outbox"):
            entries = outbox.filter(outbox.ep == name)
            entries = entries.select(_entry=entries.incoming_message_id).distinct()
            missing = without.anti_join(entries, without.message_id == entries._entry)
        ranked = missing.mutate(_rank=ibis.row_number().over(
            group_by="message_id", order_by=[missing.timestamp, missing.topic, missing.partition, missing.offset]))
        first = ranked.filter(ranked._rank == 0).drop("_rank")
        hours = first.select(_hour=first.hour).distinct()
        if scope.kept_effects:
            kept = ibis.table(ibis.schema(EFFECT_HOURS_SCHEMA), name=EFFECT_HOURS)
            processed = kept.filter(kept.endpoint == name).select("hour", hour_processed=kept.messages)
        else:
            seen = r.semi_join(hours, r.hour == hours._hour)
            processed = _distinct_per_hour(seen.select("hour", "message_id"), ["hour"], "hour_processed")
        no_row = without.group_by("hour").aggregate(_no_row=without.message_id.nunique())
        lost = missing.group_by("hour").aggregate(hour_missing=missing.message_id.nunique())
        counts = processed.join(no_row, "hour").join(lost, "hour")
        counts = counts.select(_h=counts.hour, hour_processed=counts.hour_processed,
                               hour_with_effect=counts.hour_processed - counts._no_row,
                               hour_missing=counts.hour_missing)
        found = first.join(counts, first.hour == counts._h).select(
            "message_id", "topic", "partition", "offset", "timestamp", "hour", "hour_processed", "hour_with_effect",
            "hour_missing")
        yield Hit(name, sink.name, found)
