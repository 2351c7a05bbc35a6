"""trace and the audit agree on a generated state: the findings trace reports on a message come from
the catalog's own checks (eoctl.expr.catalog), so every message a finding names shows that
finding in its trace, trace names no finding the audit does not, and no message with a critical
finding gets a verdict that needs no action. (The same on the chaos sample: tests/trace/test_chaos_verdicts.py.)"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from eoctl.audit import select_codes
from tests.helpers.audits import audit_spark
from eoctl.config import load_config
from eoctl.options import AuditOptions
from eoctl.findings import CATALOG, names_message
from tests.helpers.trace_agreement import assert_agree, named_messages, trace_all

pytestmark = pytest.mark.integration


def test_trace_agrees_with_the_audit_on_a_generated_state(spark, tmp_path: Path) -> None:
    """Every message-scoped code the generator injects, a few of each, traced in one pass."""
    from samples.generator import DEFAULT_MIX, GenSpec, generate

    truth = generate(GenSpec(2_000, tmp_path / "gen", partitions=2, blob_every=20,
                     mix={c: r * 10 for c, r in DEFAULT_MIX.items()}))
    config = load_config(tmp_path / "gen" / "eoctl.toml")
    now, grace, stuck = dt.datetime.now(dt.timezone.utc), dt.timedelta(hours=24), dt.timedelta(minutes=15)
    report = audit_spark(spark, config, AuditOptions(now=now, grace=grace, stuck_after=stuck),
                       select_codes(None, None))
    named = named_messages(report)
    # the generator's EO105 records carry no message id, and its orphan blobs no intent: they name none
    injected = {c for c, v in truth["codes"].items() if v["count"] and CATALOG[c].message_scoped}
    assert {c for codes in named.values() for c in codes} == injected - {"EO105", "EO401"}
    assert len(injected) >= 9, injected
    result = trace_all(spark, config, sorted(named), now, grace, stuck)
    assert_agree(report, result)

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
    alone = trace_all(spark, config, picked, now, grace, stuck)
    causes = [{c.causation_id for c in m.copies} | {m.message_id} for m in alone.messages]
    assert all(not (a & b) for i, a in enumerate(causes) for b in causes[i + 1:]), "picked messages are related"
    for m in alone.messages:
        assert {f["code"] for f in m.findings} == named[m.message_id], m.message_id
