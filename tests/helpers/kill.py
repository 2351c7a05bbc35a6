"""Stopping an eoctl run at an exact point and killing it there (PostgreSQL stores).

A test transaction holds a lock (`select ... for update` on a row, or `lock table`); the run
blocks on it at a known statement; the test sees the wait in `pg_stat_activity` and kills the
run's whole process group (Python driver and Spark JVM) with SIGKILL. A point no lock of its own
reaches (between two statements that take no lock the test can hold beforehand) is reached
through a chain of locks: the next is taken while the run waits on the one before, which is then
released, so the run goes on to the next and no further.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psycopg

from tests.helpers.servers import wait_until


def start_eoctl(config: Path, environ: dict[str, str], *args: str) -> subprocess.Popen:
    """`eoctl --config CONFIG --format json ARGS...` in its own process group."""
    return subprocess.Popen([sys.executable, "-m", "eoctl", "--config", str(config), "--format", "json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **environ}, start_new_session=True)


def eoctl_blocked(conninfo: str, by: int | None = None) -> bool:
    """An eoctl connection waits on a lock (one that backend `by` holds, when given)."""
    sql = "select count(*) from pg_stat_activity where application_name = 'eoctl' and wait_event_type = 'Lock'"
    with psycopg.connect(conninfo) as conn:
        if by is None:
            return bool(conn.execute(sql).fetchone()[0])
        return bool(conn.execute(sql + " and %s = any(pg_blocking_pids(pid))", (by,)).fetchone()[0])


@contextmanager
def locked(conninfo: str, sql: str, params: Sequence = ()) -> Iterator[int]:
    """Hold the lock `sql` takes for the block (yields the holding backend's pid); rolled back
    (released) at its end."""
    holder = psycopg.connect(conninfo)
    holder.execute(sql, tuple(params))
    try:
        yield holder.info.backend_pid
    finally:
        holder.rollback()
        holder.close()


def kill_when_blocked(conninfo: str, lock_sql: str, params: Sequence, config: Path, environ: dict[str, str],
                      *args: str) -> None:
    """Run eoctl ARGS until it waits on the lock, then kill -9 its process group."""
    kill_at_last_lock(conninfo, [(lock_sql, params)], config, environ, *args)


def kill_at_last_lock(conninfo: str, locks: Sequence[tuple[str, Sequence]], config: Path, environ: dict[str, str],
                      *args: str) -> None:
    """Run eoctl ARGS until it waits on the first lock, lead it on through the others in turn,
    and kill -9 its process group once it waits on the last."""
    proc: subprocess.Popen | None = None
    held: list[ExitStack] = []
    try:
        for sql, params in locks:
            lock = ExitStack()
            holder = lock.enter_context(locked(conninfo, sql, params))
            if held:
                held.pop().close()  # the run goes on from the lock it waited on, up to this one
            else:
                proc = start_eoctl(config, environ, *args)
            held.append(lock)
            assert proc is not None
            reached = wait_until(lambda: eoctl_blocked(conninfo, by=holder) or proc.poll() is not None, 240, 0.2)
            if not reached or proc.poll() is not None:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                _out, err = proc.communicate()
                raise AssertionError(f"eoctl never reached the lock of {sql!r} (exit {proc.returncode}): {err[-1500:]}")
        assert proc is not None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # The server would run the statement the run waits with once the lock goes (it notices a
        # lost client only when it next reads from it), committing it outside a transaction: it
        # is ended here, as the kill ended the run before that statement.
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("select pg_terminate_backend(pid, 10000) from pg_stat_activity "
                         "where application_name = 'eoctl' and %s = any(pg_blocking_pids(pid))", (holder,))
    finally:
        for lock in held:
            lock.close()


def group_gone(pgid: int) -> bool:
    """No process of the group `pgid` is left (a run started with start_new_session: its JVMs)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False
