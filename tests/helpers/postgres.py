"""A real PostgreSQL server (Debian's package) in a temporary directory, on a free loopback port."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.helpers.servers import free_port, log_tail


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise RuntimeError("PostgreSQL server binaries (initdb) not found; apt-get install postgresql")


class PostgresServer:
    """Superuser `eoctl` with a random password; database `eoctl`."""

    user = "eoctl"
    database = "eoctl"

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.dir = Path(tempfile.mkdtemp(prefix="eoctl-pg-"))
        self.port = free_port()
        self.password = "pw-" + secrets.token_hex(8)
        self.data = self.dir / "data"
        # PostgreSQL refuses to run as root: under root, run it as the package's postgres user.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self._as, *args], capture_output=True, text=True)

    def start(self) -> None:
        if self._as:
            shutil.chown(self.dir, "postgres", "postgres")
        pwfile = self.dir / "pw"
        pwfile.write_text(self.password + "\n")
        if self._as:
            shutil.chown(pwfile, "postgres", "postgres")
        init = self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user, "-A", "scram-sha-256",
                         f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync")
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.strip()[-500:]}")
        opts = f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.dir} -c fsync=off"
        start = self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "pg.log"),
                          "-o", opts, "-w", "-t", "60", "start")
        if start.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {start.stderr.strip()[-300:]}\n{log_tail(self.dir / 'pg.log')}")
        import psycopg

        with psycopg.connect(self.conninfo(dbname="postgres"), autocommit=True) as conn:
            conn.execute(f"create database {self.database}")

    def conninfo(self, dbname: str | None = None) -> str:
        return (f"host=127.0.0.1 port={self.port} user={self.user} password={self.password} "
                f"dbname={dbname or self.database}")

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
