"""Measuring a command as a user runs it: wall time and peak RSS of its whole process tree."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path


def _shares_parent_memory(pid: int, parent: int) -> bool:
    """True for a child caught between vfork/posix_spawn and exec (the JVM starts `chmod` and
    friends that way): it runs in its parent's address space, so its RSS is the parent's again.
    Summing it counted the JVM twice and showed as 2.4-2.8 GiB "spikes"."""
    import ctypes

    try:  # kcmp(pid1, pid2, KCMP_VM, 0, 0): 0 when both share one mm (x86_64 syscall 312)
        return ctypes.CDLL(None, use_errno=True).syscall(312, pid, parent, 1, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants, from /proc; an address space shared
    by a parent and a not-yet-exec'd child is counted once."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, stack = rss.get(pid, 0), [pid]
    while stack:
        p = stack.pop()
        for child in children.get(p, []):
            if not _shares_parent_memory(child, p):
                total += rss.get(child, 0)
            stack.append(child)
    return total


REPO = Path(__file__).resolve().parents[1]


def compiled() -> None:
    """eoctl's modules and the bench scripts compiled to bytecode, as an installed package's are:
    pip compiles a wheel's modules as it installs them, and an editable install writes them at
    its first run, unless PYTHONDONTWRITEBYTECODE is set. This machine sets it: every run then
    compiled eoctl's sources again (0.1 s of a 1M-token gc plan's 1.1 s), which no user pays.
    A no-op when the bytecode is current."""
    import compileall

    for folder in ("eoctl", "bench"):
        compileall.compile_dir(str(REPO / folder), quiet=1)


def run_measured(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, int, str, str]:
    """(wall seconds, peak RSS bytes of the process tree sampled every 100 ms, exit code, stdout,
    stderr); eoctl's bytecode made first (compiled), outside the time measured."""
    compiled()
    start = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    peak = 0

    def sample() -> None:
        nonlocal peak
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - start  # before the join: the sampler sees the exit up to 0.1 s late
    sampler.join()
    return wall, peak, proc.returncode, stdout.decode(), stderr.decode()


def with_broker(args, bench) -> int:
    """Run `bench(args)`; with `args.start_broker`, on the test bed's Kafka broker (started here,
    stopped after), whose address goes to `args.kafka`."""
    if not args.start_broker:
        return bench(args)
    from tests.helpers.kafka_broker import KafkaBroker

    broker = KafkaBroker()
    broker.start()
    args.kafka = broker.bootstrap
    try:
        return bench(args)
    finally:
        broker.stop()
