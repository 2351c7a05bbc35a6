"""A real Spark standalone cluster (one master, one worker) and a Spark Connect server, on loopback,
started from the installed pyspark's own scripts and jars."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers.servers import free_port, log_tail, port_open, wait_until


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_HOME"] = str(spark_home())
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.setdefault("SPARK_NO_DAEMONIZE", "1")
    return env


class _Process:
    def __init__(self, name: str, args: list[str], workdir: Path) -> None:
        self.log = workdir / f"{name}.log"
        self.proc = subprocess.Popen(
            args, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, env=_env(), cwd=workdir,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


class StandaloneCluster:
    """`spark://127.0.0.1:PORT` with one worker of 2 cores."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="eoctl-spark-cluster-"))
        self.port, self.ui, self.worker_ui = free_port(), free_port(), free_port()
        self.procs: list[_Process] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> None:
        cls = str(spark_home() / "bin" / "spark-class")
        master = _Process("master", [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                     "--port", str(self.port), "--webui-port", str(self.ui)], self.dir)
        self.procs.append(master)
        if not wait_until(lambda: port_open(self.port) or not master.alive(), timeout) or not master.alive():
            raise RuntimeError(f"Spark master did not start:\n{log_tail(master.log)}")
        worker = _Process("worker", [cls, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                     "--cores", "2", "--memory", "2g", "--webui-port", str(self.worker_ui),
                                     "--work-dir", str(self.dir / "work"), self.master_url], self.dir)
        self.procs.append(worker)
        registered = lambda: "Successfully registered with master" in worker.log.read_text(errors="replace")  # noqa: E731
        if not wait_until(lambda: registered() or not worker.alive(), timeout) or not worker.alive():
            raise RuntimeError(f"Spark worker did not register:\n{log_tail(worker.log)}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()


class ConnectServer:
    """A Spark Connect server (local[2]) that has the Kafka connector and JDBC drivers on its classpath."""

    def __init__(self, jars_dir: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="eoctl-spark-connect-"))
        self.port = free_port()
        self.jars = ",".join(str(j) for j in sorted(jars_dir.glob("*.jar")))
        self.proc: _Process | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> None:
        submit = str(spark_home() / "bin" / "spark-submit")
        self.proc = _Process("connect", [
            submit, "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master", "local[2]", "--jars", self.jars,
            "--conf", f"spark.connect.grpc.binding.port={self.port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.sql.session.timeZone=UTC",
            "--conf", "spark.ui.enabled=false",
            "spark-internal",
        ], self.dir)
        proc = self.proc
        if not wait_until(lambda: port_open(self.port) or not proc.alive(), timeout) or not proc.alive():
            raise RuntimeError(f"Spark Connect server did not start:\n{log_tail(proc.log)}")

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()
