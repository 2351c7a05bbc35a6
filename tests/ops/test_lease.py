"""The single-runner lease and run log on a real DuckDB file: takeover rules, compare-and-set."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import duckdb
import pytest

from eoctl.config.model import Config
from eoctl.errors import ExitCode, LeaseHeld
from eoctl.ops.lease import Lease, RunLog


@pytest.fixture
def config(tmp_path: Path) -> Config:
    path = tmp_path / "state.duckdb"
    duckdb.connect(str(path)).close()
    return Config.model_validate({"stores": {"s": {"type": "duckdb", "path": str(path)}},
                                  "endpoints": {"e": {"store": "s"}}, "ops": {"lease_ttl_seconds": 60}})


def _holder(config: Config, **changes) -> None:
    sets = ", ".join(f"{k} = ?" for k in changes)
    with duckdb.connect(str(config.stores["s"].path)) as db:
        db.execute(f"update main.eoctl_leases set {sets} where name = 'gc-tokens'", list(changes.values()))


def test_a_held_lease_refuses_a_second_run_until_released(config: Config) -> None:
    first = Lease(config, "gc-tokens", "run-1").acquire()
    with pytest.raises(LeaseHeld, match="gc-tokens is already running: run run-1 on") as err:
        Lease(config, "gc-tokens", "run-2").acquire()
    assert err.value.exit_code == ExitCode.LOCKED == 4
    Lease(config, "gc-blobs", "run-3").acquire()  # another command's lease is independent
    first.release()
    Lease(config, "gc-tokens", "run-2").acquire()


def test_a_dead_holder_on_this_host_is_taken_over_at_once(config: Config) -> None:
    Lease(config, "gc-tokens", "run-1").acquire()
    gone = subprocess.Popen(["true"])
    gone.wait()
    _holder(config, holder_pid=gone.pid)
    Lease(config, "gc-tokens", "run-2").acquire()
    with pytest.raises(LeaseHeld, match="run run-2"):
        Lease(config, "gc-tokens", "run-3").acquire()


def test_another_hosts_lease_is_taken_over_only_after_the_ttl(config: Config) -> None:
    Lease(config, "gc-tokens", "run-1").acquire()
    _holder(config, holder_host="elsewhere", holder_pid=1)
    with pytest.raises(LeaseHeld, match="on elsewhere"):
        Lease(config, "gc-tokens", "run-2").acquire()
    _holder(config, renewed_at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=61))
    taken = Lease(config, "gc-tokens", "run-2").acquire()
    # the old holder notices at its next renewal and stops
    with pytest.raises(LeaseHeld, match="was taken over"):
        Lease(config, "gc-tokens", "run-1").renew()
    taken.renew()


def test_the_run_log_lists_unfinished_runs(config: Config) -> None:
    log = RunLog(config)
    for run in ("a", "b", "c"):
        log.start(run, "gc-tokens")
    log.finish("a", "finished", {"deleted": 1})
    log.set_status("b", "failed")
    assert log.unfinished("gc-tokens", current="c") == ["b"]
    assert log.get("a") == ("gc-tokens", "finished") and log.get("zzz") is None
