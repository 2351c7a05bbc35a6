"""`eoctl audit`: run the selected checks over one shared scan and return typed findings."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from eoctl.checks.context import AuditContext, AuditOptions
from eoctl.config.model import Config
from eoctl.engine.evidence import materialize
from eoctl.errors import UsageError
from eoctl.report.findings import CATALOG, AuditReport, Finding

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
                count, rows, path = materialize(df, options.evidence_rows, options.evidence_dir,
                                                f"{report.run['id']}-{code}-{endpoint}")
                if count:
                    report.findings.append(Finding(code, endpoint, where, count, rows, path))
    finally:
        ctx.release()
    report.run["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    return report
