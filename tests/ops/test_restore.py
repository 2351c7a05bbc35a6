"""`--restore RUN` through the commands, on the chaos sample's stores laid out as users lay theirs
out: every endpoint in one shared table (DuckDB and PostgreSQL), without a primary key.

Each case lost rows for good before: the journal was emptied whatever the restore put back.
- one pending row with a NULL incoming message id (NOT IN over a NULL is never true): gc-outbox's run
  came back empty; a NULL token id did the same to gc-tokens;
- a shared outbox whose endpoints carry the same incoming message ids: billing's rows were taken for
  shop's, never put back;
- a table that gained a column since the run: the restore failed half-way;
- a row written again under a journaled identity: kept journaled and named, exit 3, and a restore
  after it is gone puts back the rest (the full property: tests/ops/test_restore_property.py).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from eoctl.errors import ExitCode
from eoctl.ops import gc_outbox
from eoctl.ops.gc_flow import GcOptions
from tests.helpers.chaos import ChaosRun, recorded_copy, store_rows
from tests.helpers.cli import run_eoctl
from tests.helpers.layouts import shared_tables
from tests.helpers.sent_outbox import LAYOUTS, keep_sent_rows

pytestmark = pytest.mark.integration

NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
OUTBOX = "shared.eo_outbox"


@pytest.fixture(params=["duckdb", "postgres"])
def shared(request, tmp_path: Path) -> ChaosRun:
    """The chaos sample in shared tables without a primary key, shop's and billing's outboxes
    keeping sent rows (a status column), some past the 7-day retention."""
    chaos = recorded_copy(tmp_path)
    chaos = shared_tables(chaos, request.param,
                          request.getfixturevalue("postgres") if request.param == "postgres" else None)
    if request.param == "postgres":
        store_rows(chaos, "alter table shared.eo_outbox drop constraint eo_outbox_pkey, "
                  "alter column incoming_message_id drop not null")
        store_rows(chaos, "alter table shared.eo_tokens drop constraint eo_tokens_pkey, alter column token_id drop not null")
    keep_sent_rows(chaos, LAYOUTS["status"], NOW, tables={"shop": OUTBOX, "billing": OUTBOX})
    return chaos


def _rows(chaos: ChaosRun, table: str) -> list[tuple]:
    return sorted((tuple(map(str, r)) for r in store_rows(chaos, f"select * from {table}")))


def _pending_row(chaos: ChaosRun, endpoint: str, message_id: str | None, sent: str = "PENDING") -> None:
    store_rows(chaos, f"insert into {OUTBOX} (endpoint, incoming_message_id, incoming_token_id, attempt_id, outgoing, "
              "tokens_committed_at, created_at, updated_at, version, status) "
              "values (%s, %s, 'tok-x', 'att-x', '[]', %s, %s, %s, 2, %s)",
       [endpoint, message_id, NOW, NOW, NOW - dt.timedelta(days=30), sent])


def _gc(chaos: ChaosRun, *args: str):
    return run_eoctl("--config", str(chaos.config_path), "--format", "json", *args, env=chaos.environ)


def _restored(chaos: ChaosRun, command: str, run_id: str):
    result = _gc(chaos, command, "--restore", run_id, "--execute")
    return result, json.loads(result.stdout)["restore"] if result.stdout.strip() else None


def test_a_null_key_and_ids_shared_across_endpoints_lose_nothing(shared: ChaosRun) -> None:
    _pending_row(shared, "shop", None)  # a pending row without its id: the table's key is not unique
    for i in range(4):  # shop carries the ids of billing's rows past the retention
        _pending_row(shared, "shop", f"sent-billing-{i}")
    before = _rows(shared, OUTBOX)
    run = _gc(shared, "gc-outbox", "--execute", "--endpoint", "billing")
    assert run.code == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["deleted"] == 4
    assert len(_rows(shared, OUTBOX)) == len(before) - 4
    result, restore = _restored(shared, "gc-outbox", doc["run_id"])
    assert result.code == 0, result.stderr[-2000:]
    assert restore["restored"]["outbox rows"] == 4 and restore["not_restored"] == []
    assert _rows(shared, OUTBOX) == before
    assert store_rows(shared, "select count(*) from shared.eoctl_journal_eo_outbox")[0][0] == 0


def test_a_restore_after_the_table_gained_a_column_copies_the_journals_columns(shared: ChaosRun) -> None:
    run = gc_outbox.gc_outbox(shared.config, GcOptions(now=NOW, execute=True))
    assert run.totals()["deleted"] == 8
    store_rows(shared, "alter table shared.eo_outbox add column added_later varchar")
    store_rows(shared, "alter table shared.eo_intents add column added_later varchar")
    restored = gc_outbox.restore(shared.config, run.run_id)
    assert restored.restored["outbox rows"] == 8 and restored.not_restored == []
    assert store_rows(shared, "select count(*) from shared.eo_outbox where status = 'SENT' and added_later is null")[0][0] == 14


def test_a_row_written_again_stays_journaled_named_and_comes_back_once_it_is_gone(shared: ChaosRun) -> None:
    before = _rows(shared, OUTBOX)
    run = _gc(shared, "gc-outbox", "--execute", "--endpoint", "billing")
    run_id = json.loads(run.stdout)["run_id"]
    _pending_row(shared, "billing", "sent-billing-2")  # the pipeline wrote that id again since
    plan = _gc(shared, "gc-outbox", "--restore", run_id)
    assert plan.code == 0 and json.loads(plan.stdout)["restore"]["restored"]["outbox rows"] == 3
    result, restore = _restored(shared, "gc-outbox", run_id)
    assert result.code == ExitCode.RUNTIME, result.stderr[-2000:]
    assert restore["restored"]["outbox rows"] == 3
    assert [(x["endpoint"], x["name"]) for x in restore["not_restored"]] == [("billing", "sent-billing-2")]
    assert "holds a row with this incoming_message_id again" in restore["not_restored"][0]["why"]
    store_rows(shared, f"delete from {OUTBOX} where endpoint = 'billing' and incoming_message_id = 'sent-billing-2'")
    result, restore = _restored(shared, "gc-outbox", run_id)
    assert result.code == 0 and restore["restored"]["outbox rows"] == 1
    assert _rows(shared, OUTBOX) == before
    again, restore = _restored(shared, "gc-outbox", run_id)
    assert again.code == 0 and restore["already_restored"]


def test_a_null_token_id_in_the_tokens_table_loses_no_token(shared: ChaosRun) -> None:
    store_rows(shared, "insert into shared.eo_tokens (token_id, message_id, destination, attempt_id, created_at) "
               "values (null, 'm-null', 'billing', 'a-null', %s)", [NOW - dt.timedelta(days=30)])
    before = _rows(shared, "shared.eo_tokens")
    run = _gc(shared, "--engine", "duckdb", "gc-tokens", "--execute", "--grace", "0s")
    assert run.code == 0, run.stderr[-2000:]
    removed = json.loads(run.stdout)["deleted"]
    assert removed > 0 and len(_rows(shared, "shared.eo_tokens")) == len(before) - removed
    result, restore = _restored(shared, "gc-tokens", json.loads(run.stdout)["run_id"])
    assert result.code == 0, result.stderr[-2000:]
    assert restore["restored"]["tokens"] == removed
    assert _rows(shared, "shared.eo_tokens") == before
