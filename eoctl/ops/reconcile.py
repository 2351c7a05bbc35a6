"""Classify every token and prepared blob from the topic, the outbox and the register evidence.

The seeds' warning: a stuck token and a garbage token look alike in the token store alone. Only
the records (in flight or processed), the pending outbox entries and the intents an attempt
registered, read together, tell them apart. The classification is eoctl.expr.reconcile's, on either engine; only counts and samples
reach the driver.

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
from pathlib import Path
from typing import Any

from eoctl.config.model import Config
from eoctl.options import AuditOptions

TOKEN_CLASSES = ("live", "referenced", "leaked", "garbage", "young")
BLOB_CLASSES = ("published", "referenced", "garbage", "young")


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


def run_reconcile(spark: Any, config: Config, *, endpoints: list[str] | None = None,
                  grace: dt.timedelta = dt.timedelta(hours=24), evidence_rows: int = 100,
                  evidence_dir: Path | None = None, now: dt.datetime | None = None,
                  progress: Callable[[str], None] = lambda _m: None) -> ReconcileReport:
    """Classify every token of the selected endpoints, evidence read from all of them, on the
    configured engine (`spark`: a session, or a function that starts one; unused on DuckDB)."""
    import ibis

    from eoctl.engine.run import open_run
    from eoctl.expr import compile_sql
    from eoctl.expr.reconcile import missing_tokens, token_classes
    from eoctl.expr.records import records_table
    from eoctl.ops.common import new_run_id, selected

    options = AuditOptions(grace=grace, evidence_rows=evidence_rows, evidence_dir=evidence_dir,
                           **({"now": now} if now else {}))
    run_id = new_run_id()
    report = ReconcileReport(run={"id": run_id, "engine": config.engine.kind, "started_at": options.now.isoformat(),
                                  "grace_seconds": int(grace.total_seconds())})
    engine = open_run(spark, config, options, progress)
    try:
        scope, dialect, records = engine.scope, engine.dialect, records_table()
        report.notes = scope.layout.notes(endpoints)
        for name in selected(config, endpoints):
            if not scope.has(name, "tokens"):
                continue
            progress(f"classifying the tokens of {name}")
            classes = token_classes(scope, records, dialect, [name])
            engine.keep("classes", compile_sql(classes, dialect))
            kept = ibis.table(classes.schema(), name="classes")
            counted = kept.group_by("class").aggregate(n=kept.count())
            found = {r["class"]: r["n"] for r in engine.rows(compile_sql(counted, dialect))}
            report.counts[name] = {c: found.get(c, 0) for c in TOKEN_CLASSES}
            for cls in TOKEN_CLASSES:
                if found.get(cls):
                    count, rows, path = engine.evaluate(compile_sql(kept.filter(kept["class"] == cls), dialect),
                                                        f"{run_id}-{name}-{cls}")
                    report.evidence.append(ClassEvidence(name, cls, count, rows, path))
            progress(f"in-flight records of {name} without a token")
            count, rows, path = engine.evaluate(compile_sql(missing_tokens(scope, records, name), dialect),
                                                f"{run_id}-{name}-missing")
            report.counts[name]["missing"] = count
            if count:
                report.evidence.append(ClassEvidence(name, "missing", count, rows, path))
    finally:
        engine.release()
    report.run["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    return report
