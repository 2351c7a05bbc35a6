"""Whether trace and the audit agree on the messages an audit's findings name."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from eoctl.findings import CATALOG, AuditReport, Severity, names_message
from eoctl.trace import Lookup, TraceOptions, TraceResult
from tests.helpers.audits import trace_spark


def named_messages(report: AuditReport) -> dict[str, set[str]]:
    """message id -> the codes whose evidence names it (every evidence row: none is left out)."""
    named: dict[str, set[str]] = defaultdict(set)
    for f in report.findings:
        if not CATALOG[f.code].message_scoped:
            continue
        assert len(f.evidence) == f.count, f"{f.code}: evidence incomplete, raise evidence_rows"
        for row in f.evidence:
            for message in names_message(f.code, row):
                named[message].add(f.code)
    return named


def trace_all(spark, config, ids: list[str], now: dt.datetime, grace: dt.timedelta,
              stuck_after: dt.timedelta) -> TraceResult:
    options = TraceOptions(now=now, grace=grace, stuck_after=stuck_after, full_scan=True)
    return trace_spark(spark, config, Lookup("message_id", ids[0], values=ids), options)


def assert_agree(report: AuditReport, result: TraceResult) -> dict[str, set[str]]:
    named = named_messages(report)
    traced = {m.message_id: {f["code"] for f in m.findings} for m in result.messages}
    verdicts = {m.message_id: m.verdict for m in result.messages}
    missing = sorted((m, c) for m, codes in named.items() for c in codes if c not in traced.get(m, set()))
    assert not missing, f"findings the audit names that trace does not: {missing[:10]}"
    extra = sorted((m, c) for m, codes in traced.items() for c in codes if c not in named.get(m, set()))
    assert not extra, f"findings trace names that the audit does not: {extra[:10]}"
    critical = {m for m, codes in named.items() if any(CATALOG[c].severity is Severity.CRITICAL for c in codes)}
    calm = sorted((m, verdicts[m].value) for m in critical if not verdicts[m].bad)
    assert not calm, f"messages with a critical finding and a verdict that needs no action: {calm}"
    return named
