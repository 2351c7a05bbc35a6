"""`eoctl gc-outbox` (eoctl.ops.gc_outbox) on outboxes that keep their rows once sent: the chaos
sample's shop and billing outboxes given sent rows (tests/helpers/sent_outbox.py), in a DuckDB schema
per endpoint and in one PostgreSQL table every endpoint shares.

- the plan counts each endpoint's sent rows and plans exactly those past its retention; it changes nothing;
- --execute deletes them within --max-deletes, in journaled batches, a second run the rest; pending
  rows, young sent rows and other endpoints' rows are never touched; --restore puts each run back;
- a row that turned pending between the plan and its batch stays (skipped: changed);
- the CLI: one JSON line in the envelope, the metrics file, --restore.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from eoctl.ops import gc_outbox
from eoctl.ops.gc_flow import GcOptions
from eoctl.stores.layout import StoreLayout
from tests.helpers.chaos import ChaosRun, recorded_copy
from tests.helpers.cli import run_eoctl
from tests.helpers.sent_outbox import LAYOUTS, keep_sent_rows

pytestmark = pytest.mark.integration

NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


@pytest.fixture(params=["duckdb", "postgres-shared"])
def state(request, tmp_path: Path) -> tuple[ChaosRun, set[tuple[str, str]], list[str]]:
    """(the run, the rows past the retention, the outbox tables)."""
    chaos = recorded_copy(tmp_path)
    if request.param == "duckdb":
        past = keep_sent_rows(chaos, LAYOUTS["sent_at"], NOW)
        return chaos, past, ["shop.eo_outbox", "billing.eo_outbox", "shipping.eo_outbox"]
    from tests.helpers.layouts import shared_tables

    chaos = shared_tables(chaos, "postgres", request.getfixturevalue("postgres"))
    past = keep_sent_rows(chaos, LAYOUTS["status"], NOW,
                          tables={"shop": "shared.eo_outbox", "billing": "shared.eo_outbox"})
    return chaos, past, ["shared.eo_outbox"]


def _rows(chaos: ChaosRun, tables: list[str]) -> set[tuple]:
    from samples.reference.store import Store

    store = Store.open(chaos.store_kind, chaos.store_target)
    try:
        return {(table, *map(str, row)) for table in tables for row in store.q(f"select * from {table}")}
    finally:
        store.close()


def _ids(rows: set[tuple]) -> set[tuple[str, str]]:
    return {(r[1], r[2]) for r in rows}  # (endpoint, incoming_message_id)


def test_plan_execute_and_restore(state) -> None:
    chaos, past, tables = state
    before = _rows(chaos, tables)
    plan = gc_outbox.gc_outbox(chaos.config, GcOptions(now=NOW))
    assert {t.endpoint: (t.garbage, t.planned, t.skipped_young) for t in plan.tallies} == {
        "billing": (7, 4, 3), "shop": (7, 4, 3)}
    assert {(r["endpoint"], r["incoming_message_id"]) for r in plan.sample} == past
    assert any("shipping" in n and "sent_column" in n for n in plan.notes)
    assert _rows(chaos, tables) == before

    first = gc_outbox.gc_outbox(chaos.config, GcOptions(now=NOW, execute=True, max_deletes=5, batch_size=3))
    assert first.totals()["deleted"] == 5 and first.totals()["skipped_over_limit"] == 3
    after_first = _rows(chaos, tables)
    gone = _ids(before) - _ids(after_first)
    # endpoint then key order: billing's four, then shop's first
    assert gone == {p for p in past if p[0] == "billing"} | {("shop", "sent-shop-0")}
    assert after_first <= before
    second = gc_outbox.gc_outbox(chaos.config, GcOptions(now=NOW, execute=True))
    assert second.totals()["deleted"] == 3
    after = _rows(chaos, tables)
    assert _ids(before) - _ids(after) == past  # pending rows, young sent rows, shipping's: all kept
    assert gc_outbox.gc_outbox(chaos.config, GcOptions(now=NOW, execute=True)).totals()["deleted"] == 0

    assert gc_outbox.restore(chaos.config, second.run_id, execute=False).restored["outbox rows"] == 3
    assert gc_outbox.restore(chaos.config, second.run_id).restored["outbox rows"] == 3
    assert gc_outbox.restore(chaos.config, first.run_id).restored["outbox rows"] == 5
    assert _rows(chaos, tables) == before
    assert gc_outbox.restore(chaos.config, first.run_id).already_restored


def test_a_row_pending_again_since_the_plan_stays(state) -> None:
    from samples.reference.store import Store

    chaos, past, tables = state
    layout = StoreLayout(chaos.config)
    options = GcOptions(now=NOW, execute=True)
    rows = [r for r in gc_outbox.OutboxPlan(None, layout, options, gc_outbox.KIND).rows(100)
            if r["endpoint"] == "billing"]
    assert {("billing", r["incoming_message_id"]) for r in rows} == {p for p in past if p[0] == "billing"}
    column = "sent_at" if chaos.store_kind == "duckdb" else "status"
    store = Store.open(chaos.store_kind, chaos.store_target)
    try:  # the pipeline takes one back (a resend): pending again
        store.q(f"update {tables[0] if chaos.store_kind != 'duckdb' else 'billing.eo_outbox'} set {column} = "
                f"{'null' if column == 'sent_at' else chr(39) + 'PENDING' + chr(39)} "
                "where incoming_message_id = %s", [rows[0]["incoming_message_id"]])
    finally:
        store.close()
    tally = gc_outbox.Tally("billing")
    gc_outbox._delete_batch(layout, "billing", rows, "run-x", options, tally)
    assert (tally.deleted, tally.skipped_changed) == (len(rows) - 1, 1)
    left = _ids(_rows(chaos, tables))
    assert ("billing", rows[0]["incoming_message_id"]) in left


def test_the_cli_prints_one_json_line_writes_metrics_and_restores(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    keep_sent_rows(chaos, LAYOUTS["nservicebus"], NOW)
    metrics = tmp_path / "gc.prom"
    result = run_eoctl("--config", str(chaos.config_path), "--format", "json", "gc-outbox", "--execute",
                       "--endpoint", "billing", "--metrics-file", str(metrics))
    assert result.code == 0, result.stderr
    (line,) = result.stdout.strip().splitlines()
    doc = json.loads(line)
    assert doc["command"] == "gc-outbox" and doc["deleted"] == 4 and doc["run"]["id"] == doc["run_id"]
    assert [e["endpoint"] for e in doc["endpoints"]] == ["billing"]
    text = metrics.read_text()
    assert 'eoctl_gc_outbox_deleted{endpoint="billing"} 4' in text
    restored = run_eoctl("--config", str(chaos.config_path), "gc-outbox", "--restore", doc["run_id"], "--execute")
    assert restored.code == 0, restored.stderr
    again = run_eoctl("--config", str(chaos.config_path), "--format", "json", "gc-outbox", "--endpoint", "billing")
    assert json.loads(again.stdout)["planned"] == 4


def test_the_plan_names_its_own_fields_and_shows_the_rows_it_would_delete(tmp_path: Path) -> None:
    """gc-outbox's JSON says sent / skipped_within_retention (not a token gc's garbage / young) and
    lists the planned rows (entry, sent time, age); the text shows them too. How long the journal
    keeps removed rows is --keep-removed, a name no outbox's `retention` can be taken for
    (--retention, its first name, is still taken)."""
    chaos = recorded_copy(tmp_path)
    past = keep_sent_rows(chaos, LAYOUTS["status"], NOW)
    args = ("--config", str(chaos.config_path), "gc-outbox", "--endpoint", "billing")
    plan = run_eoctl(*args[:2], "--format", "json", *args[2:], "--keep-removed", "3d")
    assert plan.code == 0, plan.stderr
    doc = json.loads(plan.stdout)
    assert (doc["sent"], doc["planned"], doc["skipped_within_retention"]) == (7, 4, 3)
    assert "garbage" not in doc and "skipped_young" not in doc and "grace_seconds" not in doc
    rows = doc["planned_rows"]
    assert {(r["endpoint"], r["incoming_message_id"]) for r in rows} == {p for p in past if p[0] == "billing"}
    assert all(r["age_seconds"] > 7 * 86400 and r["updated_at"] for r in rows)
    text = run_eoctl(*args)
    assert "first planned outbox rows (entry, sent, age):" in text.stderr
    assert "entry=sent-billing-0" in text.stderr and "age=7." in text.stderr  # past 7d, as old as the test
    assert run_eoctl(*args, "--retention", "3d").code == 0
    assert "--keep-removed" in run_eoctl("gc-outbox", "--help").stdout
    assert "--retention" not in run_eoctl("gc-outbox", "--help").stdout
