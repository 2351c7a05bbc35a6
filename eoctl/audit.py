"""`eoctl audit`: run the selected checks over one shared scan and return typed findings."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from eoctl import incremental
from eoctl.checks.context import AuditContext, AuditOptions
from eoctl.config.model import Config
from eoctl.engine.evidence import materialize
from eoctl.errors import UsageError
from eoctl.report.findings import CATALOG, AuditReport, Finding

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from eoctl.expr.functions import Dialect
    from eoctl.expr.inputs import Scope

_CODE = re.compile(r"^EO\d{1,3}$")


def select_codes(select: list[str] | None, ignore: list[str] | None) -> list[str]:
    """Codes to run: `select` entries are codes or prefixes (EO2 = all token checks)."""

    def expand(items: list[str], flag: str) -> set[str]:
        out: set[str] = set()
        for item in (i.strip().upper() for raw in items for i in raw.split(",") if i.strip()):
            matched = {c for c in CATALOG if c.startswith(item)} if _CODE.match(item) else set()
            if not matched:
                raise UsageError(f"{flag} {item!r}: no such finding code (known: EO101..EO601, or a prefix like EO2)")
            out |= matched
        return out

    chosen = expand(select, "--select") if select else set(CATALOG)
    return sorted(chosen - (expand(ignore, "--ignore") if ignore else set()))


def run_audit(
    spark: SparkSession,
    config: Config,
    options: AuditOptions,
    codes: list[str],
    progress: Callable[[str], None] | None = None,
) -> AuditReport:
    """The findings of `codes` on the Spark engine: the checks of eoctl.expr.catalog compiled to
    Spark SQL over the views of eoctl.engine.spark_audit, every record read once (AuditContext's
    working copy), or with `--since-last` the recorded index's and the ones added since."""
    from eoctl.engine.spark_audit import open_views, sql_conf
    from eoctl.expr import Dialect
    from eoctl.expr.functions import SPARK_SQL_CONF

    step = progress or (lambda _m: None)
    run_id = uuid.uuid4().hex[:12]
    endpoints = AuditContext(spark, config, options).endpoints
    _check_since_last(options)
    base = None
    if options.since_last:
        step("looking for the record index of the last recorded run")
        base = incremental.find_base(spark, config, endpoints)
    keep = options.keep_index and incremental.indexable(config, options)
    index_path = incremental.partial_path(config, run_id) if keep else None
    ctx = AuditContext(spark, config, options, base, index_path)
    report = AuditReport(run=_run(run_id, "spark", options, list(ctx.endpoints), codes))
    with sql_conf(spark, SPARK_SQL_CONF):
        try:
            step("reading the records of every input")
            report.scanned["records"] = ctx.record_count()  # the one scan of the source all checks share
            stats = ctx.fresh_stats() if options.since_last or index_path else []
            report.run["scan"] = _scan_summary(ctx, options, report.scanned["records"], stats)
            if ctx.base is not None:
                report.run["scan"]["continued"] = []  # every check runs over every record: no state to continue
            report.notes = ctx.notes()
            scope = open_views(ctx, codes, step)

            def evaluate(sql: str, stem: str):
                return materialize(spark.sql(sql), options.evidence_rows, options.evidence_dir, stem)

            evaluate_checks(report, scope, codes, Dialect.spark, evaluate, step)
            if index_path:
                step("keeping the record index for the next --since-last run")
                report.index = incremental.keep(spark, config, run_id, index_path, ctx, stats)
        finally:
            ctx.release()
    report.run["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    return report


def evaluate_checks(report: AuditReport, scope: Scope, codes: list[str], dialect: Dialect,
                    evaluate: Callable[[str, str], tuple[int, list, str | None]], step: Callable[[str], None]) -> None:
    """Run the checks of `codes` (eoctl.expr.catalog) over the engine's views: `evaluate(sql,
    stem)` counts a check's evidence, samples it and keeps the rest in a file named after `stem`;
    each check with evidence becomes a finding of `report`."""
    from eoctl.expr import compile_sql
    from eoctl.expr.catalog import CHECKS
    from eoctl.expr.records import records_table

    records = records_table()
    for code in codes:
        step(f"{code}: {CATALOG[code].title}")
        for hit in CHECKS[code](scope, records, dialect):
            count, rows, path = evaluate(compile_sql(hit.evidence, dialect), f"{report.run['id']}-{code}-{hit.endpoint}")
            if count:
                report.findings.append(Finding(code, hit.endpoint, hit.where, count, rows, path))
            if code == "EO106":  # lines the scan could not read are part of what it scanned
                report.scanned["undecodable"] = report.scanned.get("undecodable", 0) + count


def run_audit_duckdb(config: Config, options: AuditOptions, codes: list[str],
                     progress: Callable[[str], None] | None = None) -> AuditReport:
    """The same audit on the DuckDB engine (eoctl.engine.duckdb_audit): in process, no JVM."""
    from eoctl.engine.duckdb_audit import run_audit as run_on_duckdb

    _check_since_last(options)
    endpoints = options.endpoints or list(config.endpoints)
    report = run_on_duckdb(config, options, codes, _run(uuid.uuid4().hex[:12], "duckdb", options, endpoints, codes),
                           progress or (lambda _m: None))
    report.run["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    return report


def _check_since_last(options: AuditOptions) -> None:
    if options.since_last and (options.ranges or options.since or options.until):
        raise UsageError("--since-last continues a full scan: it does not combine with --range, --since or --until")


def _run(run_id: str, engine: str, options: AuditOptions, endpoints: list[str], codes: list[str],
         ) -> dict[str, object]:
    return {
        "id": run_id,
        "engine": engine,
        "started_at": options.now.isoformat(),
        "endpoints": endpoints,
        "codes": codes,
        "grace_seconds": int(options.grace.total_seconds()),
        "stuck_after_seconds": int(options.stuck_after.total_seconds()),
    }


def _scan_summary(ctx: AuditContext, options: AuditOptions, total: int, stats: list) -> dict[str, object]:
    return incremental.scan_summary(ctx.base, ctx.fallback, options.since_last, total, sum(row[4] for row in stats))
