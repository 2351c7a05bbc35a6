"""A class-data-sharing (CDS) archive for the Spark driver's JVM: later runs start sooner.

Before Spark runs its first job, the driver JVM loads, parses and verifies some 20,000 classes;
that is about half of "starting Spark" and of the first job. The JVM can map classes it once
loaded from an archive instead (JDK 13+ "dynamic" archives). The first run of a classpath
records (`-XX:+RecordDynamicDumpInfo`) and, when the command ends well, asks its own JVM to write
the classes it loaded (the `VM.cds dynamic_dump` diagnostic command, JDK 17+, through JMX: no
`jcmd` needed); later runs map that archive (`-XX:SharedArchiveFile`). Measured on a 2-core
machine: a session's start 5.6-6.1 s to 3.7-4.5 s, its first job 3.0-3.4 s to 1.4-1.9 s; the
recording run is 10-25 s slower, once (recording slows class loading; the dump takes 6-12 s). JDK 19's `-XX:+AutoCreateSharedArchive` does the same, but Spark 4 runs on 17.

Safe to kill and to run twice: the archive is written under a name of this process, renamed
when whole; the final name carries the file's size, and a file whose size is not its name's
(a truncated archive crashes the JVM that maps it) is never used. The JVM itself checks the
archive against its version and classpath and ignores one that does not match.

`engine.class_archive = false` (or `EOCTL_CLASS_ARCHIVE=false`) turns it off; so does a
`spark.driver.extraJavaOptions` of the user's own (eoctl then leaves the driver's JVM alone).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eoctl import interrupts, logs
from eoctl.errors import Interrupted
from eoctl.procs import pid_alive

_PREFIX = "spark-classes-"
_SUFFIX = ".jsa"
_KEY_CHARS = 16
# the probe's own JVM: quiet, as the driver's is (eoctl.engine.spark.session)
_QUIET = ("-Xlog:disable", "-Xlog:all=warning:stderr")
_RECORD = "-XX:+RecordDynamicDumpInfo"
_MAP = "-XX:SharedArchiveFile="
_UNUSED_FOR_S = 30 * 86400  # an archive no run used for this long is removed (a Java or Spark since replaced)
_TMP_STALE_S = 3600  # a temporary archive this old belongs to a run that was killed (or a pid since reused)
_FAILED_FOR_S = 86400  # after a dump failed (a full disk), runs do not record again for this long
_SETTINGS_IN_KEY = ("spark.jars", "spark.jars.packages", "spark.jars.repositories", "spark.driver.extraClassPath")
# where spark-submit takes the driver's classpath from, besides pyspark's own jars
_ENV_IN_KEY = ("SPARK_HOME", "SPARK_CONF_DIR", "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH", "HADOOP_CONF_DIR",
               "YARN_CONF_DIR")

_log = logs.get("class_archive")
_recording: Recording | None = None  # the archive this process's driver JVM records, if any
_unfinished: Path | None = None  # a dump a signal cut short: its JVM may still write it until it ends


@dataclass(frozen=True)
class Recording:
    folder: Path
    key: str


def key_of(settings: dict[str, str], java: str, java_line: str) -> str:
    """What decides which classes the driver loads: the JVM, the Spark installation and the jars
    added to it. Not the run's own paths (its temporary folder), which differ every run. What the
    key misses, the JVM checks: an archive it does not map is removed (check_mapped)."""
    import pyspark

    parts = [os.path.realpath(java), java_line, pyspark.__version__, os.path.dirname(pyspark.__file__)]
    parts += [f"{k}={settings.get(k, '')}" for k in _SETTINGS_IN_KEY]
    parts += [f"{k}={os.environ.get(k, '')}" for k in _ENV_IN_KEY]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:_KEY_CHARS]


def _size_of_name(path: Path, key: str) -> int | None:
    tail = path.name[len(_PREFIX) + len(key) + 1 : -len(_SUFFIX)]
    return int(tail) if tail.isdigit() else None


def find(folder: Path, key: str) -> Path | None:
    """The newest whole archive of `key` (its size the one its name gives), marked as used now."""
    whole = []
    for path in folder.glob(f"{_PREFIX}{key}-*{_SUFFIX}"):
        try:
            stat = path.stat()
        except OSError:
            continue
        if _size_of_name(path, key) == stat.st_size:
            whole.append((stat.st_mtime, path))
    if not whole:
        return None
    path = max(whole)[1]
    try:
        os.utime(path)  # the clean-up keeps archives by their last use
    except OSError:
        pass
    return path


def _jvm_starts(java: str, options: str) -> bool:
    """Whether `java` starts with `options` (~0.15 s). A JVM without its base CDS archive, or
    told -Xshare:off, refuses to record; a truncated archive crashes the JVM that maps it."""
    try:
        return subprocess.run([java, *options.split(), *_QUIET, "-version"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _failed_lately(folder: Path, key: str) -> bool:
    try:
        return time.time() - (folder / f"{_PREFIX}{key}.failed").stat().st_mtime < _FAILED_FOR_S
    except OSError:
        return False


def reset() -> None:
    """A new session: nothing recorded yet."""
    global _recording
    _recording = None


def driver_options(settings: dict[str, str], folder: Path, java: str, java_line: str, *, record: bool) -> str:
    """The driver JVM options for the archive: map the one there is, else (when `record`: this
    process will call save()) record one. Empty when neither applies."""
    global _recording
    _recording = None
    key = key_of(settings, java, java_line)
    archive = find(folder, key)
    clean(folder, keep=archive)
    if archive is not None:
        return f"{_MAP}{archive}"
    if record and not _failed_lately(folder, key) and _jvm_starts(java, _RECORD):
        _recording = Recording(folder, key)
        return _RECORD
    return ""


def stops_the_jvm(java: str, options: str) -> bool:
    """The driver did not start: whether `options` are why (a JVM with them alone does not start)."""
    return not _jvm_starts(java, options)


def forget(folder: Path, options: str) -> None:
    """Remove the archive `options` map (it stopped the JVM, or the JVM ignores it: a later run
    records one that fits) and stop recording."""
    reset()
    archive = _archive_in(options)
    if archive is not None and archive.parent == folder:
        archive.unlink(missing_ok=True)


def _archive_in(options: str) -> Path | None:
    """The archive driver options map, if they map one."""
    return next((Path(o[len(_MAP):]) for o in options.split() if o.startswith(_MAP)), None)


def check_mapped(folder: Path, options: str, pid: int) -> None:
    """After the driver JVM `pid` started with `options`: an archive it did not map (its classpath
    or JVM differ in a way the key does not see) is removed, so that a later run records one that
    fits instead of passing this one forever. Linux (/proc); elsewhere nothing is checked."""
    archive = _archive_in(options)
    if archive is None:
        return
    try:
        maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    if str(archive) not in maps:
        _log.debug("the driver JVM did not map %s: removed", archive)
        forget(folder, options)


def recording() -> bool:
    return _recording is not None


def save(spark: Any) -> Path | None:
    """Have the driver JVM write the classes it loaded (when this process records), then keep
    the archive under its final name. Never fails the command: a failure is logged, and noted
    so that runs do not record again for a day."""
    global _recording, _unfinished
    rec, _recording = _recording, None
    if rec is None:
        return None
    tmp = rec.folder / f"{_PREFIX}{rec.key}.{os.getpid()}.tmp"
    _unfinished = tmp  # until the dump returned: see discard_unfinished
    try:
        _dump(spark, tmp)
        _unfinished = None
        final = rec.folder / f"{_PREFIX}{rec.key}-{tmp.stat().st_size}{_SUFFIX}"
        os.replace(tmp, final)
    except Exception as exc:  # an archive is an optimisation: the run's own result stands
        signum = interrupts.received()
        if signum is not None:  # py4j turned eoctl's interrupt into an error of its own
            raise Interrupted(signum) from None
        _log.debug("the class archive was not written: %s", exc)
        try:
            (rec.folder / f"{_PREFIX}{rec.key}.failed").touch()
        except OSError:
            pass
        return None
    finally:  # also when a signal cut the dump short (what its JVM writes after: discard_unfinished)
        tmp.unlink(missing_ok=True)
    clean(rec.folder, keep=final)
    return final


def discard_unfinished() -> None:
    """After the driver JVM ended: remove what a dump cut short wrote (the JVM may have created
    the file after save() gave up on it). A run killed first leaves it to a later run's clean()."""
    global _unfinished
    path, _unfinished = _unfinished, None
    if path is not None:
        path.unlink(missing_ok=True)


def _dump(spark: Any, path: Path) -> None:
    """`VM.cds dynamic_dump PATH` through the platform MBean server. The JVM's own
    "Dynamic dump to file" line goes to System.out, which is eoctl's stdout: it is set aside
    (and stays aside when the dump did not finish: that JVM is about to end)."""
    gateway = spark.sparkContext._gateway
    jvm = gateway.jvm
    lang = jvm.java.lang

    def array(kind: Any, *values: Any) -> Any:
        out = gateway.new_array(kind, len(values))
        for i, value in enumerate(values):
            out[i] = value
        return out

    command = array(lang.String, "dynamic_dump", str(path))
    # MBeanServer's implementing class is in a package the JVM does not export: py4j cannot call
    # it directly, but can call the interface's method by reflection.
    invoke = lang.Class.forName("javax.management.MBeanServerConnection").getMethod("invoke", array(
        lang.Class, lang.Class.forName("javax.management.ObjectName"), lang.Class.forName("java.lang.String"),
        lang.Class.forName("[Ljava.lang.Object;"), lang.Class.forName("[Ljava.lang.String;")))
    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
    name = jvm.javax.management.ObjectName("com.sun.management:type=DiagnosticCommand")
    stdout = lang.System.out
    lang.System.setOut(jvm.java.io.PrintStream(jvm.java.io.ByteArrayOutputStream()))
    invoke.invoke(server, array(lang.Object, name, "vmCds", array(lang.Object, command),
                                array(lang.String, "[Ljava.lang.String;")))
    lang.System.setOut(stdout)
    if not path.is_file() or path.stat().st_size == 0:
        raise OSError(f"the JVM wrote no archive at {path}")


def _tmp_stale(path: Path, age_s: float) -> bool:
    """A temporary archive whose run is gone (the pid in its name), or older than any dump."""
    pid = path.name.rsplit(".", 2)[-2]
    return age_s > _TMP_STALE_S or (pid.isdigit() and not pid_alive(int(pid)))


def clean(folder: Path, keep: Path | None, now: float | None = None) -> list[Path]:
    """Remove older archives of `keep`'s key, archives unused for 30 days, temporary archives of
    runs that are gone and old failure notes. A JVM that maps a removed archive keeps its
    mapping. Never fails: what cannot be removed now is left for a later run."""
    now = time.time() if now is None else now
    try:
        kept_mtime = keep.stat().st_mtime if keep is not None else None
    except OSError:
        kept_mtime = None
    same_key = f"{_PREFIX}{keep.name[len(_PREFIX) : len(_PREFIX) + _KEY_CHARS]}-" if keep is not None else None
    removed = []
    for path in folder.glob(f"{_PREFIX}*"):
        if path == keep:
            continue
        try:
            age_s = now - path.stat().st_mtime
        except OSError:
            continue
        if path.suffix == ".tmp":
            stale = _tmp_stale(path, age_s)
        elif path.suffix == ".failed":
            stale = age_s > _FAILED_FOR_S
        elif path.suffix == _SUFFIX:
            stale = age_s > _UNUSED_FOR_S or (same_key is not None and kept_mtime is not None
                                              and path.name.startswith(same_key) and now - age_s <= kept_mtime)
        else:
            stale = False
        if stale:
            try:
                path.unlink()
            except OSError:
                continue
            removed.append(path)
    return removed
