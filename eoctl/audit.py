"""`eoctl audit`: run the selected checks over one shared scan and return typed findings."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eoctl.checks.context import AuditContext, AuditOptions
from eoctl.config.model import Config
from eoctl.errors import UsageError
from eoctl.report.findings import CATALOG, AuditReport, Finding

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def _materialize(df: DataFrame, options: AuditOptions, stem: str) -> tuple[int, list[dict[str, Any]], str | None]:
    """Count a finding's evidence and bring back at most `evidence_rows` of it; the rest of a large
    evidence set is written as Parquet beside the report, never collected.

    The evidence is computed once (count) and kept (memory, then disk) while it is sampled and
    written: a check's plan is the costly part, never the evidence it ends in.
    """
    from pyspark import StorageLevel

    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        count = df.count()
        if not count:
            return 0, [], None
        rows = [_jsonable(r.asDict(recursive=True)) for r in df.limit(options.evidence_rows).collect()]
        path = None
        if count > options.evidence_rows and options.evidence_dir is not None:
            path = str(options.evidence_dir / f"{stem}.parquet")
            df.write.mode("overwrite").parquet(path)
        return count, rows, path
    finally:
        df.unpersist()


def run_audit(
    spark: SparkSession,
    config: Config,
    options: AuditOptions,
    codes: list[str],
    progress: Callable[[str], None] | None = None,
) -> AuditReport:
    from eoctl.checks import all_checks

    step = progress or (lambda _m: None)
    ctx = AuditContext(spark, config, options)
    checks = all_checks()
    report = AuditReport(run={
        "id": uuid.uuid4().hex[:12],
        "started_at": options.now.isoformat(),
        "endpoints": list(ctx.endpoints),
        "codes": codes,
        "grace_seconds": int(options.grace.total_seconds()),
        "stuck_after_seconds": int(options.stuck_after.total_seconds()),
    })
    try:
        step("reading the records of every input")
        report.scanned["records"] = ctx.records.count()  # the one scan all checks share
        for code in codes:
            step(f"{code}: {CATALOG[code].title}")
            for _code, endpoint, where, df in checks[code](ctx):
                count, rows, path = _materialize(df, options, f"{report.run['id']}-{code}-{endpoint}")
                if count:
                    report.findings.append(Finding(code, endpoint, where, count, rows, path))
    finally:
        ctx.release()
    report.run["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    return report
