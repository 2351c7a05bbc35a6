"""eoctl's own temporary files: one folder per run, under one documented place.

    $EOCTL_TMPDIR, else <system temp>/eoctl-<uid>/      the root
        run-<pid>-<start>/                               one run's folder, removed when it ends
            jvm/          the Spark driver's java.io.tmpdir
            spark-local/  Spark's spark.local.dir (shuffle, spilled blocks) on a local master
            cwd/          the driver JVM's working directory (Spark 4 writes `artifacts/` there)
            ...           DuckDB snapshots, the audit's working copy, fetched jars in flight

A run killed with SIGKILL cannot remove its folder; the next run does. A folder is stale when its
process is gone: the name carries the pid and the process's start time, so a pid the system gave
to another process since does not keep a dead run's folder alive, and a live run's is never taken.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from pathlib import Path

from eoctl.procs import pid_alive, start_time

_run_dir: Path | None = None
# A folder younger than this is left alone even when its process looks gone: where the start
# time is unknown (not Linux), a pid alone could name a process that was just reused.
_STALE_AFTER_S = 10.0


def root() -> Path:
    """The folder every eoctl run on this machine puts its temporary files under."""
    configured = os.environ.get("EOCTL_TMPDIR")
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"eoctl-{os.getuid()}"


def _alive(pid: int, start: str) -> bool:
    current = start_time(pid)
    if current is not None:
        return current == start
    return not Path("/proc/self/stat").exists() and pid_alive(pid)  # Linux: not in /proc is gone


def remove_stale(base: Path | None = None) -> list[Path]:
    """Remove the folders of runs whose process is gone (by name and age); returns what it removed."""
    base = base or root()
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        parts = entry.name.split("-")
        if len(parts) != 3 or parts[0] != "run" or not parts[1].isdigit():
            continue  # not ours: leave it
        try:
            if now - entry.stat().st_mtime < _STALE_AFTER_S or _alive(int(parts[1]), parts[2]):
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def run_dir() -> Path:
    """This process's temporary folder, created on first use (stale ones are removed then)."""
    global _run_dir
    if _run_dir is None:
        base = root()
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        remove_stale(base)
        pid = os.getpid()
        path = base / f"run-{pid}-{start_time(pid) or int(time.time())}"
        path.mkdir(exist_ok=True, mode=0o700)
        _run_dir = path
        atexit.register(remove_run_dir)
    return _run_dir


def subdir(name: str) -> Path:
    path = run_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def remove_run_dir() -> None:
    """Remove this run's folder (at the end of the run; safe to call twice)."""
    global _run_dir
    if _run_dir is not None:
        shutil.rmtree(_run_dir, ignore_errors=True)
        _run_dir = None
