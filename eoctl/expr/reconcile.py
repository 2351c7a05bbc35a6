"""Every token and prepared blob classified (eoctl.ops.reconcile says the classes), written once:
what `reconcile-tokens` reports and what `gc-tokens` / `gc-blobs` plan from.

The evidence comes from every configured endpoint (the scope's options name none): a pending
entry of one endpoint holds tokens of another, and any endpoint's records may carry a token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import ibis

from eoctl.expr.blobs import prefix_path, relative_name
from eoctl.expr.functions import Dialect, blob_refs
from eoctl.expr.inputs import Scope, store_table
from eoctl.expr.outbox import pending_outgoing, referenced_tokens

if TYPE_CHECKING:
    import ibis.expr.types as ir

_REGISTRATION = ("registered_by", "registered_for_message", "registered_attempt")
_INTENTS = "array<struct<sender: string, intent_id: string>>"


def _registered(scope: Scope, records: ir.Table, kind: str) -> ir.Table | None:
    """ref -> the intent that registered it (the first by intent id, when there are several),
    whether every registering attempt lost (its incoming message's outcome is known without it),
    and every intent naming it, sorted."""
    if not scope.has_any("intents"):
        return None
    raw = store_table("intents")
    intents = raw.filter(raw.kind == kind).select(
        sender=raw.ep, intent_id=raw.intent_id, incoming_message_id=raw.incoming_message_id,
        registered_attempt=raw.attempt_id, ref=raw.ref)
    keys = intents.select("sender", "incoming_message_id").distinct()
    sent = records.filter(records.producer.notnull() & records.causation_id.notnull()).select(
        sender=records.producer, incoming_message_id=records.causation_id)
    # only the intents' messages, then distinct: most records answer no intent
    sent = sent.semi_join(keys, ["sender", "incoming_message_id"]).distinct().mutate(sent=ibis.literal(True))
    known = keys.left_join(sent, ["sender", "incoming_message_id"]).drop("sender_right", "incoming_message_id_right")
    if scope.has_any("outbox"):
        outbox = store_table("outbox")
        entries = outbox.group_by(sender=outbox.ep, incoming_message_id=outbox.incoming_message_id).aggregate(
            entry_committed=outbox.tokens_committed_at.notnull().all())
        known = known.left_join(entries, ["sender", "incoming_message_id"]).drop(
            "sender_right", "incoming_message_id_right")
    else:
        known = known.mutate(entry_committed=ibis.null("boolean"))
    # an entry pending without committed tokens: a checkpoint may be under way, so not known
    known = known.select("sender", "incoming_message_id", outcome_known=ibis.ifelse(
        known.entry_committed.notnull(), known.entry_committed, ibis.coalesce(known.sent, False)))
    j = intents.left_join(known, ["sender", "incoming_message_id"])
    return j.group_by("ref").aggregate(
        registered_by=j.sender.argmin(j.intent_id),
        registered_for_message=j.incoming_message_id.argmin(j.intent_id),
        registered_attempt=j.registered_attempt.argmin(j.intent_id),
        attempt_lost=ibis.coalesce(j.outcome_known, False).all(),
        intents=ibis.struct({"sender": j.sender, "intent_id": j.intent_id}).collect().sort())


def _with_registration(scope: Scope, records: ir.Table, df: ir.Table, kind: str, key: str) -> ir.Table:
    registered = _registered(scope, records, kind)
    if registered is not None:
        registered = registered.rename({key: "ref"})
        return df.left_join(registered, key).drop(f"{key}_right")
    return df.mutate(**{c: ibis.null("string") for c in _REGISTRATION}, attempt_lost=ibis.null("boolean"),
                     intents=ibis.null(_INTENTS))


def token_classes(scope: Scope, records: ir.Table, dialect: Dialect, names: Sequence[str], *,
                  garbage_only: bool = False) -> ir.Table:
    """Every token of the endpoints `names` with its class, reason, whether it is collectable
    (garbage past the grace period), who registered it and the intents naming it. A token's class
    depends on no other token, so one pass classifies every endpoint's as each alone would.
    `garbage_only`: the garbage rows alone (what a gc plan reads), found by the same rules."""
    tokens = store_table("tokens")
    t = tokens.filter(tokens.ep.isin(list(names))).select(
        endpoint=tokens.ep, token_id=tokens.token_id, message_id=tokens.message_id, attempt_id=tokens.attempt_id,
        created_at=tokens.created_at)
    # every record, also those with other header problems: a readable token id is evidence
    carried = records.filter(records.token_id.notnull())
    refs = referenced_tokens(scope, dialect)
    if garbage_only:
        # garbage is on no record and in no pending entry: anti-joins, without the per-token
        # aggregate over the records (the evidence of live and leaked tokens)
        df = t.anti_join(carried, "token_id").anti_join(refs, "token_id").mutate(
            in_flight=ibis.null("boolean"), on_processed=ibis.null("boolean"), in_flight_at=ibis.null("string"),
            referenced=ibis.null("boolean"))
    else:
        in_flight_at = carried.topic.concat("/", carried.partition.cast("string"), "@",
                                            carried.offset.cast("string"))
        on_records = carried.group_by("token_id").aggregate(
            in_flight=(~carried.processed).max(), on_processed=carried.processed.max(),
            in_flight_at=ibis.ifelse(~carried.processed, in_flight_at, ibis.null("string")).min())
        refs = refs.mutate(referenced=ibis.literal(True))
        df = (t.left_join(on_records, "token_id").drop("token_id_right").left_join(refs, "token_id")
              .drop("token_id_right"))
    df = _with_registration(scope, records, df, "token", "token_id")
    lost = ibis.coalesce(df.attempt_lost, False)
    old = df.created_at < scope.ago(scope.options.grace)
    cls = ibis.cases((df.in_flight == True, "live"), (df.referenced == True, "referenced"),
                     (df.on_processed == True, "leaked"), (lost | old, "garbage"), else_="young")
    reason = ibis.cases(
        (df.in_flight == True, ibis.literal("record in flight at ").concat(df.in_flight_at)),
        (df.referenced == True, "held by a pending outbox entry"),
        (df.on_processed == True, "its record is processed; the receiver kept it"),
        (lost, ibis.literal("registered by attempt ").concat(df.registered_attempt, " of ", df.registered_by,
                                                             ", which did not commit")),
        (old, "on no record and in no pending entry, older than the grace period"),
        else_="on no record and in no pending entry yet, within the grace period")
    classes = df.select(
        endpoint=df.endpoint, token_id=df.token_id, message_id=df.message_id, attempt_id=df.attempt_id,
        created_at=df.created_at, **{"class": cls}, reason=reason, collectable=(cls == "garbage") & old,
        **{c: df[c] for c in _REGISTRATION}, intents=ibis.coalesce(df.intents, ibis.literal([], type=_INTENTS)))
    return classes.filter(classes["class"] == "garbage") if garbage_only else classes


def missing_tokens(scope: Scope, records: ir.Table, names: Sequence[str]) -> ir.Table:
    """In-flight records of the endpoints `names` whose token is not in their endpoint's store;
    `processed_copy` says whether another copy of the message was processed by the same endpoint
    (a harmless redelivery) or not (EO202's loss). Each endpoint's rows are what it alone gives."""
    tokens = store_table("tokens")
    mine = records.filter(records.endpoint.isin(list(names)))
    inflight = mine.filter(~mine.processed & mine.token_id.notnull())
    stored = tokens.filter(tokens.ep.isin(list(names))).select(endpoint=tokens.ep, token_id=tokens.token_id)
    missing = inflight.anti_join(stored, ["endpoint", "token_id"]).select(
        "endpoint", "topic", "partition", "offset", "message_id", "token_id")
    done = mine.filter(mine.processed).select("endpoint", "message_id").semi_join(
        missing.select("endpoint", "message_id"), ["endpoint", "message_id"]).distinct().mutate(
        processed_copy=ibis.literal(True))
    j = missing.left_join(done, ["endpoint", "message_id"])
    return j.select(endpoint=j.endpoint, topic=j.topic, partition=j.partition, offset=j.offset,
                    message_id=j.message_id, token_id=j.token_id,
                    processed_copy=ibis.coalesce(j.processed_copy, False))


def blob_classes(scope: Scope, records: ir.Table, dialect: Dialect, name: str) -> ir.Table:
    """Every blob under endpoint `name`'s prefix with its class (eoctl.ops.reconcile)."""
    prefix = prefix_path(scope.config.endpoints[name].blobs or "")
    files = scope.blobs(name).select("name", "size", "modified")
    # records of this producer, or of no readable producer (they might be its): every copy counts
    mine = records.filter(((records.producer == name) | records.producer.isnull()) & records.blobs.notnull())
    mine = mine.mutate(_refs=blob_refs(mine.blobs, dialect))
    # unnested first, the field taken in a select of its own: Spark cannot take a field of explode()
    published = mine.filter(mine._refs.notnull()).select(ref=mine._refs.unnest())
    published = published.select(name=relative_name(published.ref.uri, prefix)).distinct().mutate(
        published=ibis.literal(True))
    # an eo-blobs header that is not valid JSON may still name a blob: any blob whose name appears
    # in it is kept (these records are few; EO105 reports them)
    unreadable = mine.filter(mine._refs.isnull()).select(raw=mine.blobs).distinct()
    named = files.select("name").join(unreadable, unreadable.raw.find(files.name) >= 0).select(
        "name").distinct().mutate(maybe_published=ibis.literal(True))
    pending = pending_outgoing(scope, dialect)
    held = pending.filter(pending.sender == name).select(ref=pending.blob_refs.unnest())
    held = held.select(name=relative_name(held.ref.uri, prefix)).distinct().mutate(referenced=ibis.literal(True))
    df = (files.left_join(published, "name").drop("name_right").left_join(named, "name").drop("name_right")
          .left_join(held, "name").drop("name_right"))
    df = _with_registration(scope, records, df, "blob", "name")
    lost = ibis.coalesce(df.attempt_lost, False)
    old = df.modified < scope.ago(scope.options.grace)
    is_published = (df.published == True) | (df.maybe_published == True)
    cls = ibis.cases((is_published, "published"), (df.referenced == True, "referenced"),
                     (lost | old, "garbage"), else_="young")
    reason = ibis.cases(
        (df.published == True, "a record publishes it"),
        (df.maybe_published == True, "named by a record whose eo-blobs is not valid JSON"),
        (df.referenced == True, "named by a pending outbox entry"),
        (lost, ibis.literal("prepared by attempt ").concat(df.registered_attempt, ", which did not commit")),
        (old, "named by no record and no pending entry, older than the grace period"),
        else_="named by no record and no pending entry yet, within the grace period")
    return df.select(
        endpoint=ibis.literal(name), name=df.name, size=df.size, modified=df.modified, **{"class": cls},
        reason=reason, collectable=(cls == "garbage") & old, **{c: df[c] for c in _REGISTRATION},
        intents=ibis.coalesce(df.intents, ibis.literal([], type=_INTENTS)))
