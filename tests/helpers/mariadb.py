"""A real MariaDB server (Debian's mariadb-server-core) in a temporary directory, on a free loopback
port: the MySQL-protocol store the tests load the chaos pipeline's state into."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers.servers import free_port, log_tail


def _binaries() -> tuple[str, str]:
    server = shutil.which("mariadbd") or ("/usr/sbin/mariadbd" if Path("/usr/sbin/mariadbd").exists() else None)
    install = shutil.which("mariadb-install-db")
    if not server or not install:
        raise RuntimeError("MariaDB server binaries (mariadbd, mariadb-install-db) not found; "
                           "apt-get install mariadb-server-core mariadb-client-core")
    return server, install


class MariaDBServer:
    """User `eoctl` with a random password and every privilege; database `eoctl`."""

    user = "eoctl"
    database = "eoctl"

    def __init__(self) -> None:
        self.server, self.install = _binaries()
        self.dir = Path(tempfile.mkdtemp(prefix="eoctl-mariadb-"))
        self.port = free_port()
        self.password = "pw-" + secrets.token_hex(8)
        self.data = self.dir / "data"
        self._proc: subprocess.Popen | None = None

    def start(self) -> None:
        init = subprocess.run([self.install, "--no-defaults", f"--datadir={self.data}", "--user=root",
                               "--auth-root-authentication-method=normal", "--skip-test-db"],
                              capture_output=True, text=True)
        if init.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {init.stderr.strip()[-500:]}")
        log = self.dir / "mariadb.log"
        self._proc = subprocess.Popen(
            [self.server, "--no-defaults", f"--datadir={self.data}", "--user=root", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--socket={self.dir / 'mysqld.sock'}", f"--pid-file={self.dir / 'pid'}",
             f"--log-error={log}", "--innodb-buffer-pool-size=64M", "--skip-log-bin", "--innodb-flush-log-at-trx-commit=2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import pymysql

        deadline = time.monotonic() + 60
        while True:
            try:
                conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", autocommit=True)
                break
            except pymysql.err.OperationalError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mariadbd did not start\n{log_tail(log)}") from None
                time.sleep(0.1)
        with conn.cursor() as cur:
            cur.execute(f"create database {self.database}")
            cur.execute(f"create user '{self.user}'@'%' identified by '{self.password}'")
            cur.execute(f"grant all privileges on *.* to '{self.user}'@'%'")
        conn.close()

    def connect(self, database: str | None = None):
        import pymysql

        return pymysql.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                               database=database or self.database, autocommit=True)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
