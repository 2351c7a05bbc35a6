"""trace and the audit agree: the findings trace reports on a message come from the checks' own
definitions (eoctl.checks.scoped), so every message a finding names shows that finding in its
trace, trace names no finding the audit does not, and no message with a critical finding gets a
verdict that needs no action. On the chaos sample and on a generated state."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from pathlib import Path

import pytest

from eoctl.audit import run_audit, select_codes
from eoctl.checks.context import AuditOptions
from eoctl.config import load_config
from eoctl.report.findings import CATALOG, AuditReport, Severity, names_message
from eoctl.trace import Lookup, TraceOptions, TraceResult, run_trace
from tests.helpers.chaos import recorded_copy

pytestmark = pytest.mark.integration


def _named(report: AuditReport) -> dict[str, set[str]]:
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


def _trace_all(spark, config, ids: list[str], now: dt.datetime, grace: dt.timedelta,
               stuck_after: dt.timedelta) -> TraceResult:
    options = TraceOptions(now=now, grace=grace, stuck_after=stuck_after, full_scan=True)
    return run_trace(spark, config, Lookup("message_id", ids[0], values=ids), options)


def _assert_agree(report: AuditReport, result: TraceResult) -> dict[str, set[str]]:
    named = _named(report)
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


def test_trace_agrees_with_the_audit_on_the_chaos_sample(spark, tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    now, zero = dt.datetime.now(dt.timezone.utc), dt.timedelta(0)
    report = run_audit(spark, chaos.config, AuditOptions(now=now, grace=zero, stuck_after=zero),
                       select_codes(None, None))
    named = _named(report)
    ids = sorted(named)
    result = _trace_all(spark, chaos.config, ids, now, zero, zero)
    assert sorted(m.message_id for m in result.messages) == ids
    named = _assert_agree(report, result)
    # what the sample holds: every message-scoped code it injects shows on some message
    assert {c for codes in named.values() for c in codes} >= {"EO101", "EO102", "EO201", "EO301", "EO302",
                                                              "EO402", "EO403", "EO501"}
    # one pass over several messages gives each the verdict and findings it gets alone
    by_id = {m.message_id: m for m in result.messages}
    for code in ("EO302", "EO403"):
        alone_id = min(m for m, codes in named.items() if code in codes)
        alone = run_trace(spark, chaos.config, Lookup("message_id", alone_id),
                          TraceOptions(now=now, grace=zero, stuck_after=zero, full_scan=True)).messages[0]
        together = by_id[alone_id]
        assert (alone.verdict, sorted(f["code"] for f in alone.findings)) == (
            together.verdict, sorted(f["code"] for f in together.findings)), code


def test_trace_agrees_with_the_audit_on_a_generated_state(spark, tmp_path: Path) -> None:
    """Every message-scoped code the generator injects, a few of each, traced in one pass."""
    from samples.generator import DEFAULT_MIX, GenSpec, generate

    truth = generate(GenSpec(2_000, tmp_path / "gen", partitions=2, blob_every=20,
                     mix={c: r * 10 for c, r in DEFAULT_MIX.items()}))
    config = load_config(tmp_path / "gen" / "eoctl.toml")
    now, grace, stuck = dt.datetime.now(dt.timezone.utc), dt.timedelta(hours=24), dt.timedelta(minutes=15)
    report = run_audit(spark, config, AuditOptions(now=now, grace=grace, stuck_after=stuck),
                       select_codes(None, None))
    named = _named(report)
    # the generator's EO105 records carry no message id, and its orphan blobs no intent: they name none
    injected = {c for c, v in truth["codes"].items() if v["count"] and CATALOG[c].message_scoped}
    assert {c for codes in named.values() for c in codes} == injected - {"EO105", "EO401"}
    assert len(injected) >= 9, injected
    result = _trace_all(spark, config, sorted(named), now, grace, stuck)
    _assert_agree(report, result)

    # Traced together, one message's rows can make up for what another's trace failed to gather (the
    # other message of an EO103 pair, the other attempts of an EO302 ghost). So one message per code,
    # none sharing a finding row or a causation with another, is traced again in one pass.
    picked: list[str] = []
    rows = [names_message(f.code, r) for f in report.findings if CATALOG[f.code].message_scoped
            for r in f.evidence]
    for code in sorted(injected - {"EO105", "EO401"}):
        free = sorted(m for m, codes in named.items() if code in codes
                      and not any(m in r and set(picked) & r for r in rows))
        picked.append(free[0])
    alone = _trace_all(spark, config, picked, now, grace, stuck)
    causes = [{c.causation_id for c in m.copies} | {m.message_id} for m in alone.messages]
    assert all(not (a & b) for i, a in enumerate(causes) for b in causes[i + 1:]), "picked messages are related"
    for m in alone.messages:
        assert {f["code"] for f in m.findings} == named[m.message_id], m.message_id
