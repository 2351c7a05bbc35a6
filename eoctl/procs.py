"""Is a process alive, and is it still the same process: for leases and stale temporary folders."""

from __future__ import annotations

import os


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from its third field on (state, ppid, ...); None when gone or not Linux."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux); None when it is gone (a zombie,
    a killed child not yet reaped, counts as gone) or unknown."""
    fields = stat_fields(pid)
    if fields is None or fields[0] == "Z":
        return None
    return fields[19]  # field 22 of stat


def pid_alive(pid: int) -> bool:
    """A process with this pid exists and is not a zombie."""
    fields = stat_fields(pid)
    if fields is not None:
        return fields[0] != "Z"
    try:  # not in /proc (gone, or not Linux): ask the kernel
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
