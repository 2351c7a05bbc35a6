"""Ctrl-C, SIGTERM and kill -9 as an operator (or cron's timeout) sends them: one line, exit
130/143, the engine stopped, no temporary folder left, nothing half-recorded; a changing command
finishes its batch and stops; a later run removes what a killed run left."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from eoctl.config import load_config
from eoctl.ops import gc_tokens
from eoctl.ops.gc_flow import GcOptions
from tests.helpers.chaos import recorded_copy
from tests.helpers.gc_states import Cell, Item, must_remove, write_state
from tests.helpers.cli import without_progress
from tests.helpers.kill import eoctl_blocked, group_gone, locked, start_eoctl
from tests.helpers.servers import wait_until

pytestmark = pytest.mark.integration


def _eoctl(config: Path, cwd: Path, tmp_root: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "eoctl", "--config", str(config), "--format", "json", *args],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "EOCTL_TMPDIR": str(tmp_root)}, start_new_session=True)


def _spark_started(tmp_root: Path) -> bool:
    return any(tmp_root.glob("run-*/spark-local/blockmgr-*"))


def _duckdb_started(tmp_root: Path) -> bool:
    return any(tmp_root.glob("run-*/duckdb-engine/*.duckdb"))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_audit_says_one_line_and_leaves_nothing(tmp_path: Path, signum: int) -> None:
    chaos = recorded_copy(tmp_path)
    cwd, tmp_root = tmp_path / "cwd", tmp_path / "eoctl-tmp"
    cwd.mkdir()
    proc = _eoctl(chaos.config_path, cwd, tmp_root, "audit")
    assert wait_until(lambda: _spark_started(tmp_root) or proc.poll() is not None, 180, 0.2), "Spark never started"
    time.sleep(3)  # into the scan
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    os.kill(proc.pid, signum)  # the driver only, as `timeout -s INT` does
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == 128 + signum
    assert without_progress(err) == [f"eoctl: interrupted ({signal.Signals(signum).name})"]
    assert out == ""
    assert wait_until(lambda: group_gone(proc.pid), 60, 0.5), "the Spark driver JVM outlived the run"
    assert list(tmp_root.iterdir()) == []  # the run's folder (Spark's local dirs among it) removed
    assert list(cwd.iterdir()) == []  # no artifacts/, spark-warehouse/ where the operator stood
    assert not (chaos.config_path.parent / "eoctl-history.duckdb").exists()  # no half-recorded run


def test_an_audit_interrupted_while_its_evidence_queries_run_at_once_says_one_line(tmp_path: Path) -> None:
    """SIGINT while Spark runs several checks' evidence queries on threads of the run
    (eoctl.engine.run.in_order): the main thread, waiting on them, stops them all and says the
    one line; no thread or JVM outlives the run, nothing is left."""
    import threading

    chaos = recorded_copy(tmp_path)
    cwd, tmp_root = tmp_path / "cwd", tmp_path / "eoctl-tmp"
    cwd.mkdir()
    proc = _eoctl(chaos.config_path, cwd, tmp_root, "audit")
    lines: list[str] = []
    checking = threading.Event()

    def read_stderr() -> None:
        for line in proc.stderr:
            lines.append(line)
            if " EO1" in line:  # the first evidence waited on: the queries are running
                checking.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    assert checking.wait(300), "".join(lines)[-2000:]
    time.sleep(0.5)
    assert proc.poll() is None, "".join(lines)[-2000:]
    os.kill(proc.pid, signal.SIGINT)
    out = proc.stdout.read()
    proc.wait(120)
    reader.join(10)

    assert proc.returncode == 130, "".join(lines)[-2000:]
    assert without_progress("".join(lines)) == ["eoctl: interrupted (SIGINT)"]
    assert out == ""
    assert wait_until(lambda: group_gone(proc.pid), 60, 0.5), "the Spark driver JVM outlived the run"
    assert list(tmp_root.iterdir()) == []
    assert list(cwd.iterdir()) == []
    assert not (chaos.config_path.parent / "eoctl-history.duckdb").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_duckdb_audit_says_the_same_line_and_leaves_nothing(tmp_path: Path, signum: int) -> None:
    """The same on the DuckDB engine, inside its scan of a million records (several seconds)."""
    from samples.generator import GenSpec, generate

    generate(GenSpec(1_000_000, tmp_path / "state"))
    config = tmp_path / "state" / "eoctl.toml"
    cwd, tmp_root = tmp_path / "cwd", tmp_path / "eoctl-tmp"
    cwd.mkdir()
    proc = _eoctl(config, cwd, tmp_root, "--engine", "duckdb", "audit")
    assert wait_until(lambda: _duckdb_started(tmp_root) or proc.poll() is not None, 60, 0.05), "DuckDB never started"
    time.sleep(1)  # into the scan
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 128 + signum
    assert without_progress(err) == [f"eoctl: interrupted ({signal.Signals(signum).name})"]
    assert out == ""
    assert list(tmp_root.iterdir()) == []  # the run's folder (DuckDB's database and spill files) removed
    assert list(cwd.iterdir()) == []
    assert not (config.parent / "eoctl-history.duckdb").exists()  # no half-recorded run


@pytest.mark.parametrize("command", ["gc-tokens", "reconcile-tokens"])
def test_a_duckdb_plan_interrupted_at_any_moment_says_one_line_and_leaves_nothing(tmp_path: Path,
                                                                                   command: str) -> None:
    """SIGINT at moments spread over a DuckDB gc plan or reconcile, whose store copies (and a
    plan's kept records) run on a thread of their own while the main thread imports and
    compiles: each run either finishes or stops with the one line, never a crash (a connection
    closed under its thread), half a JSON document or a leftover."""
    from samples.generator import GenSpec, generate

    generate(GenSpec(1_000_000, tmp_path / "state"))
    config = tmp_path / "state" / "eoctl.toml"
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def started(tmp_root: Path) -> tuple[subprocess.Popen, float]:
        proc = _eoctl(config, cwd, tmp_root, "--engine", "duckdb", command)
        assert wait_until(lambda: _duckdb_started(tmp_root) or proc.poll() is not None, 60, 0.005)
        return proc, time.monotonic()

    proc, at = started(tmp_path / "eoctl-tmp")
    out, err = proc.communicate(timeout=60)  # read as it comes: reconcile's JSON outgrows a pipe's buffer
    assert proc.returncode == 0, err[-2000:]
    whole = time.monotonic() - at  # from the run's database to the end
    outcomes = []
    for i in range(10):
        tmp_root = tmp_path / f"eoctl-tmp-{i}"
        proc, at = started(tmp_root)
        time.sleep(max(0.0, at + whole * i / 9 - time.monotonic()))
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        if proc.returncode == 0:
            assert json.loads(out)["schema"] == f"eoctl.{'gc' if command == 'gc-tokens' else command}/v1"
            outcomes.append("finished")
        else:
            assert proc.returncode == 130, err[-2000:]
            assert without_progress(err) == ["eoctl: interrupted (SIGINT)"]
            if out:  # the signal came while the JSON was written: it is written whole first
                json.loads(out)
            outcomes.append("interrupted")
        assert list(tmp_root.iterdir()) == []
    assert list(cwd.iterdir()) == []
    assert outcomes[0] == "interrupted", outcomes


def test_a_signal_while_the_json_is_written_leaves_it_whole(tmp_path: Path) -> None:
    """A reader that is behind (a full pipe) holds eoctl in its write of a 0.2 MB document when
    the Ctrl-C comes: the document is still written whole, then the run ends as interrupted.
    Python's own buffered write kept the first 64 KiB and dropped the rest."""
    from samples.generator import GenSpec, generate

    generate(GenSpec(1_000_000, tmp_path / "state"))
    proc = _eoctl(tmp_path / "state" / "eoctl.toml", tmp_path, tmp_path / "eoctl-tmp", "--engine", "duckdb",
                  "reconcile-tokens")
    assert proc.stderr is not None
    while (line := proc.stderr.readline()) and "] done" not in line:
        pass
    time.sleep(0.5)  # nobody reads stdout: eoctl waits in its write
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 130
    assert err.strip().splitlines() == ["eoctl: interrupted (SIGINT)"]
    assert len(out) > 2 ** 17 and json.loads(out)["schema"] == "eoctl.reconcile-tokens/v1"


def test_a_killed_runs_folder_is_removed_by_a_later_run(tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path)
    cwd, tmp_root = tmp_path / "cwd", tmp_path / "eoctl-tmp"
    cwd.mkdir()
    proc = _eoctl(chaos.config_path, cwd, tmp_root, "audit")
    assert wait_until(lambda: _spark_started(tmp_root) or proc.poll() is not None, 180, 0.2), "Spark never started"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = sorted(tmp_root.iterdir())
    assert len(killed) == 1 and killed[0].name.startswith(f"run-{proc.pid}-")
    assert wait_until(lambda: group_gone(proc.pid), 60, 0.5)

    # a folder is taken as stale only after 10 s (scratch._STALE_AFTER_S): this one is 11 s old
    eleven_seconds_ago = time.time() - 11
    os.utime(killed[0], (eleven_seconds_ago, eleven_seconds_ago))
    later = _eoctl(chaos.config_path, cwd, tmp_root, "config", "check")
    _, err = later.communicate(timeout=120)
    assert later.returncode == 0, err
    assert list(tmp_root.iterdir()) == []


def test_gc_stops_between_batches_and_the_next_run_finishes(postgres, tmp_path: Path, monkeypatch) -> None:
    """SIGINT arrives while a batch's delete waits on a row lock: the batch still commits whole,
    the run stops before the next one, says how to finish, and the next run converges. (The runs
    plan on DuckDB: the batches a signal stops are one code path for both engines.)"""
    old = 3 * 24 * 60
    cells = [Cell("sent", (Item("token", "intent", old), Item("token", "on_inflight", old))) for _ in range(30)]
    state = write_state(tmp_path, cells, dt.datetime.now(dt.timezone.utc), postgres)
    dbname = next(line.split('"')[1] for line in state.config_path.read_text().splitlines()
                  if line.startswith("database"))
    db = postgres.conninfo(dbname=dbname)
    garbage = sorted(t for t, (c, i) in state.tokens.items() if must_remove(c, i))

    with locked(db, "select 1 from dst.eo_tokens where token_id = %s for update", (garbage[15],)):
        proc = start_eoctl(state.config_path, {**state.environ, "EOCTL_ENGINE": "duckdb"}, "gc-tokens", "--execute",
                           "--batch-size", "10")
        assert wait_until(lambda: eoctl_blocked(db) or proc.poll() is not None, 240, 0.2)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(2)
        assert proc.poll() is None  # still inside the batch: it finishes it first
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == 130, err[-2000:]
    [line] = without_progress(err)
    assert line.startswith("eoctl: interrupted (SIGINT); nothing is half-done; the next `eoctl gc-tokens --execute` "
                           "finishes run ")
    with psycopg.connect(db) as conn:
        present = {r[0] for r in conn.execute("select token_id from dst.eo_tokens")}
        journaled = {r[0] for r in conn.execute("select token_id from dst.eoctl_journal_eo_tokens")}
        [(run_id, status)] = conn.execute("select run_id, status from src.eoctl_runs").fetchall()
    assert journaled == set(garbage[:20]) and not journaled & present  # two whole batches, not three
    assert status == "stopped" and run_id in line

    for name, value in state.environ.items():
        monkeypatch.setenv(name, value)
    again = gc_tokens.gc_tokens(None, load_config(state.config_path, overrides={"kind": "duckdb"}),
                                GcOptions(execute=True, batch_size=10))
    assert again.finished_leftovers == [run_id] and again.totals()["deleted"] == 10
    with psycopg.connect(db) as conn:
        assert {r[0] for r in conn.execute("select token_id from dst.eo_tokens")} == set(state.tokens) - set(garbage)
