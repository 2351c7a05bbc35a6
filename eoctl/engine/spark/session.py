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
from eoctl.engine.spark.jars import remember_resolution, resolved_before, spark_jar_settings
from eoctl.errors import EngineError
from eoctl.scratch import run_dir
from eoctl.secrets import spark_redaction

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_UTC_JVM = "-Duser.timezone=UTC"
# The JVM's own notices (unified logging: a class archive that does not match, GC warnings) go to
# stdout by default, where eoctl's JSON is: off, then warnings to stderr (the driver log).
_JVM_LOG_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr -XX:+DisplayVMOutputToStderr"


def java_path() -> str:
    """The `java` Spark's launcher runs (JAVA_HOME's, else PATH's); raises when there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise EngineError("java not found", hint="install Java 17 or newer and put it on PATH or set JAVA_HOME")
    return java


def java_version() -> tuple[int, str]:
    """(major, full version line) of the `java` Spark will launch; raises when there is none."""
    out = subprocess.run([java_path(), "-version"], capture_output=True, text=True, timeout=60).stderr
    line = out.strip().splitlines()[0] if out.strip() else "unknown"
    try:
        token = line.split('"')[1]
        major = int(token.split(".")[1] if token.startswith("1.") else token.split(".")[0].split("-")[0])
    except (IndexError, ValueError):
        major = 0
    return major, line


def session_settings(engine: EngineConfig, *, debug: bool = False, scratch: Path | None = None) -> dict[str, str]:
    """Every Spark setting eoctl applies, user `engine.conf` last so it wins. `scratch`: the run's
    temporary folder (eoctl.scratch), for the driver's temporary files."""
    settings = {
        "spark.app.name": engine.app_name,
        "spark.sql.session.timeZone": "UTC",
        # Executors must run the same Python as the driver, also on a standalone cluster.
        "spark.pyspark.python": sys.executable,
        "spark.ui.showConsoleProgress": "false",
        # Kafka allows a header key twice; lookups take the last value, as Kafka's lastHeader does.
        "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    }
    java_opts = f"{_UTC_JVM} {_JVM_LOG_TO_STDERR}"
    if scratch is not None:  # the driver's temporary files go under eoctl's run folder (eoctl.scratch)
        java_opts += f" -Djava.io.tmpdir={scratch / 'jvm'}"
    if not debug:
        quiet = resources.files("eoctl.engine.spark").joinpath("log4j2-quiet.properties")
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
        if scratch is not None:
            # On a cluster each worker chooses its own local dirs; here they are the run's.
            settings["spark.local.dir"] = str(scratch / "spark-local")
    settings.update(spark_jar_settings(engine))
    # Spark hides settings by a name rule of its own that misses many (fs.azure.account.key.*,
    # sasl.jaas.config, PEM keys): eoctl's rule, in its UI, event log and logs.
    settings.update(spark_redaction())
    settings.update(engine.conf)
    return settings


def start_session(engine: EngineConfig, *, debug: bool = False, record_classes: bool = False) -> SparkSession:
    """Start (or join) the SparkSession described by `engine`. A local driver maps eoctl's class
    archive when there is one (eoctl.engine.spark.class_archive); `record_classes`: else it records one,
    which the caller saves with class_archive.save() before it stops the session."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise EngineError(f"pyspark is not importable: {exc}") from None
    from eoctl.engine.spark import class_archive

    class_archive.reset()
    archive_options, launches, cache = "", False, None

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
        scratch = run_dir()
        for sub in ("jvm", "spark-local", "cwd"):
            (scratch / sub).mkdir(exist_ok=True)
        settings = session_settings(engine, debug=debug, scratch=scratch)
        cache = _cache_or_none()  # the class archive and Ivy's record live there; without one, neither
        archive_options = _class_archive_options(engine, settings, line, record_classes, cache)
        launches = _driver_jvm_pid() is None  # else getOrCreate joins the JVM there is, started without these
        if archive_options:
            settings["spark.driver.extraJavaOptions"] += f" {archive_options}"
        resolution = dict(settings)  # what Ivy resolves from; its record is keyed by these
        remembered = resolved_before(settings, cache) if cache is not None else None
        if remembered:
            del settings["spark.jars.packages"]
            settings["spark.jars"] = remembered
        for key, value in settings.items():
            builder = builder.config(key, value)
    log = None if debug or engine.remote else driver_log_path()
    try:
        with _stderr_to(log), _jvm_cwd(None if engine.remote else run_dir() / "cwd"), _own_signal_handlers():
            try:
                spark = builder.getOrCreate()
            except Exception:
                if not archive_options or not _no_driver_jvm() or not class_archive.stops_the_jvm(
                        java_path(), archive_options):
                    raise
                # the class archive's options stop the driver JVM (an archive cut short): never let
                # an optimisation stop a run; the archive goes (a later run records one) and Spark
                # starts without it
                class_archive.forget(cache, archive_options)
                builder = builder.config("spark.driver.extraJavaOptions", settings["spark.driver.extraJavaOptions"]
                                         .replace(f" {archive_options}", ""))
                archive_options = ""
                spark = builder.getOrCreate()
    except Exception as exc:  # py4j/grpc raise many types; one line is what the user needs
        where = engine.remote or engine.master
        hint = f"Spark's own output is in {log}" if log else None
        raise EngineError(f"Spark session could not start on {where}: {_first_line(exc)}", hint=hint) from exc
    if not engine.remote:
        pid = _driver_jvm_pid()
        if archive_options and launches and pid is not None:
            class_archive.check_mapped(cache, archive_options, pid)
        spark.sparkContext.setLogLevel("INFO" if debug else "ERROR")
        if cache is not None and "spark.jars.packages" in settings:  # Ivy resolved them: remember to what
            remember_resolution(resolution, cache, spark.sparkContext.getConf().get("spark.jars", ""))
    return spark


def _class_archive_options(engine: EngineConfig, settings: dict[str, str], java_line: str, record: bool,
                           cache: Path | None) -> str:
    """The driver's options for eoctl's class archive; none when it is turned off, or when the
    user's engine.conf sets the driver's JVM options (they are the user's to choose, -Xshare:off
    among them)."""
    if cache is None or not engine.class_archive or {
            "spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions"} & set(engine.conf):
        return ""
    from eoctl.engine.spark import class_archive

    return class_archive.driver_options(settings, cache, java_path(), java_line, record=record)


def _cache_or_none() -> Path | None:
    try:
        return cache_dir()
    except OSError:  # no writable home: Spark starts as it did before the cache
        return None


def _driver_jvm_pid() -> int | None:
    """The pid of the driver JVM PySpark launched in this process (spark-submit exec's it), if any."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)


def _no_driver_jvm() -> bool:
    """The session start failed before PySpark had a driver JVM to talk to, and not because a
    signal stopped it (a library may have turned eoctl's interrupt into an error of its own)."""
    from pyspark import SparkContext

    from eoctl import interrupts

    return SparkContext._gateway is None and interrupts.received() is None


def stop_session(spark: SparkSession, *, quiet: bool = True, wait_seconds: float = 30.0, end_jvm: bool = False) -> None:
    """Stop the session, also one a signal interrupted mid-call: bounded and, when `quiet`,
    without py4j's complaints about the call it cut. `end_jvm` (the CLI, at its end) also ends
    the driver JVM and waits for it, so that no task still writes in the run's temporary folder
    when it is removed; a test session's JVM is left for the next session."""
    import threading

    if end_jvm:
        from eoctl.logs import quiet_py4j

        quiet_py4j()  # the JVM ends below: what py4j says of calls it meets then is noise
    failure: list[BaseException] = []

    def stop() -> None:
        try:
            spark.stop()
        except Exception as exc:  # py4j raises many types once a call was cut short
            failure.append(exc)

    worker = threading.Thread(target=stop, name="eoctl-stop-spark", daemon=True)
    worker.start()
    worker.join(wait_seconds)
    if end_jvm:
        end_driver_jvm()
    if failure and not quiet:
        raise failure[0]


def end_driver_jvm(wait_seconds: float = 15.0) -> None:
    """End the driver JVM PySpark launched, and wait for it. It exits when its stdin closes; a
    JVM still starting (a signal cut its launch short, before PySpark kept a handle on it) is
    found among this process's children. SIGTERM, then SIGKILL, for one that does not exit."""
    import signal
    import time

    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None and proc.poll() is None and proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + wait_seconds
    signalled: set[int] = set()
    while children := _children():
        late = time.monotonic() > deadline - wait_seconds / 3
        for pid in children - signalled if late else ():
            _signal(pid, signal.SIGTERM)
            signalled.add(pid)
        if time.monotonic() > deadline:
            for pid in children:
                _signal(pid, signal.SIGKILL)
            break
        time.sleep(0.1)


def _children() -> set[int]:
    """Live child processes of this process (Linux /proc; none elsewhere). Exited ones are reaped."""
    import os

    from eoctl.procs import stat_fields

    me, out = os.getpid(), set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        fields = stat_fields(int(entry)) if entry.isdigit() else None
        if fields is None or int(fields[1]) != me:
            continue
        if fields[0] == "Z":
            try:
                os.waitpid(int(entry), os.WNOHANG)
            except ChildProcessError:
                pass
            continue
        out.add(int(entry))
    return out


def _signal(pid: int, signum: int) -> None:
    import os

    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def cache_dir() -> Path:
    """eoctl's cache folder, kept between runs: the driver's log, the class archive."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eoctl"
    base.mkdir(parents=True, exist_ok=True)
    return base


def driver_log_path() -> Path:
    """Where the driver JVM's own stderr goes unless --debug (dependency resolution, JVM notices)."""
    base = cache_dir()
    log = base / "spark-driver.log"
    if log.exists() and log.stat().st_size > 10 * 2**20:  # keep one previous generation, bounded
        log.replace(base / "spark-driver.log.1")
    return log


@contextmanager
def _own_signal_handlers() -> Iterator[None]:
    """Keep the process's SIGINT/SIGTERM handlers while the session starts.

    PySpark's SparkContext installs a SIGINT handler that calls into the JVM from inside the
    handler; a Ctrl-C while the main thread waits on the JVM then fails with py4j's "reentrant
    call" and the session start with it. eoctl's handler (eoctl.interrupts) never calls the JVM.
    """
    import signal

    install = signal.signal

    def keep(signum, handler):
        if signum in (signal.SIGINT, signal.SIGTERM):
            return signal.getsignal(signum)
        return install(signum, handler)

    signal.signal = keep
    try:
        yield
    finally:
        signal.signal = install


@contextmanager
def _jvm_cwd(folder: Path | None) -> Iterator[None]:
    """Launch the driver JVM in `folder`: Spark 4 creates `artifacts/spark-*` (and may create
    `spark-warehouse/`) relative to its working directory, which would litter wherever the
    operator ran eoctl and outlive a killed run. Every path eoctl hands Spark is absolute."""
    if folder is None:
        yield
        return
    saved = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(saved)


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
