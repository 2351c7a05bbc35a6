"""The single-runner lease and run log: a flock beside a DuckDB file, a row in PostgreSQL."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import duckdb
import psycopg
import pytest

from eoctl.config.model import Config
from eoctl.errors import ExitCode, LeaseHeld
from eoctl.ops.lease import Lease, RunLog


@pytest.fixture
def duckdb_config(tmp_path: Path) -> Config:
    path = tmp_path / "state.duckdb"
    duckdb.connect(str(path)).close()
    return Config.model_validate({"stores": {"s": {"type": "duckdb", "path": str(path), "lock_wait_seconds": 5}},
                                  "endpoints": {"e": {"store": "s"}}, "ops": {"lease_ttl_seconds": 60}})


@pytest.fixture
def postgres_config(postgres) -> Config:
    schema = "lease_" + uuid.uuid4().hex[:8]
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        conn.execute(f"create schema {schema}")
    return Config.model_validate({
        "stores": {"s": {"type": "postgres", "host": "127.0.0.1", "port": postgres.port, "database": postgres.database,
                         "user": postgres.user, "password": postgres.password, "schema": schema}},
        "endpoints": {"e": {"store": "s"}}, "ops": {"lease_ttl_seconds": 60}})


def test_a_held_lease_refuses_a_second_run_until_released(duckdb_config: Config) -> None:
    first = Lease(duckdb_config, "gc-tokens", "run-1").acquire()
    with pytest.raises(LeaseHeld, match=r"gc-tokens is already running: run run-1 on .* pid \d+") as err:
        Lease(duckdb_config, "gc-tokens", "run-2").acquire()
    assert err.value.exit_code == ExitCode.LOCKED == 4
    other = Lease(duckdb_config, "gc-blobs", "run-3").acquire()  # another command's lease is independent
    first.release()
    second = Lease(duckdb_config, "gc-tokens", "run-2").acquire()
    for lease in (other, second):  # each holds its lock file open until released
        lease.release()


def test_a_refused_run_never_opens_the_duckdb_file(duckdb_config: Config) -> None:
    """DuckDB lets one process open a file for writing: a refused run that opened it would lock
    the holder out of its next batch. Here the holder has the file open while a second run asks."""
    path = duckdb_config.stores["s"].path
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('open', flush=True); "
         "time.sleep(60)", path], stdout=subprocess.PIPE, text=True)
    held = None
    try:
        assert holder.stdout.readline().strip() == "open"
        held = Lease(duckdb_config, "gc-tokens", "run-1").acquire()
        with pytest.raises(LeaseHeld, match="already running"):  # refused at once, not "cannot be opened"
            Lease(duckdb_config, "gc-tokens", "run-2").acquire()
    finally:
        holder.kill()
        holder.wait()
        if held is not None:
            held.release()


def test_a_killed_holder_s_lease_is_free_at_once(duckdb_config: Config, tmp_path: Path) -> None:
    """The kernel drops a flock when its process dies, even by SIGKILL."""
    code = ("import sys, time; from eoctl.config.model import Config; from eoctl.ops.lease import Lease; "
            "import json; c = Config.model_validate(json.loads(sys.argv[1])); "
            "Lease(c, 'gc-tokens', 'killed').acquire(); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, duckdb_config.model_dump_json(by_alias=True)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(LeaseHeld, match="run killed"):
        Lease(duckdb_config, "gc-tokens", "run-2").acquire()
    holder.kill()
    holder.wait()
    Lease(duckdb_config, "gc-tokens", "run-2").acquire()
    assert os.path.exists(f"{duckdb_config.stores['s'].path}.eoctl-gc-tokens.lock")


def test_a_lease_holds_when_its_lock_file_is_removed_during_the_run(duckdb_config: Config) -> None:
    """`rm` of the lock file while a run holds it: a second run gets a new file and its flock,
    and must still be refused while the first holds the removed one (in another process, and in
    this one), then get in once it is released."""
    lock = Path(f"{duckdb_config.stores['s'].path}.eoctl-gc-tokens.lock")
    code = ("import sys, time, json; from eoctl.config.model import Config; from eoctl.ops.lease import Lease; "
            "c = Config.model_validate(json.loads(sys.argv[1])); "
            "Lease(c, 'gc-tokens', 'first').acquire(); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, duckdb_config.model_dump_json(by_alias=True)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock.unlink()
        with pytest.raises(LeaseHeld, match=rf"run first \(pid {holder.pid}\) holds the lease through the lock file "
                                            r".*\(deleted\), whose path is not this one's"):
            Lease(duckdb_config, "gc-tokens", "second").acquire()
        Lease(duckdb_config, "gc-blobs", "other").acquire().release()  # another command's lease is its own
    finally:
        holder.kill()
        holder.wait()
    Lease(duckdb_config, "gc-tokens", "second").acquire().release()  # the holder is gone: free

    first = Lease(duckdb_config, "gc-tokens", "first").acquire()
    lock.unlink()
    with pytest.raises(LeaseHeld, match="removed, renamed"):
        Lease(duckdb_config, "gc-tokens", "second").acquire()
    first.release()
    Lease(duckdb_config, "gc-tokens", "second").acquire().release()


def test_a_lease_holds_when_its_lock_file_is_renamed_or_the_database_hard_linked(duckdb_config: Config,
                                                                                   tmp_path: Path) -> None:
    """Both ran at once before (1,700 and 700 rows deleted): the lock file renamed during a run, or
    the database reached through a hard link, whose lock file beside it is another file."""
    path = Path(duckdb_config.stores["s"].path)
    lock = Path(f"{path}.eoctl-gc-tokens.lock")
    first = Lease(duckdb_config, "gc-tokens", "first").acquire()
    try:
        lock.rename(tmp_path / "elsewhere.lock")
        with pytest.raises(LeaseHeld, match=r"run first \(pid \d+\) holds the lease through the lock file "
                                            r".*elsewhere.lock"):
            Lease(duckdb_config, "gc-tokens", "second").acquire()
        linked = tmp_path / "linked" / "state.duckdb"
        linked.parent.mkdir()
        os.link(path, linked)
        other_path = Config.model_validate({**duckdb_config.model_dump(by_alias=True),
                                            "stores": {"s": {"type": "duckdb", "path": str(linked)}}})
        with pytest.raises(LeaseHeld, match="run first"):
            Lease(other_path, "gc-tokens", "third").acquire()
        Lease(other_path, "gc-blobs", "fourth").acquire().release()  # another command's lease is its own
    finally:
        first.release()
    Lease(other_path, "gc-tokens", "third").acquire().release()


def _holder(config: Config, postgres, **changes) -> None:
    store = config.stores["s"]
    sets = ", ".join(f"{k} = %s" for k in changes)
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        conn.execute(f"update {store.schema_name}.eoctl_leases set {sets} where name = 'gc-tokens'",
                     list(changes.values()))


@pytest.mark.integration
def test_postgres_a_held_lease_refuses_and_a_dead_holder_on_this_host_is_taken_over(postgres_config, postgres) -> None:
    first = Lease(postgres_config, "gc-tokens", "run-1").acquire()
    with pytest.raises(LeaseHeld, match="gc-tokens is already running: run run-1 on"):
        Lease(postgres_config, "gc-tokens", "run-2").acquire()
    first.release()
    Lease(postgres_config, "gc-tokens", "run-2").acquire()
    gone = subprocess.Popen(["true"])
    gone.wait()
    _holder(postgres_config, postgres, holder_pid=gone.pid)
    Lease(postgres_config, "gc-tokens", "run-3").acquire()
    with pytest.raises(LeaseHeld, match="run run-3"):
        Lease(postgres_config, "gc-tokens", "run-4").acquire()


@pytest.mark.integration
def test_postgres_a_holder_in_another_pid_namespace_of_this_host_is_not_taken_for_dead(postgres_config,
                                                                                       postgres) -> None:
    """A container on the same hostname has pids of its own: one missing from this /proc is no dead
    process. Its lease waits for the TTL (before: taken over at once)."""
    from eoctl.ops.lease import process_scope

    Lease(postgres_config, "gc-tokens", "run-1").acquire()
    gone = subprocess.Popen(["true"])
    gone.wait()
    _holder(postgres_config, postgres, holder_pid=gone.pid, holder_scope="another-boot:4026531836")
    with pytest.raises(LeaseHeld, match="run run-1"):
        Lease(postgres_config, "gc-tokens", "run-2").acquire()
    _holder(postgres_config, postgres, holder_scope=process_scope())  # the same pid in this namespace: gone
    Lease(postgres_config, "gc-tokens", "run-2").acquire()


@pytest.mark.integration
def test_postgres_another_hosts_lease_is_taken_over_only_after_the_ttl(postgres_config, postgres) -> None:
    Lease(postgres_config, "gc-tokens", "run-1").acquire()
    _holder(postgres_config, postgres, holder_host="elsewhere", holder_pid=1)
    with pytest.raises(LeaseHeld, match="on elsewhere"):
        Lease(postgres_config, "gc-tokens", "run-2").acquire()
    _holder(postgres_config, postgres, renewed_at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=61))
    taken = Lease(postgres_config, "gc-tokens", "run-2").acquire()
    # the old holder notices at its next renewal and stops
    with pytest.raises(LeaseHeld, match="was taken over"):
        Lease(postgres_config, "gc-tokens", "run-1").renew()
    taken.renew()


def test_the_run_log_lists_unfinished_runs(duckdb_config: Config) -> None:
    log = RunLog(duckdb_config)
    for run in ("a", "b", "c"):
        log.start(run, "gc-tokens")
    log.finish("a", "finished", {"deleted": 1})
    log.set_status("b", "failed")
    assert log.unfinished("gc-tokens", current="c") == ["b"]
    assert log.get("a") == ("gc-tokens", "finished") and log.get("zzz") is None


#: a schema (MariaDB: a database) whose name needs quoting: capitals, a space, a percent sign
#: (psycopg's and PyMySQL's placeholder character) and, where the server takes one, a double quote
QUOTED_SCHEMA = {"postgres": 'Ops "Leases" %s', "mariadb": "Ops Leases %s"}


@pytest.fixture(params=["postgres", "mariadb"])
def quoted_control_store(request) -> tuple[Config, Callable[[str, list], list[tuple]]]:
    """A control store in a schema named as QUOTED_SCHEMA, and a way to query it as its owner."""
    kind = request.param
    name = QUOTED_SCHEMA[kind]
    if kind == "postgres":
        server = request.getfixturevalue("postgres")
        quoted = '"' + name.replace('"', '""') + '"'
        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            conn.execute(f"drop schema if exists {quoted} cascade")  # no parameters: `%` is itself
            conn.execute(f"create schema {quoted}")
        store = {"type": "postgres", "host": "127.0.0.1", "port": server.port, "database": server.database,
                 "user": server.user, "password": server.password, "schema": name}

        def ask(sql: str, params: list) -> list[tuple]:
            with psycopg.connect(server.conninfo(), autocommit=True) as conn:
                cur = conn.execute(sql.replace("{schema}", quoted.replace("%", "%%")), params)
                return cur.fetchall() if cur.description else []
    else:
        server = request.getfixturevalue("mariadb")
        quoted = "`" + name + "`"
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"drop database if exists {quoted}")
            cur.execute(f"create database {quoted}")
        store = {"type": "mysql", "host": "127.0.0.1", "port": server.port, "database": name,
                 "user": server.user, "password": server.password}

        def ask(sql: str, params: list) -> list[tuple]:
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute(sql.replace("{schema}", quoted.replace("%", "%%")), params)
                return list(cur.fetchall())
    config = Config.model_validate({"stores": {"s": store}, "endpoints": {"e": {"store": "s"}},
                                    "ops": {"lease_ttl_seconds": 60}})
    return config, ask


@pytest.mark.integration
def test_the_lease_and_run_log_live_in_a_schema_whose_name_needs_quoting(quoted_control_store) -> None:
    """Every statement of the lease and the run log, on PostgreSQL and MariaDB, in a schema named
    with capitals, a space, `%s` (and a double quote on PostgreSQL): each name quoted for its
    dialect, never read as a placeholder."""
    config, ask = quoted_control_store
    first = Lease(config, "gc-tokens", "run-1").acquire()
    with pytest.raises(LeaseHeld, match="gc-tokens is already running: run run-1 on"):
        Lease(config, "gc-tokens", "run-2").acquire()
    assert ask("select run_id from {schema}.eoctl_leases where name = %s", ["gc-tokens"]) == [("run-1",)]
    first.renew()
    # a holder that stopped renewing past the TTL is taken over; it notices at its next renewal
    stale = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=61)
    if config.stores["s"].type == "mysql":  # a DATETIME in UTC (eoctl's sessions), no zone
        stale = stale.replace(tzinfo=None)
    ask("update {schema}.eoctl_leases set renewed_at = %s, holder_host = 'elsewhere' where name = %s",
        [stale, "gc-tokens"])
    taken = Lease(config, "gc-tokens", "run-2").acquire()
    with pytest.raises(LeaseHeld, match="was taken over"):
        first.renew()
    taken.release()
    assert ask("select count(*) from {schema}.eoctl_leases", []) == [(0,)]

    log = RunLog(config)
    for run in ("a", "b", "c"):
        log.start(run, "gc-tokens")
    log.start("d", "gc-blobs")
    log.finish("a", "finished", {"deleted": 1})
    log.set_status("b", "failed")
    assert log.unfinished("gc-tokens", current="c") == ["b"]
    assert log.get("a") == ("gc-tokens", "finished") and log.get("zzz") is None
    assert [r["id"] for r in log.runs(command="gc-blobs")] == ["d"]
    assert {r["id"] for r in log.runs()} == {"a", "b", "c", "d"}
    assert [r["summary"] for r in log.runs(command="gc-tokens") if r["id"] == "a"] == [{"deleted": 1}]
