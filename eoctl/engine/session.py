"""The one SparkSession factory: local[*] by default, a cluster with master, Spark Connect with remote."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from eoctl.config.model import EngineConfig
from eoctl.engine.jars import spark_jar_settings
from eoctl.errors import EngineError
from eoctl.secrets import spark_redaction

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_UTC_JVM = "-Duser.timezone=UTC"


def java_version() -> tuple[int, str]:
    """(major, full version line) of the `java` Spark will launch; raises when there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise EngineError("java not found", hint="install Java 17 or newer and put it on PATH or set JAVA_HOME")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    line = out.strip().splitlines()[0] if out.strip() else "unknown"
    try:
        token = line.split('"')[1]
        major = int(token.split(".")[1] if token.startswith("1.") else token.split(".")[0].split("-")[0])
    except (IndexError, ValueError):
        major = 0
    return major, line


def session_settings(engine: EngineConfig, *, debug: bool = False) -> dict[str, str]:
    """Every Spark setting eoctl applies, user `engine.conf` last so it wins."""
    settings = {
        "spark.app.name": engine.app_name,
        "spark.sql.session.timeZone": "UTC",
        # Executors must run the same Python as the driver, also on a standalone cluster.
        "spark.pyspark.python": sys.executable,
        "spark.ui.showConsoleProgress": "false",
        # Kafka allows a header key twice; lookups take the last value, as Kafka's lastHeader does.
        "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    }
    java_opts = _UTC_JVM
    if not debug:
        quiet = resources.files("eoctl.engine").joinpath("log4j2-quiet.properties")
        java_opts += f" -Dlog4j2.configurationFile={quiet}"
    settings["spark.driver.extraJavaOptions"] = java_opts
    settings["spark.executor.extraJavaOptions"] = java_opts
    if engine.master.startswith("local"):
        # Spark's default of 200 shuffle partitions is for clusters; on one machine it only adds
        # per-task overhead to every job (engine.conf can still set it).
        settings["spark.sql.shuffle.partitions"] = "16"
        # Files split into 16 MiB tasks, not 128 MiB: a 350 MiB topic archive then makes 22
        # tasks for 2 cores instead of 3 (the last running alone), and the audit's cached
        # records are in blocks small enough to read back from disk within the default heap.
        settings["spark.sql.files.maxPartitionBytes"] = "16m"
        # Kryo writes cached blocks that spill to disk more compactly than Java serialization.
        settings["spark.serializer"] = "org.apache.spark.serializer.KryoSerializer"
    settings.update(spark_jar_settings(engine))
    # Spark hides settings by a name rule of its own that misses many (fs.azure.account.key.*,
    # sasl.jaas.config, PEM keys): eoctl's rule, in its UI, event log and logs.
    settings.update(spark_redaction())
    settings.update(engine.conf)
    return settings


def start_session(engine: EngineConfig, *, debug: bool = False) -> SparkSession:
    """Start (or join) the SparkSession described by `engine`."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise EngineError(f"pyspark is not importable: {exc}") from None

    builder = SparkSession.builder
    if engine.remote:
        # A Connect server owns its jars and JVM settings; only session settings travel.
        builder = builder.remote(engine.remote).config("spark.sql.session.timeZone", "UTC").config(
            "spark.sql.mapKeyDedupPolicy", "LAST_WIN")
        for key, value in {**spark_redaction(remote=True), **engine.conf}.items():
            builder = builder.config(key, value)
    else:
        major, line = java_version()
        if major and major < 17:
            raise EngineError(f"Spark 4 needs Java 17 or newer, found: {line}", hint="set JAVA_HOME to a Java 17+ JDK")
        builder = builder.master(engine.master)
        for key, value in session_settings(engine, debug=debug).items():
            builder = builder.config(key, value)
    log = None if debug or engine.remote else driver_log_path()
    try:
        with _stderr_to(log):
            spark = builder.getOrCreate()
    except Exception as exc:  # py4j/grpc raise many types; one line is what the user needs
        where = engine.remote or engine.master
        hint = f"Spark's own output is in {log}" if log else None
        raise EngineError(f"Spark session could not start on {where}: {_first_line(exc)}", hint=hint) from exc
    if not engine.remote:
        spark.sparkContext.setLogLevel("INFO" if debug else "ERROR")
    return spark


def driver_log_path() -> Path:
    """Where the driver JVM's own stderr goes unless --debug (dependency resolution, JVM notices)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eoctl"
    base.mkdir(parents=True, exist_ok=True)
    log = base / "spark-driver.log"
    if log.exists() and log.stat().st_size > 10 * 2**20:  # keep one previous generation, bounded
        log.replace(base / "spark-driver.log.1")
    return log


@contextmanager
def _stderr_to(log: Path | None) -> Iterator[None]:
    """Point file descriptor 2 at `log` while the driver JVM starts, so the JVM inherits it.

    The JVM prints Ivy's dependency resolution and JVM notices straight to its stderr, which
    log4j settings cannot quiet; eoctl's own stderr is restored as soon as the JVM runs.
    """
    if log is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log, "ab") as target:
            os.dup2(target.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
