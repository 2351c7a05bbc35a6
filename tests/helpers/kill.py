"""Stopping an eoctl run at an exact point and killing it there (PostgreSQL stores).

A test transaction holds a lock (`select ... for update` on a row, or `lock table`); the run
blocks on it at a known statement; the test sees the wait in `pg_stat_activity` and kills the
run's whole process group (Python driver and Spark JVM) with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.helpers.servers import wait_until


def start_eoctl(config: Path, environ: dict[str, str], *args: str) -> subprocess.Popen:
    """`eoctl --config CONFIG --format json ARGS...` in its own process group."""
    return subprocess.Popen([sys.executable, "-m", "eoctl", "--config", str(config), "--format", "json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **environ}, start_new_session=True)


def eoctl_blocked(conninfo: str) -> bool:
    """An eoctl connection waits on a lock."""
    with psycopg.connect(conninfo) as conn:
        return bool(conn.execute("select count(*) from pg_stat_activity where application_name = 'eoctl' "
                                 "and wait_event_type = 'Lock'").fetchone()[0])


@contextmanager
def locked(conninfo: str, sql: str, params: Sequence = ()) -> Iterator[None]:
    """Hold the lock `sql` takes for the block; rolled back (released) at its end."""
    holder = psycopg.connect(conninfo)
    holder.execute(sql, tuple(params))
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


def kill_when_blocked(conninfo: str, lock_sql: str, params: Sequence, config: Path, environ: dict[str, str],
                      *args: str) -> None:
    """Run eoctl ARGS until it waits on the lock, then kill -9 its process group."""
    with locked(conninfo, lock_sql, params):
        proc = start_eoctl(config, environ, *args)
        if not wait_until(lambda: eoctl_blocked(conninfo) or proc.poll() is not None, 240, 0.2) or proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"eoctl never reached the lock (exit {proc.returncode}): {err[-1500:]}")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
