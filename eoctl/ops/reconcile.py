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
    #: endpoint tables whose owner column never holds the endpoint's name: those were not classified
    misnamed: list[dict[str, Any]] = field(default_factory=list)


def run_reconcile(spark: Any, config: Config, *, endpoints: list[str] | None = None,
                  grace: dt.timedelta = dt.timedelta(hours=24), evidence_rows: int = 100,
                  evidence_dir: Path | None = None, now: dt.datetime | None = None,
                  progress: Callable[[str], None] = lambda _m: None) -> ReconcileReport:
    """Classify every token of the selected endpoints, evidence read from all of them, on the
    configured engine (`spark`: a session, or a function that starts one; unused on DuckDB).
    Every endpoint in one pass: the classes and the in-flight records without a token are each
    computed once, counted in one query and sampled in another, however many endpoints (a query
    per endpoint and class cost Spark about half a second each, and a scan of the records each)."""
    from eoctl.engine.run import open_run
    from eoctl.ops.gc_flow import new_run_id, selected

    options = AuditOptions(grace=grace, evidence_rows=evidence_rows, evidence_dir=evidence_dir,
                           **({"now": now} if now else {}))
    run_id = new_run_id(options.now)
    report = ReconcileReport(run={"id": run_id, "engine": config.engine.kind, "started_at": options.now.isoformat(),
                                  "grace_seconds": int(grace.total_seconds())})
    engine = open_run(spark, config, options, progress)
    try:
        # imported once the run is open: the DuckDB engine copies the stores meanwhile
        from eoctl.expr.reconcile import missing_tokens, token_classes
        from eoctl.expr.records import records_table

        scope, dialect, records = engine.scope, engine.dialect, records_table()
        report.notes = scope.layout.notes(endpoints, scope.misnamed)
        report.misnamed = [m.to_dict() for m in scope.misnamed]
        names = [n for n in selected(config, endpoints) if scope.has(n, "tokens")]  # has(): judged ones
        if names:
            progress(f"classifying the tokens of {', '.join(names)}")
            classes = _grouped(engine, "classes", token_classes(scope, records, dialect, names), "class", "token_id",
                               options, run_id)
            progress("in-flight records without a token")
            missing = _grouped(engine, "missing", missing_tokens(scope, records, names), None,
                               ["topic", "partition", "offset"], options, run_id)
            for name in names:
                report.counts[name] = {}
                for cls in (*TOKEN_CLASSES, "missing"):
                    found = missing.get((name, None)) if cls == "missing" else classes.get((name, cls))
                    count, rows, path = found or (0, [], None)
                    report.counts[name][cls] = count
                    if count:
                        report.evidence.append(ClassEvidence(name, cls, count, rows, path))
    finally:
        engine.release()
    report.run["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    return report


def _grouped(engine: Any, name: str, expr: Any, by: str | None, order: str | list[str], options: AuditOptions,
             run_id: str) -> dict[tuple[str, str | None], tuple[int, list[dict[str, Any]], str | None]]:
    """(endpoint, value of column `by`) -> the evidence of those rows of `expr`: its count, the
    first options.evidence_rows rows by `order`, and the Parquet file of them all when they are
    more (options.evidence_dir). `expr` is kept once as `name`; one query counts every group and
    one samples them all."""
    import ibis

    from eoctl.expr import compile_sql

    dialect = engine.dialect
    engine.keep(name, compile_sql(expr, dialect))
    kept = ibis.table(expr.schema(), name=name)
    keys = ["endpoint", *([by] if by else [])]

    def key(row: dict[str, Any]) -> tuple[str, str | None]:
        return row["endpoint"], row[by] if by else None

    counts = {key(r): r["n"] for r in engine.rows(compile_sql(kept.group_by(keys).aggregate(n=kept.count()), dialect))}
    samples: dict[tuple[str, str | None], list[dict[str, Any]]] = {k: [] for k in counts}
    if options.evidence_rows > 0 and counts:
        ranked = kept.mutate(_rank=ibis.row_number().over(group_by=keys, order_by=order))
        for row in sorted(engine.rows(compile_sql(ranked.filter(ranked._rank < options.evidence_rows), dialect)),
                          key=lambda r: r["_rank"]):
            del row["_rank"]
            samples[key(row)].append(row)
    out = {}
    for k, count in counts.items():
        path = None
        if count > options.evidence_rows and options.evidence_dir is not None:
            this = kept.filter(*[kept[c] == v for c, v in zip(keys, k)])
            _, _, path = engine.evaluate(compile_sql(this, dialect), f"{run_id}-{k[0]}-{k[1] or name}")
        out[k] = (count, samples[k], path)
    return out
