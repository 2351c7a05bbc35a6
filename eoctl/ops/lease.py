"""A single-runner lease and a run log in the control store, so two cron runs never overlap.

On PostgreSQL the lease is a row taken with compare-and-set writes (no lock held between
statements). A run that was killed leaves its row behind; the next run takes it over when the
holder's process is gone (same host) or when the holder stopped renewing it for
`ops.lease_ttl_seconds`.

On DuckDB the lease is an exclusive `flock` on a file beside the database
(`state.duckdb.eoctl-gc-tokens.lock`), never a row in it. DuckDB lets one process at a time open a
file for writing, so a refused run that opened the database only to read the lease would lock the
holder out of its own next batch (seen with 20 overlapping cron runs). A DuckDB file is local to
one host, and the kernel drops a flock when its process dies, even by SIGKILL: no takeover rule is
needed, and a refused run never touches the database.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eoctl.config.model import Config, DuckDBStore
from eoctl.errors import LeaseHeld, SourceError
from eoctl.procs import pid_alive
from eoctl.secrets import redact
from eoctl.stores import sql
from eoctl.stores.connection import store_named
from eoctl.stores.db import Db, open_db

LEASES = "eoctl_leases"
RUNS = "eoctl_runs"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _ensure_tables(db: Db) -> None:
    def create() -> None:
        db.execute("create table if not exists :t (name varchar primary key, "
                   "run_id varchar not null, holder_host varchar not null, holder_pid bigint not null, "
                   "acquired_at timestamptz not null, renewed_at timestamptz not null)", t=db.table(LEASES))
        db.execute("create table if not exists :t (run_id varchar primary key, "
                   "command varchar not null, started_at timestamptz not null, finished_at timestamptz, "
                   "status varchar not null, summary text)", t=db.table(RUNS))
        if "holder_scope" not in (db.columns(LEASES) or ()):  # added later: leases made before have none
            db.execute("alter table :t add column holder_scope varchar", t=db.table(LEASES))

    # every changing command's first statements (every lease call comes here): several may start at once
    db.make(LEASES, lambda: "holder_scope" in (db.columns(LEASES) or ()) and db.columns(RUNS) is not None, create)


def process_scope() -> str | None:
    """Where this process's pid means this process: the boot (a reboot reuses pids) and the pid
    namespace (a container on the same hostname has pids of its own). None where Linux's /proc
    does not say: a pid is then never taken for a dead holder."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
        return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return None


@dataclass
class Lease:
    """The right to run `name`; use as a context manager around the work."""

    config: Config
    name: str
    run_id: str

    _lock_fd: int | None = field(default=None, init=False, repr=False)

    def _db(self):
        return open_db(store_named(self.config, self.config.control_store()))

    def _duckdb_path(self) -> Path | None:
        """The control store's DuckDB file; None for PostgreSQL (a row lease)."""
        store = store_named(self.config, self.config.control_store())
        return Path(store.path) if isinstance(store, DuckDBStore) else None

    def acquire(self) -> Lease:
        database = self._duckdb_path()
        if database is not None:
            return self._acquire_file(database)
        host, pid, now, scope = socket.gethostname(), os.getpid(), utcnow(), process_scope()
        ttl = dt.timedelta(seconds=self.config.ops.lease_ttl_seconds)
        with self._db() as db:
            _ensure_tables(db)
            rows = db.execute("select run_id, holder_host, holder_pid, renewed_at, holder_scope "
                              "from :t where name = %s", [self.name], t=db.table(LEASES))
            if not rows:
                try:
                    db.execute("insert into :t (name, run_id, holder_host, holder_pid, acquired_at, "
                               "renewed_at, holder_scope) values (%s, %s, %s, %s, %s, %s, %s)",
                               [self.name, self.run_id, host, pid, now, now, scope], t=db.table(LEASES))
                except Exception as exc:  # a concurrent run inserted first (unique key)
                    if "duplicate" not in str(exc).lower() and "constraint" not in str(exc).lower():
                        raise
                    raise LeaseHeld(f"another {self.name} run took the lease at the same moment") from None
            else:
                old_run, old_host, old_pid, renewed, old_scope = rows[0]
                renewed = renewed if renewed.tzinfo else renewed.replace(tzinfo=dt.timezone.utc)
                # a pid missing here is a dead holder only in this boot and pid namespace: a
                # container beside this one on the same hostname has its own pids (else: the TTL)
                here = old_host == host and scope is not None and old_scope == scope
                stale = now - renewed > ttl or (here and not pid_alive(int(old_pid)))
                if not stale:
                    age = int((now - renewed).total_seconds())
                    raise LeaseHeld(f"{self.name} is already running: run {old_run} on {old_host} pid {old_pid}, "
                                    f"lease renewed {age}s ago")
                # compare-and-set on the old holder: of two runs taking over, one wins
                taken = db.rowcount("update :t set run_id = %s, holder_host = %s, holder_pid = %s, "
                                    "acquired_at = %s, renewed_at = %s, holder_scope = %s where name = %s and run_id = %s",
                                    [self.run_id, host, pid, now, now, scope, self.name, old_run], t=db.table(LEASES))
                if taken != 1:
                    raise LeaseHeld(f"another {self.name} run took over the stale lease at the same moment")
        return self

    def _acquire_file(self, database: Path) -> Lease:
        if not database.exists():  # no lock file beside a database that is not there (a typo)
            raise SourceError(f"DuckDB file {database} does not exist")
        fd = os.open(f"{database}.eoctl-{self.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (PEP 446)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LeaseHeld(f"{self.name} is already running: {holder}") from None
        except BaseException:
            os.close(fd)
            raise
        # who holds it, for the refusal message of the next run, and which database and lease it
        # is the lock of (another file may be: see _holder_elsewhere)
        identity = _file_identity(database)
        info = json.dumps({"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                           "acquired_at": utcnow().isoformat(timespec="seconds"),
                           "database": identity, "lease": self.name}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        holder = _holder_elsewhere(fd, identity, self.name)
        if holder is not None:
            os.close(fd)
            raise LeaseHeld(f"{self.name} is already running: {holder}")
        self._lock_fd = fd
        return self

    def renew(self) -> None:
        if self._duckdb_path() is not None:
            return  # a flock is held until released or the process dies: nothing to renew
        with self._db() as db:
            kept = db.rowcount("update :t set renewed_at = %s where name = %s and run_id = %s",
                               [utcnow(), self.name, self.run_id], t=db.table(LEASES))
        if kept != 1:
            raise LeaseHeld(f"the {self.name} lease of run {self.run_id} was taken over; stopping")

    def release(self) -> None:
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)  # closing drops the flock; the file stays for the next run
            return
        with self._db() as db:
            db.execute("delete from :t where name = %s and run_id = %s", [self.name, self.run_id], t=db.table(LEASES))

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _file_identity(path: Path) -> str:
    """A file's device and inode: the same for every path to it (a hard link, a symlink)."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"


def _holder_elsewhere(own: int, database: str, lease: str) -> str | None:
    """A process holding `lease` of `database` (its device:inode) through another lock file than
    `own`'s: the lock file was removed or renamed during a run, or the database is reached by
    another path (a hard link). Each lock file says which database and lease it locks; Linux's
    /proc/locks names every file held by a flock and its holder, and the holder's descriptor
    reads the file whatever its path is now. Elsewhere None (nothing to read): the lock file's
    own flock is all there is."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            held = [(int(f[4]), f[5]) for f in (line.split() for line in fh)
                    if len(f) > 5 and f[1] == "FLOCK" and f[3] == "WRITE" and f[4].isdigit()]
    except OSError:
        return None
    mine = os.fstat(own)
    for pid, where in held:
        try:
            major, minor, inode = where.split(":")
            if (int(inode), int(major, 16), int(minor, 16)) == (mine.st_ino, os.major(mine.st_dev),
                                                                os.minor(mine.st_dev)):
                continue  # this lease's own file
            fds = os.listdir(f"/proc/{pid}/fd")
        except (OSError, ValueError):
            continue
        for fd in fds:
            link = f"/proc/{pid}/fd/{fd}"
            try:
                st = os.stat(link)
                if st.st_ino != int(inode) or (os.major(st.st_dev), os.minor(st.st_dev)) != (int(major, 16),
                                                                                                int(minor, 16)):
                    continue
                with open(link, "rb") as fh:
                    info = json.loads(fh.read(4096) or b"{}")
                path = os.readlink(link)
            except (OSError, ValueError):
                continue
            if isinstance(info, dict) and info.get("database") == database and info.get("lease") == lease:
                return (f"run {info.get('run_id')} (pid {pid}) holds the lease through the lock file {path}, "
                        "whose path is not this one's (removed, renamed, or the database reached by another path)")
    return None


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        since = dt.datetime.fromisoformat(info["acquired_at"])
        age = int((utcnow() - since).total_seconds())
        return f"run {info['run_id']} on {info['host']} pid {info['pid']}, holding the lease for {age}s"
    except (ValueError, KeyError, TypeError):  # the holder is between taking the lock and writing its name
        return "another run holds the lease"


class RunLog:
    """One row per run of a command that changes things: when, what, how it ended."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def _db(self):
        return open_db(store_named(self.config, self.config.control_store()))

    def start(self, run_id: str, command: str) -> None:
        with self._db() as db:
            _ensure_tables(db)
            db.execute("insert into :t values (%s, %s, %s, null, 'running', null)",
                       [run_id, command, utcnow()], t=db.table(RUNS))

    def finish(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        with self._db() as db:
            db.execute("update :t set finished_at = %s, status = %s, summary = %s where run_id = %s",
                       [utcnow(), status, json.dumps(redact(summary), default=str), run_id], t=db.table(RUNS))

    def unfinished(self, command: str, current: str) -> list[str]:
        """Runs of `command` that never finished (killed or failed): the next run finishes their leftovers."""
        with self._db() as db:
            _ensure_tables(db)
            rows = db.execute("select run_id from :t where command = %s and status in ('running', 'failed', 'stopped') "
                              "and run_id <> %s order by started_at", [command, current], t=db.table(RUNS))
        return [r[0] for r in rows]

    def runs(self, limit: int = 20, command: str | None = None) -> list[dict[str, Any]]:
        """The newest runs (of `command`, when given), newest first: id, command, times, status and
        summary. Read only: a store no run has used yet has none (nothing is created)."""
        with open_db(store_named(self.config, self.config.control_store()), read_only=True) as db:
            if db.columns(RUNS) is None:
                return []
            rows = db.execute("select run_id, command, started_at, finished_at, status, summary from :t "
                              "where :chosen order by started_at desc, run_id desc limit %s",
                              [*([command] if command else []), limit], t=db.table(RUNS),
                              chosen=sql.fragment("command = %s") if command else sql.every())
        out = []
        for run_id, cmd, started, finished, status, summary in rows:
            out.append({"id": run_id, "command": cmd, "started_at": started, "finished_at": finished,
                        "status": status, "summary": json.loads(summary) if summary else None})
        return out

    def get(self, run_id: str) -> tuple[str, str] | None:
        """(command, status) of a run, or None."""
        with self._db() as db:
            _ensure_tables(db)
            rows = db.execute("select command, status from :t where run_id = %s", [run_id], t=db.table(RUNS))
        return (rows[0][0], rows[0][1]) if rows else None

    def set_status(self, run_id: str, status: str) -> None:
        with self._db() as db:
            db.execute("update :t set status = %s where run_id = %s", [status, run_id], t=db.table(RUNS))
