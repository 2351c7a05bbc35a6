"""Token checks (EO201-EO204), read-only: the token store against the records and pending
entries, written once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import ibis

from eoctl.expr.functions import Dialect
from eoctl.expr.inputs import Hit, Scope, log_starts_table, store_table
from eoctl.expr.outbox import referenced_tokens

if TYPE_CHECKING:
    import ibis.expr.types as ir


def _valid(records: ir.Table) -> ir.Table:
    """Records that carry a token: a readable token id, whatever other header problems the record
    has (EO105's): the receiver's dedup reads the token id alone, so such a record is processed or
    dropped by its token as any other (eoctl.expr.reconcile counts it the same way)."""
    return records.filter(records.token_id.notnull())


def _tokens(scope: Scope) -> Iterator[tuple[str, ir.Table]]:
    tokens = store_table("tokens")
    for name in scope.endpoints:
        if scope.has(name, "tokens"):
            yield name, tokens.filter(tokens.ep == name).drop("ep")


def _registered(scope: Scope, kind: str, key: str, endpoint: str | None = None) -> ir.Table | None:
    """register-cleanup evidence: which incoming message and attempt registered a token or blob
    (the first intent by id, when several name it); `endpoint`: only its own intents (a blob is
    registered in its producer's store; a token in its sender's, any endpoint)."""
    if not scope.has_any("intents"):
        return None
    intents = store_table("intents")
    i = intents.filter(intents.kind == kind)
    if endpoint is not None:
        i = i.filter(i.ep == endpoint)
    return i.group_by(i.ref).aggregate(registered_by_message=i.incoming_message_id.argmin(i.intent_id),
                                       registered_by_attempt=i.attempt_id.argmin(i.intent_id)).rename(**{key: "ref"})


def orphan_tokens(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO201: a token on no record, in no pending entry, older than the grace period (gc candidate).
    Young tokens are not findings: their message may still be on its way."""
    carried = _valid(records).select("token_id")
    held = referenced_tokens(scope, dialect)
    registered = _registered(scope, "token", "token_id")
    for name, tokens in _tokens(scope):
        old = tokens.filter(tokens.created_at < scope.ago(scope.options.grace))
        orphans = old.anti_join(carried, "token_id").anti_join(held, "token_id").select(
            "token_id", "message_id", "created_at", "attempt_id")
        if registered is not None:
            orphans = orphans.left_join(registered, "token_id").drop("token_id_right")
        yield Hit(name, scope.config.endpoints[name].tokens.table, orphans)


def silent_loss(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO202: an in-flight record whose token is gone and whose effect exists nowhere: the endpoint
    will drop it as a duplicate. A copy of an already processed message is not a loss."""
    outbox = store_table("outbox")
    valid = _valid(records)
    for name, tokens in _tokens(scope):
        ep = scope.endpoints[name]
        mine = valid.filter(valid.endpoint == name)
        lost = mine.filter(~mine.processed).anti_join(tokens, "token_id").select(
            "topic", "partition", "offset", "message_id", "token_id", "committed")
        lost = lost.anti_join(mine.filter(mine.processed).select("message_id"), "message_id")
        if scope.has(name, "outbox"):  # an entry in progress is a stuck entry (EO301), not a loss
            entries = outbox.filter(outbox.ep == name)
            lost = lost.anti_join(entries.select(message_id=entries.incoming_message_id), "message_id")
        for sink in ep.sinks:
            rows = scope.sink(name, sink)
            ids = rows.select(message_id=rows[sink.message_id_column].cast("string"))
            # the sink's rows of these messages first (a semi join the few ids are the build side
            # of), then the anti join against those: Spark cannot build an anti join on its left
            # side, and shuffled every sink row to meet a few in-flight ids
            lost = lost.anti_join(ids.semi_join(lost.select("message_id"), "message_id"), "message_id")
        yield Hit(name, scope.topics(name), lost)


def leaked_tokens(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO203: the token of a processed record is still in the store (and no pending entry holds
    it). A token several processed records carry is reported once, with the first of them."""
    held = referenced_tokens(scope, dialect)
    valid = _valid(records)
    for name, tokens in _tokens(scope):
        mine = valid.filter((valid.endpoint == name) & valid.processed)
        j = mine.select("token_id", "message_id", "topic", "partition", "offset").join(
            tokens.select("token_id", "created_at", "attempt_id"), "token_id")
        first = j.mutate(_rank=ibis.row_number().over(group_by="token_id", order_by=[j.topic, j.partition, j.offset]))
        leaked = first.filter(first._rank == 0).select(
            "token_id", "created_at", "attempt_id", "message_id", "topic", "partition", "offset",
        ).anti_join(held, "token_id")
        yield Hit(name, scope.config.endpoints[name].tokens.table, leaked)


def committed_below_log_start(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO204: the consumer's committed offset is below the first offset the log still has."""
    from eoctl.expr.records import commits_table

    starts, commits = log_starts_table(), commits_table()
    j = commits.join(starts, [commits.c_endpoint == starts.ep, commits.c_topic == starts.topic,
                              commits.c_partition == starts.partition])
    lost = j.filter(j.committed < j.log_start).select(
        "ep", topic=j.c_topic, partition=j.c_partition, committed=j.committed, log_start=j.log_start,
        records_lost=j.log_start - j.committed)
    for name, ep in scope.endpoints.items():
        if ep.input is not None:
            yield Hit(name, scope.topics(name), lost.filter(lost.ep == name).drop("ep"))
