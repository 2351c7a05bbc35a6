"""A timestamp without time zone holds UTC (docs/configuration.md), whatever the zone of the process or of the server:
gc-outbox's plan and execution and the audit's EO303 count the same sent rows past the retention.

Before, an outbox whose `updated_at` is `timestamp` (no zone) was compared against gc's aware cutoff
in the session's zone: with TZ=Asia/Tokyo (DuckDB follows the process) or a PostgreSQL database whose
`timezone` is Asia/Tokyo, rows 6d23h old were taken for 7d8h old and deleted inside the retention.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tests.helpers.chaos import ChaosRun, recorded_copy
from tests.helpers.cli import run_eoctl
from tests.helpers.sent_outbox import LAYOUTS, keep_sent_rows

pytestmark = pytest.mark.integration

NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
ZONE = {"TZ": "Asia/Tokyo"}


def _store(chaos: ChaosRun):
    from samples.reference.store import Store

    return Store.open(chaos.store_kind, chaos.store_target)


@pytest.fixture(params=["duckdb", "postgres"])
def naive(request, tmp_path: Path) -> tuple[ChaosRun, str]:
    """The chaos sample whose billing outbox keeps sent rows with a naive `updated_at` (UTC wall
    times): 4 past the 7-day retention, 3 young, and 3 more 6d23h old; the outbox's table."""
    chaos = recorded_copy(tmp_path)
    table = "billing.eo_outbox"
    if request.param == "postgres":
        from tests.helpers.layouts import shared_tables

        postgres = request.getfixturevalue("postgres")
        chaos = shared_tables(chaos, "postgres", postgres)
        table = "shared.eo_outbox"
    keep_sent_rows(chaos, LAYOUTS["status"], NOW, tables={"billing": table})
    store = _store(chaos)
    try:
        if chaos.store_kind == "duckdb":
            store.q("set TimeZone = 'UTC'")  # the column's values converted as the UTC wall times
            store.q(f"alter table {table} alter column updated_at type timestamp")
        else:
            store.q(f"alter table {table} alter column updated_at type timestamp using updated_at at time zone 'UTC'")
            name = chaos.store_target.split("dbname=")[1].split()[0]
            store.q(f"alter database {name} set timezone to 'Asia/Tokyo'")
        for i in range(3):
            at = (NOW - dt.timedelta(days=7) + dt.timedelta(hours=1, minutes=i)).replace(tzinfo=None)
            store.q(f"insert into {table} (endpoint, incoming_message_id, incoming_token_id, attempt_id, outgoing, "
                    "tokens_committed_at, created_at, updated_at, version, status) "
                    "values ('billing', %s, %s, 'att', '[]', %s, %s, %s, 2, 'SENT')",
                    [f"inside-{i}", f"tok-inside-{i}", NOW, NOW, at])
    finally:
        store.close()
    return chaos, table


def _eoctl(chaos: ChaosRun, *args: str):
    result = run_eoctl("--config", str(chaos.config_path), "--format", "json", *args, env={**chaos.environ, **ZONE})
    assert result.code in (0, 1), result.stderr[-2000:]
    return json.loads(result.stdout)


def test_gc_outbox_and_eo303_count_naive_times_as_utc_in_any_zone(naive) -> None:
    chaos, table = naive
    plan = _eoctl(chaos, "gc-outbox", "--endpoint", "billing")
    assert plan["planned"] == 4 and plan["skipped_within_retention"] == 6
    audit = _eoctl(chaos, "--engine", "duckdb", "audit", "--select", "EO303", "--no-record", "-e", "billing")
    (eo303,) = [f for f in audit["findings"] if f["code"] == "EO303"]
    assert eo303["count"] == 4, eo303
    done = _eoctl(chaos, "gc-outbox", "--endpoint", "billing", "--execute")
    assert done["deleted"] == 4
    store = _store(chaos)
    try:
        left = {r[0] for r in store.q(f"select incoming_message_id from {table} where endpoint = 'billing' "
                                      "and status = 'SENT'")}
    finally:
        store.close()
    assert {f"inside-{i}" for i in range(3)} <= left and not any(m in left for m in (f"sent-billing-{i}" for i in range(4)))
