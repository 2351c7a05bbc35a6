"""gc under kill -9 and under a concurrent run, against a real PostgreSQL server.

A test transaction holding a row lock stops a gc run at an exact point inside a batch: on a token
row, the run blocks inside its delete transaction (journal written, nothing committed); on an
intent row, it blocks after the tokens' transaction committed and before their intents go. The
whole process group (Python driver and Spark JVM) is then killed with SIGKILL.

The killed runs and the refused concurrent run are real CLI processes. The runs after them (the
one that converges, the one that finds nothing left) go through the library in this process, with
the configuration loaded from the same file and environment. The runs plan on the DuckDB engine
(seconds, where Spark's start took half a minute per run): what a kill can cut is the execution
(journal, delete, intents, lease), which is one code path for both engines; the refused run is on
Spark, to show it never starts it.

`test_gc_killed_at_a_step_converges` kills gc-tokens and gc-blobs at every step of their deletes
(five and three batches), one state per step; the default run takes two of the steps, `--scale`
all seventeen (see docs/development.md).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from eoctl.config import load_config
from eoctl.ops import gc_blobs, gc_tokens
from eoctl.ops.gc_flow import GcOptions
from tests.helpers.cli import run_eoctl
from tests.helpers.gc_states import Cell, Item, WrittenState, must_remove, write_state
from tests.helpers.kill import eoctl_blocked, kill_at_last_lock, kill_when_blocked, locked, start_eoctl
from tests.helpers.servers import wait_until

pytestmark = pytest.mark.integration

OLD = 3 * 24 * 60  # minutes: far past the 24h grace period
YOUNG = 60
LOCK_TOKEN = "select 1 from dst.eo_tokens where token_id = %s for update"
LOCK_INTENT = "select 1 from src.eo_intents where ref = %s for update"


def _state(tmp_path: Path, postgres) -> WrittenState:
    """50 garbage tokens (with intents: five batches of 10), 30 garbage blobs (with intents: three
    batches), and what must stay: live, leaked and referenced tokens, published and referenced
    blobs, young garbage of both (with its intents)."""
    cells = [Cell("sent", (Item("token", "intent", OLD), Item("token", "on_inflight", OLD))) for _ in range(50)]
    cells += [Cell("sent", (Item("blob", "intent", OLD), Item("blob", "published_processed", OLD))) for _ in range(30)]
    cells += [Cell("entry_uncommitted", (Item("token", "entry_incoming", OLD), Item("blob", "in_entry", OLD))),
              Cell("sent", (Item("token", "on_processed", OLD), Item("token", "intent", YOUNG),
                            Item("blob", "intent", YOUNG)))] * 5
    return write_state(tmp_path, cells, dt.datetime.now(dt.timezone.utc), postgres)


def _conninfo(state: WrittenState, postgres) -> str:
    dbname = next(line.split('"')[1] for line in state.config_path.read_text().splitlines()
                  if line.startswith("database"))
    return postgres.conninfo(dbname=dbname)


#: the killed and converging runs plan on DuckDB (see the module doc)
ENGINE = {"EOCTL_ENGINE": "duckdb"}


def _start(state: WrittenState, command: str) -> subprocess.Popen:
    return start_eoctl(state.config_path, {**state.environ, **ENGINE}, command, "--execute", "--batch-size", "10")


def _kill_when_blocked(state: WrittenState, db: str, command: str, lock_sql: str, key: str) -> None:
    kill_when_blocked(db, lock_sql, (key,), state.config_path, {**state.environ, **ENGINE}, command, "--execute",
                      "--batch-size", "10")


def _rows(conninfo: str, sql: str) -> set:
    with psycopg.connect(conninfo) as conn:
        return {r[0] for r in conn.execute(sql).fetchall()}


def _journal(conninfo: str, table: str, key: str) -> set:
    try:
        return _rows(conninfo, f"select {key} from {table}")
    except psycopg.errors.UndefinedTable:
        return set()


@pytest.fixture
def gc(monkeypatch) -> Callable[[WrittenState, str], dict]:
    """`eoctl --format json COMMAND --execute --batch-size 10` in this process: the state's
    environment (the PostgreSQL password its configuration interpolates) is set, the configuration
    loaded from its file, and the run's summary returned (the JSON the CLI prints)."""

    def run(state: WrittenState, command: str) -> dict:
        for name, value in state.environ.items():
            monkeypatch.setenv(name, value)
        config = load_config(state.config_path, overrides={"kind": "duckdb"})
        gc_run = gc_tokens.gc_tokens if command == "gc-tokens" else gc_blobs.gc_blobs
        return gc_run(None, config, GcOptions(execute=True, batch_size=10)).summary()

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
        return present, journaled, _rows(db, "select ref from src.eo_intents where kind = 'token'") & set(garbage)

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
    assert not _rows(db, "select ref from src.eo_intents where kind = 'token'") & set(garbage)
    assert _journal(db, "dst.eoctl_journal_eo_tokens", "token_id") == set(garbage)
    third = gc(state, "gc-tokens")
    assert (third["planned"], third["deleted"], third["finished_leftovers"]) == (0, 0, [])
    assert _rows(db, "select token_id from dst.eo_tokens") == live


BATCH = 10  # every run's --batch-size: five batches of garbage tokens, three of blobs
BATCHES = {"gc-tokens": 5, "gc-blobs": 3}


@dataclass(frozen=True)
class Step:
    """A point of a run's deletes where it is killed, in its batch `batch` (1-based):
    inside    tokens: in the batch's transaction, journal rows written, nothing committed
    intents   the batch's tokens removed (blobs quarantined), their intents not yet
    after     blobs: the batch done, the next batch's not begun
    finish    after the last batch, before the run is logged finished"""

    command: str
    where: str
    batch: int

    def locks(self, garbage: list[str]) -> list[tuple[str, tuple]]:
        """The locks that stop the run there, in turn (tests/helpers/kill.py)."""
        first = (garbage[(self.batch - 1) * BATCH],)
        if self.where == "inside":
            return [(LOCK_TOKEN, first)]
        # the table the next statement writes: the next batch's journal of blobs, the run log
        then = {"after": [("lock table src.eoctl_journal_blobs in share mode", ())],
                "finish": [("lock table src.eoctl_runs in share mode", ())]}
        return [(LOCK_INTENT, first), *then.get(self.where, [])]

    @property
    def removed(self) -> int:
        """How many garbage items (in key order) the killed run removed for good."""
        return (self.batch - (self.where == "inside")) * BATCH

    @property
    def intents_from(self) -> int:
        """The garbage items (in key order) from this one on still have their intents."""
        return self.removed - BATCH * (self.where == "intents")


STEPS = [*(Step("gc-tokens", where, k) for k in range(1, 6) for where in ("inside", "intents")),
         Step("gc-tokens", "finish", 5),
         *(Step("gc-blobs", where, k) for k in range(1, 4) for where in ("intents", "after") if (k, where) != (3, "after")),
         Step("gc-blobs", "finish", 3)]
# the default run's steps: a minute or two each (the chained test above kills gc-tokens inside a
# batch and before its intents)
DEFAULT_STEPS = {Step("gc-blobs", "intents", 2), Step("gc-blobs", "after", 1)}


def _by_run(conninfo: str, sql: str) -> dict[str, set]:
    """(run id, key) rows as {run id: keys}; a key twice (journaled by two runs, or twice by one) fails."""
    try:
        with psycopg.connect(conninfo) as conn:
            rows = conn.execute(sql).fetchall()
    except psycopg.errors.UndefinedTable:
        return {}
    assert len({key for _, key in rows}) == len(rows), f"a key journaled twice: {sorted(rows)}"
    out: dict[str, set] = {}
    for run, key in rows:
        out.setdefault(run, set()).add(key)
    return out


def _removed_by(state: WrittenState, db: str, command: str) -> dict[str, set]:
    """What each run removed: tokens by the journal; blobs by the journal, which must match the
    quarantine folders and say 'quarantined' of every one."""
    if command == "gc-tokens":
        return _by_run(db, "select eoctl_run_id, token_id from dst.eoctl_journal_eo_tokens")
    journal = _by_run(db, "select eoctl_run_id, name from src.eoctl_journal_blobs")
    assert journal == _by_run(db, "select eoctl_run_id, name from src.eoctl_journal_blobs where state = 'quarantined'")
    quarantine = state.blob_dir / ".eoctl-quarantine"
    moved = {run.name: {p.name for p in run.iterdir()} for run in quarantine.iterdir()} if quarantine.exists() else {}
    assert moved == journal
    return journal


def _present(state: WrittenState, db: str, command: str) -> set:
    if command == "gc-tokens":
        return _rows(db, "select token_id from dst.eo_tokens")
    return {p.name for p in state.blob_dir.iterdir() if p.is_file()}


@pytest.mark.parametrize("step", [pytest.param(s, id=f"{s.command}-{s.where}-{s.batch}",
                                               marks=() if s in DEFAULT_STEPS else pytest.mark.scale) for s in STEPS])
def test_gc_killed_at_a_step_converges(postgres, tmp_path: Path, gc, step: Step) -> None:
    """Killed at `step`, the run left exactly what the step says; the next run finishes it and
    collects the rest, nothing kept is lost, and the run after that finds nothing to do."""
    state = _state(tmp_path, postgres)
    db = _conninfo(state, postgres)
    kind = "token" if step.command == "gc-tokens" else "blob"
    truth = state.tokens if kind == "token" else state.blobs
    garbage = sorted(k for k, (c, i) in truth.items() if must_remove(c, i))
    assert len(garbage) == BATCHES[step.command] * BATCH
    kept_intents = _rows(db, f"select ref from src.eo_intents where kind = '{kind}'") - set(garbage)
    done, pending = garbage[:step.removed], set(garbage[step.intents_from:])

    kill_at_last_lock(db, step.locks(garbage), state.config_path, {**state.environ, **ENGINE}, step.command,
                      "--execute", "--batch-size", str(BATCH))
    [killed] = _rows(db, "select run_id from src.eoctl_runs where status = 'running'")
    assert _present(state, db, step.command) == set(truth) - set(done)
    assert _removed_by(state, db, step.command) == ({killed: set(done)} if done else {})
    assert _rows(db, f"select ref from src.eo_intents where kind = '{kind}'") == kept_intents | pending
    assert _rows(db, "select name from src.eoctl_leases") == {step.command}

    first = gc(state, step.command)
    assert first["finished_leftovers"] == [killed] and first["deleted"] == len(garbage) - len(done)
    assert _present(state, db, step.command) == set(truth) - set(garbage)
    after = {killed: set(done), first["run_id"]: set(garbage[len(done):])}
    assert _removed_by(state, db, step.command) == {run: keys for run, keys in after.items() if keys}
    assert _rows(db, f"select ref from src.eo_intents where kind = '{kind}'") == kept_intents
    # the intents of what the killed run removed are journaled under its id, so its restore stays whole
    intents = _by_run(db, f"select eoctl_run_id, ref from src.eoctl_journal_eo_intents where kind = '{kind}'")
    assert intents == {run: keys for run, keys in after.items() if keys}

    second = gc(state, step.command)
    assert (second["planned"], second["deleted"], second["finished_leftovers"]) == (0, 0, [])
    assert _present(state, db, step.command) == set(truth) - set(garbage)
    with psycopg.connect(db) as conn:
        runs = dict(conn.execute("select run_id, status from src.eoctl_runs").fetchall())
    assert runs == {killed: "interrupted", first["run_id"]: "finished", second["run_id"]: "finished"}


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
