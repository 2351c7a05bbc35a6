"""Outboxes that keep their rows once sent (`[endpoints.X.outbox] sent_column`, `sent_values`,
`retention`), on the chaos sample given docs/configuration.md's three layouts (tests/helpers/sent_outbox.py):

- sent rows are not pending: every finding but EO303 is the sample's own, on both engines (a sent
  row taken for pending would be a stuck entry, EO301, at once);
- EO303 names exactly the sent rows last updated before now - retention, with their age;
- replay-outbox, trace and gc-tokens' guard read pending rows only; replay marks a row sent;
- a sent_column the table lacks is a configuration problem (exit 6), never a finding.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from eoctl.audit import select_codes
from eoctl.ops.replay import ReplayOptions, find_stuck
from eoctl.stores.layout import StoreLayout
from tests.helpers.audits import audit_duckdb, audit_spark
from tests.helpers.chaos import recorded_copy, settled
from tests.helpers.cli import run_eoctl
from tests.helpers.sent_outbox import LAYOUTS, RETENTION, keep_sent_rows

pytestmark = pytest.mark.integration

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


def _options():
    return dataclasses.replace(settled(), now=NOW)


def _findings(report) -> dict[tuple, list[str]]:
    return {(f.code, f.endpoint, f.count): sorted(json.dumps(r, sort_keys=True, default=str) for r in f.evidence)
            for f in report.findings}


@pytest.fixture(scope="module")
def sample_findings(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple, list[str]]:
    chaos = recorded_copy(tmp_path_factory.mktemp("plain"))
    return _findings(audit_duckdb(chaos.config, _options(), select_codes(None, None)))


def _eo303(report) -> dict[tuple[str, str], int]:
    return {(row["endpoint"], row["incoming_message_id"]): row["age_seconds"]
            for f in report.findings if f.code == "EO303" for row in f.evidence}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_sent_rows_are_not_pending_and_eo303_names_those_past_the_retention(
        layout: str, tmp_path: Path, sample_findings: dict) -> None:
    chaos = recorded_copy(tmp_path)
    past = keep_sent_rows(chaos, LAYOUTS[layout], NOW)
    report = audit_duckdb(chaos.config, _options(), select_codes(None, None))
    found = _findings(report)
    assert {k: v for k, v in found.items() if k[0] != "EO303"} == sample_findings
    ages = _eo303(report)
    assert set(ages) == past
    # the age is the row's since its last update, in whole seconds
    assert all(age >= RETENTION.total_seconds() for age in ages.values())
    assert ages[("billing", "sent-billing-0")] == int((RETENTION + dt.timedelta(hours=1)).total_seconds())
    assert {f.where for f in report.findings if f.code == "EO303"} == {"eo_outbox"}
    # without a retention, sent rows are only not pending: no EO303
    text = chaos.config_path.read_text().replace('retention = "7d"\n', "")
    chaos.config_path.write_text(text)
    from eoctl.config import load_config

    plain = audit_duckdb(load_config(chaos.config_path), _options(), select_codes(None, None))
    assert _findings(plain) == sample_findings


def test_spark_reads_sent_rows_as_duckdb_does(spark, tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    past = keep_sent_rows(chaos, LAYOUTS["status"], NOW)
    codes = select_codes(None, None)
    on_spark = audit_spark(spark, chaos.config, _options(), codes)
    assert set(_eo303(on_spark)) == past
    assert _findings(on_spark) == _findings(audit_duckdb(chaos.config, _options(), codes))


def test_replay_trace_and_the_token_guard_read_pending_rows_only(tmp_path: Path) -> None:
    from eoctl.trace.stores import StoreLookups

    chaos = recorded_copy(tmp_path)
    keep_sent_rows(chaos, LAYOUTS["nservicebus"], NOW)
    layout = StoreLayout(chaos.config)
    stuck = find_stuck(layout, ReplayOptions(stuck_after=dt.timedelta(0), now=NOW))
    assert stuck and not [e for e in stuck if e.entry_id.startswith("sent-")]
    assert {e.entry_id for e in stuck} == {e.entry_id for e in find_stuck(
        StoreLayout(recorded_copy(tmp_path / "plain").config), ReplayOptions(stuck_after=dt.timedelta(0), now=NOW))}
    lookups = StoreLookups(chaos.config)
    assert lookups.entries(incoming={"sent-billing-0", "sent-shop-5"}, outgoing=set(), tokens=set()) == []
    held = next(e for e in stuck if e.endpoint == "billing")
    assert [e.incoming_message_id for e in lookups.entries(incoming={held.entry_id}, outgoing=set(),
                                                           tokens=set())] == [held.entry_id]
    # gc-tokens' guard: a token a pending entry holds stays; one only a sent row names goes
    from eoctl.ops.gc_tokens import _journal_and_delete_tokens
    from samples.reference.store import Store

    store = Store.open("duckdb", chaos.store_target)
    try:
        for token in ("tok-sent-billing-0", held.incoming_token_id):
            store.q("delete from billing.eo_tokens where token_id = %s", [token])
            store.q("insert into billing.eo_tokens values (%s, 'm', 'billing', 'a', %s)",
                    [token, NOW - dt.timedelta(days=30)])
    finally:
        store.close()
    tokens = StoreLayout(chaos.config).table("billing", "tokens")
    removed = _journal_and_delete_tokens(StoreLayout(chaos.config), tokens,
                                         ["tok-sent-billing-0", held.incoming_token_id], "run-1", NOW)
    assert removed == {"tok-sent-billing-0"}


def test_replay_marks_a_kept_row_sent_instead_of_deleting_it(tmp_path: Path) -> None:
    """The algorithm's last step on an outbox that keeps rows: the row stays, marked as the pipeline
    marks it (true, the time, or the first sent value), one version up; a later audit sees it sent."""
    from eoctl.ops.replay import _delete_entry
    from samples.reference.store import Store

    for name, expected in (("nservicebus", True), ("status", "SENT"), ("sent_at", NOW)):
        chaos = recorded_copy(tmp_path / name)
        keep_sent_rows(chaos, LAYOUTS[name], NOW)
        layout = StoreLayout(chaos.config)
        entry = find_stuck(layout, ReplayOptions(stuck_after=dt.timedelta(0), now=NOW, endpoints=["billing"]))[0]
        _delete_entry(layout, entry, NOW)
        column = LAYOUTS[name].ddl.split()[0]
        store = Store.open("duckdb", chaos.store_target)
        try:
            ((value, version),) = store.q(f"select {column}, version from billing.eo_outbox "
                                          "where incoming_message_id = %s", [entry.entry_id])
        finally:
            store.close()
        assert value == expected and version == entry.version + 1
        assert entry.entry_id not in {e.entry_id for e in find_stuck(
            StoreLayout(chaos.config), ReplayOptions(stuck_after=dt.timedelta(0), now=NOW))}


def test_a_sent_column_the_table_lacks_is_a_configuration_problem(tmp_path: Path, spark_jars: Path) -> None:
    chaos = recorded_copy(tmp_path)
    chaos.config_path.write_text(chaos.config_path.read_text()
                                 + '\n[endpoints.billing.outbox]\nsent_column = "dispatched_at"\n')
    lines = set()
    for engine in ("duckdb", "spark"):  # the same answer on both engines
        result = run_eoctl("--config", str(chaos.config_path), "--engine", engine, "audit",
                           env={"EOCTL_JARS_DIR": str(spark_jars)})
        assert result.code == 6, result.stderr
        line = result.stderr.strip().splitlines()[-1]
        assert "has no column 'dispatched_at'" in line and "endpoints.billing.outbox.sent_column" in line
        assert "Traceback" not in result.stderr
        lines.add(line)
    assert len(lines) == 1
    doctor = run_eoctl("--config", str(chaos.config_path), "--engine", "duckdb", "doctor")
    # doctor fails the table's row with the commands' sentence
    assert doctor.code != 0 and "has no column 'dispatched_at', which endpoints.billing.outbox.sent_column names" in (
        " ".join((doctor.stdout + doctor.stderr).replace("│", " ").split()))
    # a retention without a sent column is refused as the configuration is read
    chaos.config_path.write_text(chaos.config_path.read_text().replace('sent_column = "dispatched_at"',
                                                                       'retention = "7d"'))
    result = run_eoctl("--config", str(chaos.config_path), "audit")
    assert result.code == 2 and "retention needs sent_column" in result.stderr, result.stderr
