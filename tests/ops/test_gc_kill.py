"""gc under kill -9 and under a concurrent run, against a real PostgreSQL server.

A test transaction holding a row lock stops a gc run at an exact point inside a batch: on a token
row, the run blocks inside its delete transaction (journal written, nothing committed); on an
intent row, it blocks after the tokens' transaction committed and before their intents go. The
whole process group (Python driver and Spark JVM) is then killed with SIGKILL.

The killed runs and the refused concurrent run are real CLI processes. The runs after them (the
one that converges, the one that finds nothing left) go through the library in this process, on
the session's Spark, with the configuration loaded from the same file and environment: a CLI run
spends most of its half minute starting Spark and planning over a few rows.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from eoctl.config import load_config
from eoctl.ops import gc_blobs, gc_tokens
from eoctl.ops.common import GcOptions
from tests.helpers.cli import run_eoctl
from tests.helpers.gc_states import Cell, Item, WrittenState, must_remove, write_state
from tests.helpers.kill import eoctl_blocked, kill_when_blocked, locked, start_eoctl
from tests.helpers.servers import wait_until

pytestmark = pytest.mark.integration

OLD = 3 * 24 * 60  # minutes: far past the 24h grace period
LOCK_TOKEN = "select 1 from dst.eo_tokens where token_id = %s for update"
LOCK_INTENT = "select 1 from src.eo_intents where ref = %s for update"


def _state(tmp_path: Path, postgres) -> WrittenState:
    """50 garbage tokens (with intents: five batches of 10), 20 garbage blobs (with intents), live
    tokens and published blobs."""
    cells = [Cell("sent", (Item("token", "intent", OLD), Item("token", "on_inflight", OLD))) for _ in range(50)]
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


@pytest.fixture
def gc(spark, monkeypatch) -> Callable[[WrittenState, str], dict]:
    """`eoctl --format json COMMAND --execute --batch-size 10` in this process: the state's
    environment (the PostgreSQL password its configuration interpolates) is set, the configuration
    loaded from its file, and the run's summary returned (the JSON the CLI prints)."""

    def run(state: WrittenState, command: str) -> dict:
        for name, value in state.environ.items():
            monkeypatch.setenv(name, value)
        config = load_config(state.config_path)
        gc_run = gc_tokens.gc_tokens if command == "gc-tokens" else gc_blobs.gc_blobs
        return gc_run(spark, config, GcOptions(execute=True, batch_size=10)).summary()

    return run


def test_gc_tokens_killed_inside_a_batch_then_between_tokens_and_intents_converges(postgres, tmp_path: Path,
                                                                                   gc) -> None:
    state = _state(tmp_path, postgres)
    db = _conninfo(state, postgres)
    garbage = sorted(t for t, (c, i) in state.tokens.items() if must_remove(c, i))
    live = set(state.tokens) - set(garbage)
    assert len(garbage) == 50

    def left() -> tuple[set, set, set]:
        """Tokens, their journal and token intents after a kill: whatever was journaled is gone
        from the store, the rest is untouched, and the run stopped before the last batch."""
        present = _rows(db, "select token_id from dst.eo_tokens")
        journaled = _journal(db, "dst.eoctl_journal_eo_tokens", "token_id")
        assert live <= present and not journaled & present and present | journaled == set(state.tokens)
        assert 0 < len(journaled) < len(garbage)
        return present, journaled, _rows(db, "select ref from src.eo_intents where kind = 'token'")

    # killed inside the third batch's transaction (tokens in id order): that batch left no trace
    victim = garbage[25]
    _kill_when_blocked(state, db, "gc-tokens", LOCK_TOKEN, victim)
    present, journaled, intents = left()
    assert victim in present and journaled == set(garbage[:20]) and intents == set(garbage[20:])
    assert _rows(db, "select name from src.eoctl_leases") == {"gc-tokens"}

    # the next CLI run takes the dead run's lease over, marks it interrupted (nothing of it was
    # half done), and is killed after a later batch's tokens committed, before their intents
    victim = garbage[35]  # the second batch of what the first run left
    _kill_when_blocked(state, db, "gc-tokens", LOCK_INTENT, victim)
    present, journaled, intents = left()
    assert victim not in present and journaled == set(garbage[:40]) and intents == set(garbage[30:])
    assert _rows(db, "select name from src.eoctl_leases") == {"gc-tokens"}
    with psycopg.connect(db) as conn:
        runs = conn.execute("select run_id, status from src.eoctl_runs order by started_at").fetchall()
    assert [status for _, status in runs] == ["interrupted", "running"]

    # the next run takes the lease over at once (the holder's pid is dead) and finishes the killed
    # run's intents before collecting the rest
    second = gc(state, "gc-tokens")
    assert second["finished_leftovers"] == [runs[1][0]]
    assert _rows(db, "select token_id from dst.eo_tokens") == live
    assert not _rows(db, "select ref from src.eo_intents where kind = 'token'")
    assert _journal(db, "dst.eoctl_journal_eo_tokens", "token_id") == set(garbage)
    third = gc(state, "gc-tokens")
    assert (third["planned"], third["deleted"], third["finished_leftovers"]) == (0, 0, [])
    assert _rows(db, "select token_id from dst.eo_tokens") == live


def test_gc_blobs_killed_mid_batch_converges_on_rerun(postgres, tmp_path: Path, gc) -> None:
    state = _state(tmp_path, postgres)
    db = _conninfo(state, postgres)
    garbage = sorted(b for b, (c, i) in state.blobs.items() if must_remove(c, i))
    victim = garbage[15]  # second batch
    _kill_when_blocked(state, db, "gc-blobs", LOCK_INTENT, victim)

    files = {p.name for p in state.blob_dir.iterdir() if p.is_file()}
    quarantined = {p.name for p in state.blob_dir.rglob("*") if p.is_file() and ".eoctl-quarantine" in p.parts}
    assert not files & quarantined and files | quarantined == set(state.blobs)
    assert victim in quarantined and victim in _rows(db, "select ref from src.eo_intents")

    second = gc(state, "gc-blobs")
    assert len(second["finished_leftovers"]) == 1
    assert {p.name for p in state.blob_dir.iterdir() if p.is_file()} == set(state.blobs) - set(garbage)
    assert not _rows(db, "select ref from src.eo_intents where kind = 'blob'")
    assert _rows(db, "select name from src.eoctl_journal_blobs where state = 'quarantined'") == set(garbage)
    third = gc(state, "gc-blobs")
    assert (third["planned"], third["deleted"], third["finished_leftovers"]) == (0, 0, [])


def test_two_concurrent_runs_exactly_one_proceeds(postgres, tmp_path: Path, gc) -> None:
    state = _state(tmp_path, postgres)
    db = _conninfo(state, postgres)
    garbage = sorted(t for t, (c, i) in state.tokens.items() if must_remove(c, i))
    with locked(db, LOCK_TOKEN, (garbage[5],)):
        first = _start(state, "gc-tokens")
        assert wait_until(lambda: eoctl_blocked(db), 240, 0.2), "the first run never started deleting"
        # its own cache folder: a Spark session it started would leave its driver log there
        cache = tmp_path / "second-cache"
        second = run_eoctl("--config", str(state.config_path), "gc-tokens", "--execute",
                           env={**state.environ, "XDG_CACHE_HOME": str(cache)})
        assert second.code == 4, second.stderr
        assert "gc-tokens is already running: run " in second.stderr and "Traceback" not in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        assert not (cache / "eoctl" / "spark-driver.log").exists()  # refused before starting Spark
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert json.loads(out)["deleted"] == len(garbage)
    # the lease is free again: a later run proceeds (and finds nothing to do)
    assert gc(state, "gc-tokens")["deleted"] == 0
