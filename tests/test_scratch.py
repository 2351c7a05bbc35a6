"""eoctl's temporary folders: one per run under one root; a later run removes dead runs' folders,
never a live run's, never what is not eoctl's."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from eoctl import scratch
from eoctl.procs import start_time


def _old(path: Path) -> Path:
    path.mkdir()
    (path / "spill.bin").write_bytes(b"x" * 10)
    past = time.time() - 3600
    os.utime(path, (past, past))
    return path


def test_only_dead_runs_folders_are_removed(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    me = os.getpid()
    start = start_time(me)
    assert start is not None
    dead = _old(tmp_path / f"run-{gone.pid}-123")
    reused = _old(tmp_path / f"run-{me}-{int(start) + 1}")  # this pid, but another process's start
    live = _old(tmp_path / f"run-{me}-{start}")
    young = tmp_path / f"run-{gone.pid}-456"
    young.mkdir()  # a run that is starting: its process may not be visible yet
    foreign = _old(tmp_path / "run-notes")
    other = _old(tmp_path / "spark-1234")

    assert sorted(scratch.remove_stale(tmp_path)) == sorted([dead, reused])
    assert not dead.exists() and not reused.exists()
    assert live.exists() and young.exists() and foreign.exists() and other.exists()


def test_a_run_folder_lives_under_the_root_until_the_run_ends(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EOCTL_TMPDIR", str(tmp_path / "root"))
    monkeypatch.setattr(scratch, "_run_dir", None)
    stale = tmp_path / "root" / "run-999999999-1"
    stale.parent.mkdir()
    _old(stale)
    folder = scratch.subdir("duckdb")
    assert folder.parent.parent == tmp_path / "root" and folder.is_dir()
    assert folder.parent.name == f"run-{os.getpid()}-{start_time(os.getpid())}"
    assert not stale.exists()  # removed when this run made its own
    scratch.remove_run_dir()
    assert not folder.parent.exists()
    scratch.remove_run_dir()  # twice is harmless
