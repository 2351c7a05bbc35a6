"""gc on the chaos pipeline: exactly the injected garbage tokens and blobs are collected, a second
run changes nothing, and --restore puts the state back byte for byte (DuckDB archive on the Spark
engine, PostgreSQL live and the recorded state in MySQL on the DuckDB engine, its ids as text and as
BINARY(16); the parity tests hold the engines' plans equal)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.audits import audit_spark
from eoctl.ops import gc_blobs, gc_tokens
from eoctl.ops.gc_flow import GcOptions
from tests.helpers.chaos import ChaosRun, injected_garbage, live_run, recorded_copy, removed, settled, snapshot, store_rows
from tests.helpers.configs import on_engine

pytestmark = pytest.mark.integration


@pytest.fixture(params=["recorded-duckdb", "live-postgres", "recorded-mysql", "recorded-mysql-binary-ids"])
def chaos(request, tmp_path: Path) -> ChaosRun:
    if request.param == "recorded-duckdb":
        return recorded_copy(tmp_path)
    if request.param.startswith("recorded-mysql"):
        from tests.helpers.mysql_state import mysql_copy

        # binary ids: the ids as BINARY(16) (UUID_TO_BIN's), bound and read back as their text
        run = mysql_copy(recorded_copy(tmp_path), request.getfixturevalue("mariadb"),
                         binary_ids=request.param.endswith("binary-ids"))
        return replace(run, config=on_engine(run.config, "duckdb"))
    run = live_run("postgres", tmp_path, request.getfixturevalue("kafka"), request.getfixturevalue("postgres"))
    return replace(run, config=on_engine(run.config, "duckdb"))


def _on_duckdb(tmp_path: Path) -> ChaosRun:
    """The recorded sample, gc on the DuckDB engine: what is checked here does not depend on it."""
    run = recorded_copy(tmp_path)
    return replace(run, config=on_engine(run.config, "duckdb"))


def test_gc_collects_the_injected_garbage_and_nothing_else_then_restores_it(spark, chaos: ChaosRun) -> None:
    garbage_messages, garbage_blobs = injected_garbage(chaos)
    assert garbage_messages and garbage_blobs, "the chaos plan injects garbage of both kinds"
    before = snapshot(chaos)
    options = GcOptions(grace=dt.timedelta(0), execute=True)

    tokens = gc_tokens.gc_tokens(spark, chaos.config, options)
    blobs = gc_blobs.gc_blobs(spark, chaos.config, options)
    after = snapshot(chaos)

    rows, files = removed(before, after)
    token_rows = {row for table, row in rows if table.endswith("eo_tokens")}
    intent_rows = {row for table, row in rows if table.endswith("eo_intents")}
    assert {r[1] for r in token_rows} == garbage_messages  # eo_tokens(token_id, message_id, ...)
    assert files == garbage_blobs
    # their intents go with them, and only theirs: (intent_id, endpoint, incoming, attempt, kind, ref, created_at)
    assert {(r[4], r[5]) for r in intent_rows} == {("token", r[0]) for r in token_rows} | {("blob", b) for b in files}
    assert tokens.totals()["deleted"] == len(token_rows) and blobs.totals()["deleted"] == len(files)
    quarantined = {f.split("/", 2)[2] for f in after["files"] if f.startswith(".eoctl-quarantine/")}
    assert quarantined == garbage_blobs

    # the audit no longer sees them, and sees everything else as before
    report = audit_spark(spark, chaos.config, settled(), ["EO201", "EO401"])
    assert report.findings == []
    # a second run finds nothing to do
    again = gc_tokens.gc_tokens(spark, chaos.config, options)
    assert again.totals()["planned"] == again.totals()["deleted"] == 0
    assert gc_blobs.gc_blobs(spark, chaos.config, options).totals()["deleted"] == 0
    assert snapshot(chaos) == after

    # --restore without --execute says what it would put back, and changes nothing
    planned = gc_tokens.restore(chaos.config, tokens.run_id, execute=False)
    assert not planned.executed and planned.restored == {"tokens": len(token_rows), "intents": len(token_rows)}
    assert gc_blobs.restore(chaos.config, blobs.run_id, execute=False).restored == {"blobs": len(files),
                                                                                    "intents": len(files)}
    assert snapshot(chaos) == after
    # --restore puts back exactly what was removed; restoring twice is harmless
    assert gc_tokens.restore(chaos.config, tokens.run_id).restored == {"tokens": len(token_rows),
                                                                       "intents": len(token_rows)}
    assert gc_blobs.restore(chaos.config, blobs.run_id).restored == {"blobs": len(files), "intents": len(files)}
    assert gc_tokens.restore(chaos.config, tokens.run_id).already_restored
    assert snapshot(chaos) == before


def test_a_plan_changes_nothing(spark, tmp_path: Path) -> None:
    chaos = _on_duckdb(tmp_path)
    before = snapshot(chaos)
    plan = gc_tokens.gc_tokens(spark, chaos.config, GcOptions(grace=dt.timedelta(0)))
    assert plan.totals()["planned"] == 1 and plan.totals()["deleted"] == 0 and not plan.executed
    assert gc_blobs.gc_blobs(spark, chaos.config, GcOptions(grace=dt.timedelta(0))).totals()["planned"] == 1
    assert snapshot(chaos) == before
    # an hour after the recording, the default 24h grace makes the same garbage young: left alone
    recorded = max(r[0] for r in store_rows(chaos, "select created_at from shipping.eo_tokens"))
    young = gc_tokens.gc_tokens(spark, chaos.config, GcOptions(now=recorded + dt.timedelta(hours=1)))
    assert (young.totals()["planned"], young.totals()["skipped_young"]) == (0, 1)


def test_what_is_past_the_retention_is_purged_for_good(spark, tmp_path: Path) -> None:
    chaos = _on_duckdb(tmp_path)
    options = GcOptions(grace=dt.timedelta(0), execute=True)
    tokens = gc_tokens.gc_tokens(spark, chaos.config, options)
    blobs = gc_blobs.gc_blobs(spark, chaos.config, options)
    assert {f.split("/")[0] for f in snapshot(chaos)["files"]} >= {".eoctl-quarantine"}
    assert store_rows(chaos, "select count(*) from shipping.eoctl_journal_eo_tokens")[0][0] == 1

    # the next runs, with no retention, purge both: the quarantine folder goes away entirely
    purge = GcOptions(grace=dt.timedelta(0), execute=True, retention=dt.timedelta(0))
    assert gc_blobs.gc_blobs(spark, chaos.config, purge).purged == 1
    assert gc_tokens.gc_tokens(spark, chaos.config, purge).purged == 2  # the token and its intent
    after = snapshot(chaos)
    assert not [f for f in after["files"] if f.startswith(".eoctl")] and ".eoctl-quarantine" not in after["dirs"]
    assert store_rows(chaos, "select state from billing.eoctl_journal_blobs") == [("purged",)]
    assert store_rows(chaos, "select count(*) from shipping.eoctl_journal_eo_tokens")[0][0] == 0
    assert store_rows(chaos, "select count(*) from billing.eoctl_journal_eo_intents")[0][0] == 0
    # a purged run cannot be restored any more: nothing comes back
    assert gc_tokens.restore(chaos.config, tokens.run_id).restored == {"tokens": 0, "intents": 0}
    assert gc_blobs.restore(chaos.config, blobs.run_id).restored == {"blobs": 0, "intents": 0}
