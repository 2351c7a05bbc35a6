"""Outbox checks (EO301, EO302, EO303) and what other checks read of pending entries, written once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import ibis

from eoctl.expr.functions import (
    Dialect,
    blob_refs,
    keys_of_several,
    outgoing_messages,
    whole_seconds_since,
)
from eoctl.expr.inputs import Hit, Scope, store_table

if TYPE_CHECKING:
    import ibis.expr.types as ir


#: the table an engine keeps of pending_outgoing_rows once per run (EngineRun.keep; Scope.kept_pending)
PENDING_OUTGOING = "pending_outgoing"
#: a pending entry holding more outgoing messages than this is named in the run's notes
LARGE_ENTRY = 100_000
#: a pending entry whose `outgoing` text is longer than this (characters; about 4,500 messages) is
#: read by the engine's streaming JSON reader where it has one (EngineRun.stream_outgoing), into:
STREAMED_OUTGOING = "pending_outgoing_streamed"
STREAMED_ENTRY = 1_000_000


def pending_outgoing(scope: Scope, dialect: Dialect) -> ir.Table:
    """pending_outgoing_rows as the checks read them: the run's kept table when its engine kept one
    (an entry's `outgoing` JSON is then parsed once per run, not by every check that reads it:
    a pending entry of 200,000 messages cost 7.5 s of parsing a read), else the expression."""
    if scope.kept_pending:
        return ibis.table(pending_outgoing_rows(scope, dialect).schema(), name=PENDING_OUTGOING)
    return pending_outgoing_rows(scope, dialect)


def large_entries() -> ir.Table:
    """The pending entries of the kept table holding more than LARGE_ENTRY messages: sender,
    incoming_message_id, messages."""
    kept = ibis.table({"sender": "string", "incoming_message_id": "string"}, name=PENDING_OUTGOING)
    counted = kept.group_by(["sender", "incoming_message_id"]).aggregate(messages=kept.count())
    return counted.filter(counted.messages > LARGE_ENTRY).order_by(["sender", "incoming_message_id"])


def pending_outgoing_rows(scope: Scope, dialect: Dialect) -> ir.Table:
    """Every outgoing message of every pending outbox entry: what will still be sent. Columns:
    sender (eoctl's endpoint), incoming_message_id, entry_attempt_id, message_id, token_id, topic,
    producer, seq, blob_refs."""
    headers = scope.config.protocol.headers
    outbox = store_table("outbox")
    if scope.streamed_outgoing:  # the largest entries' messages are in STREAMED_OUTGOING
        outbox = outbox.filter(outbox.outgoing.length() <= STREAMED_ENTRY)
    m = outbox.select(
        sender=outbox.ep, incoming_message_id=outbox.incoming_message_id, entry_attempt_id=outbox.attempt_id,
        m=outgoing_messages(outbox.outgoing, dialect).unnest())
    if scope.streamed_outgoing:
        m = m.union(ibis.table(m.schema(), name=STREAMED_OUTGOING))
    m = m.filter(m.m.notnull())
    return m.select(
        "sender", "incoming_message_id", "entry_attempt_id",
        message_id=m.m.message_id, token_id=m.m.token_id, topic=m.m.topic,
        producer=m.m.headers.get(headers.producer),
        seq=m.m.headers.get(headers.sequence).try_cast("int64"),
        blob_refs=blob_refs(m.m.headers.get(headers.blobs), dialect))


def referenced_tokens(scope: Scope, dialect: Dialect) -> ir.Table:
    """Token ids that pending entries hold: their incoming token and their outgoing tokens."""
    outbox = store_table("outbox")
    ids = pending_outgoing(scope, dialect).select("token_id").union(
        outbox.select(token_id=outbox.incoming_token_id))
    return ids.filter(ids.token_id.notnull()).distinct()


def stuck_entries(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO301: pending longer than --stuck-after: its messages never left (replay candidate).
    Fresh pending entries are work in progress, not findings."""
    outbox = store_table("outbox")
    now = scope.options.now.timestamp()
    for name in scope.endpoints:
        if not scope.has(name, "outbox"):
            continue
        o = outbox.filter((outbox.ep == name) & (outbox.created_at < scope.ago(scope.options.stuck_after)))
        messages = outgoing_messages(o.outgoing, dialect)
        stuck = o.select(
            "endpoint", "incoming_message_id", "incoming_token_id", "attempt_id",
            outgoing_messages=messages.length(),
            # the messages it holds back: what an operator traces, and what names it in a trace
            message_ids=messages.map(lambda m: m.message_id),
            tokens_committed=o.tokens_committed_at.notnull(), created_at=o.created_at,
            age_seconds=whole_seconds_since(o.created_at, now, dialect))
        yield Hit(name, scope.config.endpoints[name].outbox.table, stuck)


def _sent_with_causation(records: ir.Table) -> ir.Table:
    """The records EO302 reads: valid, with a producer, a causation and an attempt."""
    return records.filter(records.problem.isnull() & records.producer.notnull() & records.causation_id.notnull()
                          & records.attempt_id.notnull())


def causations_sent_twice(records: ir.Table, dialect: Dialect) -> ir.Table:
    """(producer, causation_id) sent under more than one attempt: the only causations EO302 can
    flag without a pending entry (min != max of the attempts' hash64, a cheap aggregate). What an
    incremental audit keeps to know which earlier causations to look at again."""
    return keys_of_several(_sent_with_causation(records), ["producer", "causation_id"], dialect, values="attempt_id")


def ghost_messages(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO302: of the attempts under which one incoming message (causation) made a producer send,
    into any topic eoctl reads, only one committed: the one the producer's pending entry names
    (whether or not it sent yet), else the last to send; the others are ghosts, reported in each
    endpoint's input where they landed (one row per topic)."""
    key = ["producer", "causation_id"]
    attempt = [*key, "attempt_id"]
    # a record two endpoints read is here twice: the minimum, the first send and the attempts are
    # the same either way, so the records need no distinct
    r = _sent_with_causation(records)
    sent = r.group_by(attempt).aggregate(first_sent=r.timestamp.min())
    # where each attempt's first send landed (topic, partition, offset): it orders attempts that
    # first sent at one instant
    ordered = r.mutate(_rank=ibis.row_number().over(group_by=attempt, order_by=[r.timestamp, r.topic, r.partition,
                                                                                 r.offset]))
    first = ordered.filter(ordered._rank == 0).select(*attempt, t=ordered.topic, p=ordered.partition,
                                                      o=ordered.offset)
    attempts = sent.join(first, attempt)
    counted = attempts.mutate(attempts=ibis._.count().over(group_by=key))
    # a pending entry names its committed attempt whatever its outgoing text holds (none, unreadable)
    outbox = store_table("outbox")
    entries = outbox.filter(outbox.attempt_id.notnull()).select(
        producer=scope.as_producer(outbox.ep), causation_id=outbox.incoming_message_id, pending_attempt=outbox.attempt_id).distinct()
    joined = counted.left_join(entries, key).select(
        *attempt, "first_sent", "t", "p", "o", "pending_attempt", "attempts")
    # an attempt alone is a ghost only when the entry names another (which has not sent yet); the
    # ranking below needs only the causations sent under several attempts
    joined = joined.filter((joined.attempts > 1) | (joined.pending_attempt.notnull()
                                                     & (joined.pending_attempt != joined.attempt_id)))
    last = joined.mutate(_last=ibis.row_number().over(
        group_by=key, order_by=[joined.first_sent.desc(), joined.t.desc(), joined.p.desc(), joined.o.desc()]))
    ranked = last.mutate(committed_attempt=ibis.coalesce(
        last.pending_attempt,
        ibis.ifelse(last._last == 0, last.attempt_id, ibis.null("string")).max().over(group_by=key)))
    ghost_attempts = ranked.filter(ranked.attempt_id != ranked.committed_attempt).select(
        *attempt, "committed_attempt")
    # the ghosts' records (few), per endpoint and topic they landed in
    g = r.join(ghost_attempts, attempt)
    ghosts = g.group_by(["endpoint", "topic", *attempt]).aggregate(
        message_ids=g.message_id.collect(distinct=True).sort(), committed_attempt=g.committed_attempt.max(),
        first_sent=g.timestamp.min())
    ghosts = ghosts.select("endpoint", "topic", *key, ghost_attempt=ghosts.attempt_id, message_ids=ghosts.message_ids,
                           committed_attempt=ghosts.committed_attempt, first_sent=ghosts.first_sent)
    for name, ep in scope.endpoints.items():
        if ep.input is not None:
            yield Hit(name, scope.topics(name), ghosts.filter(ghosts.endpoint == name).drop("endpoint"))


def sent_past_retention(scope: Scope, records: ir.Table, dialect: Dialect) -> Iterator[Hit]:
    """EO303: rows of an outbox that keeps them once sent (sent_column), sent and last updated
    longer ago than the outbox's retention: the cleanup is missing or behind. The rows are the
    evidence, oldest first; the finding's count and the oldest age are theirs."""
    from eoctl.config.model import duration_of

    sent = ibis.table(store_table("outbox").schema(), name="outbox_sent")
    now = scope.options.now.timestamp()
    for name, ep in scope.endpoints.items():
        if not scope.has(name, "outbox") or ep.outbox.retention is None:
            continue
        o = sent.filter((sent.ep == name) & (sent.updated_at < scope.ago(duration_of(ep.outbox.retention))))
        rows = o.select("endpoint", "incoming_message_id", "attempt_id", created_at=o.created_at,
                        updated_at=o.updated_at, age_seconds=whole_seconds_since(o.updated_at, now, dialect))
        yield Hit(name, ep.outbox.table, rows.order_by([ibis.desc("age_seconds"), "incoming_message_id"]))
