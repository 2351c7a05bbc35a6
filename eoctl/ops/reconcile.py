"""Classify every token and prepared blob from the topic, the outbox and the register evidence.

The seeds' warning: a stuck token and a garbage token look alike in the token store alone. Only
the records (in flight or processed), the pending outbox entries and the intents an attempt
registered, read together, tell them apart. Everything here is a Spark plan; nothing is collected.

Token classes, first match wins:
  live        a record in flight carries it (on any input)
  referenced  a pending outbox entry holds it (incoming or outgoing)
  leaked      only processed records carry it (the receiver did not remove it)
  garbage     registered by an attempt that did not commit (the same incoming message's committed
              outcome is known: its entry has committed tokens, or its messages were sent), or on
              no record and in no entry and older than the grace period (orphan)
  young       on no record and in no entry, younger than the grace period: may be on its way
Blob classes: published (a record names it), referenced (a pending entry names it), garbage, young.
Only garbage older than the grace period is collectable: the grace period guards every deletion.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eoctl.checks.context import BLOB_REFS, AuditContext, AuditOptions
from eoctl.config.model import Config

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

TOKEN_CLASSES = ("live", "referenced", "leaked", "garbage", "young")
BLOB_CLASSES = ("published", "referenced", "garbage", "young")


def _intents(ctx: AuditContext, kind: str) -> DataFrame | None:
    """Intents of `kind` from every endpoint's store, with the registering endpoint as `sender`."""
    from pyspark.sql import functions as F

    frames = []
    for name in ctx.config.endpoints:
        df = ctx.table(name, "intents")
        if df is not None:
            frames.append(df.where(F.col("kind") == kind).select(
                F.lit(name).alias("sender"), "intent_id", "incoming_message_id",
                F.col("attempt_id").alias("registered_attempt"), "ref"))
    return reduce(lambda a, b: a.unionByName(b), frames) if frames else None


def _outcome_known(ctx: AuditContext, intents: DataFrame) -> DataFrame:
    """(sender, incoming_message_id, outcome_known) for the incoming messages intents name: True
    when the processing that registered them has a committed outcome, so an intent's ref that is on
    no record and in no entry belongs to an attempt that lost. Unknown when the entry is pending
    without committed tokens (a checkpoint may be under way) or when nothing says what happened."""
    from pyspark.sql import functions as F

    keys = intents.select("sender", "incoming_message_id").distinct()
    pending = []
    for name in ctx.config.endpoints:
        outbox = ctx.table(name, "outbox")
        if outbox is not None:
            pending.append(outbox.select(F.lit(name).alias("sender"), "incoming_message_id",
                                         F.col("tokens_committed_at").isNotNull().alias("entry_committed")))
    sent = ctx.records.where(F.col("producer").isNotNull() & F.col("causation_id").isNotNull()).select(
        F.col("producer").alias("sender"), F.col("causation_id").alias("incoming_message_id"),
    ).join(ctx.keys(keys), ["sender", "incoming_message_id"], "left_semi").distinct().withColumn("sent", F.lit(True))
    out = keys.join(sent, ["sender", "incoming_message_id"], "left")
    if pending:
        entries = reduce(lambda a, b: a.unionByName(b), pending).groupBy("sender", "incoming_message_id").agg(
            F.bool_and("entry_committed").alias("entry_committed"))
        out = out.join(entries, ["sender", "incoming_message_id"], "left")
    else:
        out = out.withColumn("entry_committed", F.lit(None).cast("boolean"))
    known = F.when(F.col("entry_committed").isNotNull(), F.col("entry_committed")).otherwise(
        F.coalesce(F.col("sent"), F.lit(False)))
    return out.select("sender", "incoming_message_id", known.alias("outcome_known"))


def _registered(ctx: AuditContext, kind: str) -> DataFrame | None:
    """ref -> the intent that registered it and whether its message's outcome is known."""
    from pyspark.sql import functions as F

    intents = _intents(ctx, kind)
    if intents is None:
        return None

    def build() -> DataFrame:
        known = _outcome_known(ctx, intents)
        joined = intents.join(known, ["sender", "incoming_message_id"], "left")
        # A ref is registered once in practice; if twice, any unknown outcome keeps it uncollected,
        # and the first intent (by id) names who registered it: the same on every run and engine.
        return joined.groupBy("ref").agg(
            F.min_by("sender", "intent_id").alias("registered_by"),
            F.min_by("incoming_message_id", "intent_id").alias("registered_for_message"),
            F.min_by("registered_attempt", "intent_id").alias("registered_attempt"),
            F.bool_and(F.coalesce("outcome_known", F.lit(False))).alias("attempt_lost"),
            F.sort_array(F.collect_list(F.struct("sender", "intent_id"))).alias("intents"),
        )
    return ctx.cached(("registered", kind), build)


def _with_registration(ctx: AuditContext, df: DataFrame, kind: str, key: str) -> DataFrame:
    """`df` with who registered each `key` (registered_by, registered_for_message,
    registered_attempt), whether that attempt lost (attempt_lost) and the intents (null when none)."""
    from pyspark.sql import functions as F

    registered = _registered(ctx, kind)
    if registered is not None:
        return df.join(registered.withColumnRenamed("ref", key), key, "left")
    return df.select("*", *[F.lit(None).cast("string").alias(c) for c in
                            ("registered_by", "registered_for_message", "registered_attempt")],
                     F.lit(None).cast("boolean").alias("attempt_lost"), F.lit(None).alias("intents"))


def _empty_intents() -> Column:
    from pyspark.sql import functions as F

    return F.array().cast("array<struct<sender: string, intent_id: string>>")


def token_classes(ctx: AuditContext, name: str) -> DataFrame | None:
    """Every token of endpoint `name` with its class, reason, age and the intents naming it."""
    from pyspark.sql import functions as F

    tokens = ctx.table(name, "tokens")
    if tokens is None:
        return None
    cutoff = ctx.ts(ctx.options.grace)
    t = tokens.select("token_id", "message_id", "attempt_id", "created_at")
    # Every record, also those with other header problems: a readable token id is evidence.
    carried = ctx.records.where(F.col("token_id").isNotNull()).select(
        "token_id", "processed", "topic", "partition", "offset").join(t.select("token_id"), "token_id", "left_semi")
    on_records = carried.groupBy("token_id").agg(
        F.max(~F.col("processed")).alias("in_flight"), F.max("processed").alias("on_processed"),
        F.min(F.when(~F.col("processed"), F.format_string("%s/%d@%d", "topic", "partition", "offset")))
        .alias("in_flight_at"))
    refs = ctx.referenced_tokens.withColumn("referenced", F.lit(True))
    df = t.join(on_records, "token_id", "left").join(refs, "token_id", "left")
    df = _with_registration(ctx, df, "token", "token_id")
    lost = F.coalesce(F.col("attempt_lost"), F.lit(False))
    old = F.col("created_at") < cutoff
    cls = (F.when(F.col("in_flight") == F.lit(True), "live")
           .when(F.col("referenced") == F.lit(True), "referenced")
           .when(F.col("on_processed") == F.lit(True), "leaked")
           .when(lost | old, "garbage")
           .otherwise("young"))
    reason = (F.when(F.col("in_flight") == F.lit(True), F.concat(F.lit("record in flight at "), F.col("in_flight_at")))
              .when(F.col("referenced") == F.lit(True), F.lit("held by a pending outbox entry"))
              .when(F.col("on_processed") == F.lit(True), F.lit("its record is processed; the receiver kept it"))
              .when(lost, F.concat(F.lit("registered by attempt "), F.col("registered_attempt"),
                                   F.lit(" of "), F.col("registered_by"), F.lit(", which did not commit")))
              .when(old, F.lit("on no record and in no pending entry, older than the grace period"))
              .otherwise(F.lit("on no record and in no pending entry yet, within the grace period")))
    return df.select(
        F.lit(name).alias("endpoint"), "token_id", "message_id", "attempt_id", "created_at",
        cls.alias("class"), reason.alias("reason"), ((cls == "garbage") & old).alias("collectable"),
        "registered_by", "registered_for_message", "registered_attempt",
        F.coalesce(F.col("intents"), _empty_intents()).alias("intents"),
    )


def missing_tokens(ctx: AuditContext, name: str) -> DataFrame | None:
    """In-flight records of `name` whose token is not in its store; `processed_copy` says whether
    another copy of the message was processed (a harmless redelivery) or not (EO202's loss)."""
    from pyspark.sql import functions as F

    tokens = ctx.table(name, "tokens")
    if tokens is None:
        return None
    inflight = ctx.records.where((F.col("endpoint") == name) & ~F.col("processed") & F.col("token_id").isNotNull())
    missing = inflight.join(tokens.select("token_id"), "token_id", "left_anti").select(
        "topic", "partition", "offset", "message_id", "token_id")
    missing = ctx.keys(missing)
    done = ctx.records.where((F.col("endpoint") == name) & F.col("processed")).select("message_id").join(
        missing.select("message_id"), "message_id", "left_semi").distinct().withColumn("processed_copy", F.lit(True))
    return missing.join(done, "message_id", "left").select(
        F.lit(name).alias("endpoint"), "topic", "partition", "offset", "message_id", "token_id",
        F.coalesce(F.col("processed_copy"), F.lit(False)).alias("processed_copy"))


def blob_classes(ctx: AuditContext, name: str) -> DataFrame | None:
    """Every blob under endpoint `name`'s prefix with its class (see the module doc)."""
    from pyspark.sql import functions as F

    from eoctl.checks.blobs import listing, prefix_path, relative_name

    uri = ctx.config.endpoints[name].blobs
    if uri is None:
        return None
    prefix = prefix_path(uri)
    cutoff = ctx.ts(ctx.options.grace)
    files = listing(ctx, name)
    # Records of this producer, or of no readable producer (they might be its): every copy counts.
    mine = ctx.records.where(((F.col("producer") == name) | F.col("producer").isNull()) & F.col("blobs").isNotNull())
    parsed = F.from_json("blobs", BLOB_REFS)
    published = mine.where(parsed.isNotNull()).select(F.explode(parsed.uri).alias("uri")).select(
        relative_name(F.col("uri"), prefix).alias("name")).distinct().withColumn("published", F.lit(True))
    # An eo-blobs header that is not valid JSON may still name a blob: any blob whose name appears
    # in it is kept (these records are few; EO105 reports them).
    unreadable = ctx.keys(mine.where(parsed.isNull()).select(F.col("blobs").alias("raw")).distinct())
    named = files.select("name").join(F.broadcast(unreadable), F.instr("raw", F.col("name")) > 0).select(
        "name").distinct().withColumn("maybe_published", F.lit(True))
    pending = ctx.pending_outgoing.where(F.col("sender") == name).select(
        F.explode("blob_refs.uri").alias("uri")).select(relative_name(F.col("uri"), prefix).alias("name")).distinct(
    ).withColumn("referenced", F.lit(True))
    df = files.join(published, "name", "left").join(named, "name", "left").join(pending, "name", "left")
    df = _with_registration(ctx, df, "blob", "name")
    lost = F.coalesce(F.col("attempt_lost"), F.lit(False))
    old = F.col("modified") < cutoff
    is_published = (F.col("published") == F.lit(True)) | (F.col("maybe_published") == F.lit(True))
    cls = (F.when(is_published, "published").when(F.col("referenced") == F.lit(True), "referenced")
           .when(lost | old, "garbage").otherwise("young"))
    reason = (F.when(F.col("published") == F.lit(True), F.lit("a record publishes it"))
              .when(F.col("maybe_published") == F.lit(True), F.lit("named by a record whose eo-blobs is not valid JSON"))
              .when(F.col("referenced") == F.lit(True), F.lit("named by a pending outbox entry"))
              .when(lost, F.concat(F.lit("prepared by attempt "), F.col("registered_attempt"),
                                   F.lit(", which did not commit")))
              .when(old, F.lit("named by no record and no pending entry, older than the grace period"))
              .otherwise(F.lit("named by no record and no pending entry yet, within the grace period")))
    return df.select(
        F.lit(name).alias("endpoint"), "name", "size", "modified", cls.alias("class"), reason.alias("reason"),
        ((cls == "garbage") & old).alias("collectable"),
        "registered_by", "registered_for_message", "registered_attempt",
        F.coalesce(F.col("intents"), _empty_intents()).alias("intents"),
    )


@dataclass
class ClassEvidence:
    endpoint: str
    cls: str
    count: int
    rows: list[dict[str, Any]]
    parquet: str | None = None


@dataclass
class ReconcileReport:
    run: dict[str, Any]
    #: endpoint -> class (the token classes, then "missing" for in-flight records without a token) -> count
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    evidence: list[ClassEvidence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be used (a store without intents)


def run_reconcile_duckdb(config: Config, *, endpoints: list[str] | None = None,
                         grace: dt.timedelta = dt.timedelta(hours=24), evidence_rows: int = 100,
                         evidence_dir: Path | None = None, now: dt.datetime | None = None,
                         progress: Callable[[str], None] = lambda _m: None) -> ReconcileReport:
    """The same classification on the DuckDB engine (eoctl.expr.reconcile), in process."""
    from eoctl.engine.duckdb_audit import run_reconcile as run_on_duckdb
    from eoctl.ops.common import new_run_id

    options = AuditOptions(grace=grace, **({"now": now} if now else {}))
    report = ReconcileReport(run={"id": new_run_id(), "engine": "duckdb", "started_at": options.now.isoformat(),
                                  "grace_seconds": int(grace.total_seconds())})
    run_on_duckdb(config, options, endpoints, report, evidence_rows, evidence_dir, progress)
    report.run["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    return report


def run_reconcile(spark: SparkSession, config: Config, *, endpoints: list[str] | None = None,
                  grace: dt.timedelta = dt.timedelta(hours=24), evidence_rows: int = 100,
                  evidence_dir: Path | None = None, now: dt.datetime | None = None,
                  progress: Callable[[str], None] = lambda _m: None) -> ReconcileReport:
    """Classify every token of the selected endpoints (evidence read from all of them)."""
    from pyspark.sql import functions as F

    from eoctl.engine.evidence import materialize
    from eoctl.ops.common import new_run_id, selected

    options = AuditOptions(grace=grace, **({"now": now} if now else {}))
    ctx = AuditContext(spark, config, options)
    run_id = new_run_id()
    report = ReconcileReport(run={"id": run_id, "engine": "spark", "started_at": options.now.isoformat(),
                                  "grace_seconds": int(grace.total_seconds())})
    try:
        report.notes = ctx.layout.notes(endpoints)
        for name in selected(config, endpoints):
            progress(f"classifying the tokens of {name}")
            classes = token_classes(ctx, name)
            if classes is None:
                continue
            classes = ctx.persist(classes)
            found = {r["class"]: r["count"] for r in classes.groupBy("class").count().collect()}
            report.counts[name] = {c: found.get(c, 0) for c in TOKEN_CLASSES}
            for cls in TOKEN_CLASSES:
                if found.get(cls):
                    count, rows, path = materialize(classes.where(F.col("class") == cls), evidence_rows,
                                                    evidence_dir, f"{run_id}-{name}-{cls}")
                    report.evidence.append(ClassEvidence(name, cls, count, rows, path))
            progress(f"in-flight records of {name} without a token")
            missing = missing_tokens(ctx, name)
            assert missing is not None
            count, rows, path = materialize(missing, evidence_rows, evidence_dir, f"{run_id}-{name}-missing")
            report.counts[name]["missing"] = count
            if count:
                report.evidence.append(ClassEvidence(name, "missing", count, rows, path))
    finally:
        ctx.release()
    report.run["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    return report
