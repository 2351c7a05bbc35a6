"""gc under kill -9 and under a concurrent run, against a real PostgreSQL server, through the CLI.

A test transaction holding a row lock stops a gc run at an exact point inside a batch: on a token
row, the run blocks inside its delete transaction (journal written, nothing committed); on an
intent row, it blocks after the tokens' transaction committed and before their intents go. The
whole process group (Python driver and Spark JVM) is then killed with SIGKILL.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.helpers.cli import run_eoctl
from tests.helpers.gc_states import Cell, Item, WrittenState, must_remove, write_state
from tests.helpers.kill import eoctl_blocked, kill_when_blocked, locked, start_eoctl
from tests.helpers.servers import wait_until

pytestmark = pytest.mark.integration

OLD = 3 * 24 * 60  # minutes: far past the 24h grace period
LOCK_TOKEN = "select 1 from dst.eo_tokens where token_id = %s for update"
LOCK_INTENT = "select 1 from src.eo_intents where ref = %s for update"


def _state(tmp_path: Path, postgres) -> WrittenState:
    """40 garbage tokens (with intents), 20 garbage blobs (with intents), live tokens and published blobs."""
    cells = [Cell("sent", (Item("token", "intent", OLD), Item("token", "on_inflight", OLD))) for _ in range(40)]
    cells += [Cell("sent", (Item("blob", "intent", OLD), Item("blob", "published_processed", OLD))) for _ in range(20)]
    return write_state(tmp_path, cells, dt.datetime.now(dt.timezone.utc), postgres)


def _conninfo(state: WrittenState, postgres) -> str:
    dbname = next(line.split('"')[1] for line in state.config_path.read_text().splitlines()
                  if line.startswith("database"))
    return postgres.conninfo(dbname=dbname)


def _start(state: WrittenState, command: str) -> subprocess.Popen:
    return start_eoctl(state.config_path, state.environ, command, "--execute", "--batch-size", "10")


def _kill_when_blocked(state: WrittenState, db: str, command: str, lock_sql: str, key: str) -> None:
    kill_when_blocked(db, lock_sql, (key,), state.config_path, state.environ, command, "--execute", "--batch-size", "10")


def _rows(conninfo: str, sql: str) -> set:
    with psycopg.connect(conninfo) as conn:
        return {r[0] for r in conn.execute(sql).fetchall()}


def _journal(conninfo: str, table: str, key: str) -> set:
    try:
        return _rows(conninfo, f"select {key} from {table}")
    except psycopg.errors.UndefinedTable:
        return set()


def _gc(state: WrittenState, command: str) -> dict:
    result = run_eoctl("--config", str(state.config_path), "--format", "json", command, "--execute",
                       "--batch-size", "10", env=state.environ)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("lock", ["token", "intent"])
def test_gc_tokens_killed_mid_batch_converges_on_rerun(postgres, tmp_path: Path, lock: str) -> None:
    state = _state(tmp_path, postgres)
    db = _conninfo(state, postgres)
    garbage = sorted(t for t, (c, i) in state.tokens.items() if must_remove(c, i))
    live = set(state.tokens) - set(garbage)
    victim = garbage[25]  # third batch of 10, in token id order
    _kill_when_blocked(state, db, "gc-tokens", LOCK_TOKEN if lock == "token" else LOCK_INTENT, victim)

    # after the kill: whatever was journaled is gone from the store and the rest is untouched
    present = _rows(db, "select token_id from dst.eo_tokens")
    journaled = _journal(db, "dst.eoctl_journal_eo_tokens", "token_id")
    assert live <= present and not journaled & present and present | journaled == set(state.tokens)
    assert 0 < len(journaled) < len(garbage)
    if lock == "token":  # killed inside the batch's transaction: the batch left no trace
        assert victim in present and len(journaled) == 20
    else:  # killed after the batch's tokens committed, before their intents
        assert victim not in present and victim in _rows(db, "select ref from src.eo_intents")

    # the killed run's lease is left behind; the next run takes it over at once (its pid is dead)
    assert _rows(db, "select name from src.eoctl_leases") == {"gc-tokens"}
    second = _gc(state, "gc-tokens")
    assert len(second["finished_leftovers"]) == 1
    assert _rows(db, "select token_id from dst.eo_tokens") == live
    assert not _rows(db, "select ref from src.eo_intents where kind = 'token'")
    assert _journal(db, "dst.eoctl_journal_eo_tokens", "token_id") == set(garbage)
    third = _gc(state, "gc-tokens")
    assert (third["planned"], third["deleted"], third["finished_leftovers"]) == (0, 0, [])
    assert _rows(db, "select token_id from dst.eo_tokens") == live


def test_gc_blobs_killed_mid_batch_converges_on_rerun(postgres, tmp_path: Path) -> None:
    state = _state(tmp_path, postgres)
    db = _conninfo(state, postgres)
    garbage = sorted(b for b, (c, i) in state.blobs.items() if must_remove(c, i))
    victim = garbage[15]  # second batch
    _kill_when_blocked(state, db, "gc-blobs", LOCK_INTENT, victim)

    files = {p.name for p in state.blob_dir.iterdir() if p.is_file()}
    quarantined = {p.name for p in state.blob_dir.rglob("*") if p.is_file() and ".eoctl-quarantine" in p.parts}
    assert not files & quarantined and files | quarantined == set(state.blobs)
    assert victim in quarantined and victim in _rows(db, "select ref from src.eo_intents")

    second = _gc(state, "gc-blobs")
    assert len(second["finished_leftovers"]) == 1
    assert {p.name for p in state.blob_dir.iterdir() if p.is_file()} == set(state.blobs) - set(garbage)
    assert not _rows(db, "select ref from src.eo_intents where kind = 'blob'")
    assert _rows(db, "select name from src.eoctl_journal_blobs where state = 'quarantined'") == set(garbage)
    third = _gc(state, "gc-blobs")
    assert (third["planned"], third["deleted"], third["finished_leftovers"]) == (0, 0, [])


def test_two_concurrent_runs_exactly_one_proceeds(postgres, tmp_path: Path) -> None:
    state = _state(tmp_path, postgres)
    db = _conninfo(state, postgres)
    garbage = sorted(t for t, (c, i) in state.tokens.items() if must_remove(c, i))
    with locked(db, LOCK_TOKEN, (garbage[5],)):
        first = _start(state, "gc-tokens")
        assert wait_until(lambda: eoctl_blocked(db), 240, 0.2), "the first run never started deleting"
        second = run_eoctl("--config", str(state.config_path), "gc-tokens", "--execute", env=state.environ)
        assert second.code == 4, second.stderr
        assert "gc-tokens is already running: run " in second.stderr and "Traceback" not in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert json.loads(out)["deleted"] == len(garbage)
    # the lease is free again: a later run proceeds (and finds nothing to do)
    assert _gc(state, "gc-tokens")["deleted"] == 0
