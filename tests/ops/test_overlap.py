"""Overlapping runs, as cron makes them: while gc-tokens, gc-blobs and replay-outbox --execute run,
20 more attempts of each are refused (exit 4) without disturbing them, an audit of the checks that
read what the holders change runs meanwhile, and each holder does exactly what it would have done
alone (DuckDB and PostgreSQL control stores).

Each holder is held at a known point after it took its lease: on DuckDB the test keeps the
database file open for writing (as the pipeline might), on PostgreSQL it locks the run-log table.
The refused attempts and the audit start while the holders wait there. Every run is on the DuckDB
engine: leases, refusals and what the holders change are the same code on both engines, and three
Spark drivers at once on this test's machine cost minutes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import duckdb
import psycopg
import pytest

from eoctl.ops.lease import RunLog
from tests.helpers.chaos import ChaosRun, injected_garbage, live_run, removed, snapshot, store_rows
from tests.helpers.kill import locked, start_eoctl
from tests.helpers.servers import wait_until

pytestmark = pytest.mark.integration

ATTEMPTS = 20


def _holds_lease(chaos: ChaosRun, command: str, pid: int) -> bool:
    """The control store (shop's) says process `pid` holds `command`'s lease."""
    if chaos.store_kind == "duckdb":
        lock = Path(f"{chaos.store_target}.eoctl-{command}.lock")
        try:
            return json.loads(lock.read_text() or "{}").get("pid") == pid
        except (OSError, ValueError):
            return False
    with psycopg.connect(chaos.store_target) as conn:
        row = conn.execute("select holder_pid from shop.eoctl_leases where name = %s", [command]).fetchone()
    return row is not None and row[0] == pid


@contextmanager
def _paused(chaos: ChaosRun) -> Iterator[None]:
    """Runs that hold a lease wait at their first write of the run log until the block ends."""
    if chaos.store_kind == "duckdb":
        conn = duckdb.connect(chaos.store_target)  # DuckDB: one writer process at a time
        try:
            yield
        finally:
            conn.close()
    else:
        RunLog(chaos.config).unfinished("none", "none")  # creates the run log table to lock
        with locked(chaos.store_target, "lock table shop.eoctl_runs in access exclusive mode"):
            yield


def _env(chaos: ChaosRun) -> dict[str, str]:
    return {**chaos.environ, "EOCTL_ENGINE": "duckdb"}


def _attempt(chaos: ChaosRun, args: tuple[str, ...]) -> subprocess.CompletedProcess:
    proc = start_eoctl(chaos.config_path, _env(chaos), *args)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _overlap(chaos: ChaosRun, runs: dict[str, tuple[str, ...]], audited: str,
             ) -> tuple[dict[str, dict], subprocess.CompletedProcess]:
    """Start `runs` (command -> eoctl args) and hold them after they took their leases; meanwhile
    start an audit of the `audited` checks (those reading what the holders change) and ATTEMPTS
    more of each; let them go. Returns each holder's JSON summary and the audit's outcome."""
    with _paused(chaos):
        holders = {cmd: start_eoctl(chaos.config_path, _env(chaos), *args) for cmd, args in runs.items()}
        for cmd, proc in holders.items():
            assert wait_until(lambda: _holds_lease(chaos, cmd, proc.pid) or proc.poll() is not None, 120, 0.2)
            assert proc.poll() is None, proc.communicate()[1][-2000:]
        audit = start_eoctl(chaos.config_path, _env(chaos), "audit", "--grace", "0s", "--select", audited)
        with ThreadPoolExecutor(4) as pool:
            refused = list(pool.map(lambda a: _attempt(chaos, a), [args for args in runs.values()] * ATTEMPTS))
        assert all(p.poll() is None for p in holders.values()), "the holders waited while the attempts ran"
    for attempt in refused:
        command = attempt.args[0]
        assert attempt.returncode == 4, attempt.stderr[-2000:]
        assert attempt.stderr.strip().splitlines() == [attempt.stderr.strip()]  # one line
        assert attempt.stderr.startswith(f"eoctl: error: {command} is already running: run ")
        assert f"pid {holders[command].pid}" in attempt.stderr
    summaries = {}
    for cmd, proc in holders.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        summaries[cmd] = json.loads(out)
    out, err = audit.communicate(timeout=600)
    return summaries, subprocess.CompletedProcess(("audit",), audit.returncode, out, err)


def _audit_completed(audit: subprocess.CompletedProcess) -> None:
    """An audit beside the holders completes: a report (its findings depend on when it read)."""
    assert audit.returncode in (0, 1), audit.stderr[-3000:]
    assert "findings" in json.loads(audit.stdout)


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_overlapping_runs_are_refused_and_the_holders_do_what_they_would_alone(kafka, request, tmp_path: Path,
                                                                                kind: str) -> None:
    postgres = request.getfixturevalue("postgres") if kind == "postgres" else None
    chaos = live_run(kind, tmp_path, kafka, postgres)
    garbage_messages, garbage_blobs = injected_garbage(chaos)
    stuck = {e["message_id"] for e in chaos.ledger if "EO301" in e.get("expect", [])}
    assert garbage_messages and garbage_blobs and stuck
    before = snapshot(chaos)

    # gc-tokens and gc-blobs together (each its own lease), then replay-outbox: replaying while gc
    # plans with --grace 0s could let gc see an entry gone before its record, which no grace allows
    summaries, audit = _overlap(chaos, {
        "gc-tokens": ("gc-tokens", "--execute", "--grace", "0s"),
        "gc-blobs": ("gc-blobs", "--execute", "--grace", "0s"),
    }, audited="EO2,EO4")
    _audit_completed(audit)
    rows, files = removed(before, snapshot(chaos))
    assert {row[1] for table, row in rows if table.endswith("eo_tokens")} == garbage_messages
    assert files == garbage_blobs
    assert summaries["gc-tokens"]["deleted"] == summaries["gc-tokens"]["planned"] == len(garbage_messages)
    assert summaries["gc-blobs"]["deleted"] == summaries["gc-blobs"]["planned"] == len(garbage_blobs)

    summaries, audit = _overlap(chaos, {"replay-outbox": ("replay-outbox", "--execute", "--stuck-after", "0s")},
                              audited="EO3")
    _audit_completed(audit)
    assert {e["entry_id"]: e["status"] for e in summaries["replay-outbox"]["entries"]} == {m: "replayed" for m in stuck}
    assert not store_rows(chaos, "select * from billing.eo_outbox") + store_rows(chaos, "select * from shipping.eo_outbox")

