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

_PREFIX = "spark-classes-"
_SUFFIX = ".jsa"
# the probe's own JVM: quiet, as the driver's is (eoctl.engine.session)
_QUIET = ("-Xlog:disable", "-Xlog:all=warning:stderr")
_RECORD = "-XX:+RecordDynamicDumpInfo"
_UNUSED_FOR_S = 30 * 86400  # an archive no run used for this long is removed (a Java or Spark since replaced)
_TMP_STALE_S = 3600  # a temporary archive this old belongs to a run that was killed
_SETTINGS_IN_KEY = ("spark.jars", "spark.jars.packages", "spark.jars.repositories", "spark.driver.extraClassPath")

_log = logs.get("class_archive")
_recording: Recording | None = None  # the archive this process's driver JVM records, if any


@dataclass(frozen=True)
class Recording:
    folder: Path
    key: str


def key_of(settings: dict[str, str], java: str, java_line: str) -> str:
    """What decides which classes the driver loads: the JVM, the Spark installation and the jars
    added to it. Not the run's own paths (its temporary folder), which differ every run."""
    import pyspark

    parts = [os.path.realpath(java), java_line, pyspark.__version__, os.path.dirname(pyspark.__file__)]
    parts += [f"{k}={settings.get(k, '')}" for k in _SETTINGS_IN_KEY]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


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


def _can_record(java: str) -> bool:
    """Whether this JVM can record (it needs its base CDS archive; a JVM without one, or told
    -Xshare:off, refuses to start with the flag). ~0.15 s, only in a run that has no archive."""
    try:
        return subprocess.run([java, _RECORD, *_QUIET, "-version"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def driver_options(settings: dict[str, str], folder: Path, java: str, java_line: str, *, record: bool) -> str:
    """The driver JVM options for the archive: map the one there is, else (when `record`: this
    process will call save()) record one. Empty when neither applies."""
    global _recording
    _recording = None
    key = key_of(settings, java, java_line)
    archive = find(folder, key)
    if archive is not None:
        return f"-XX:SharedArchiveFile={archive}"
    if record and _can_record(java):
        _recording = Recording(folder, key)
        return _RECORD
    return ""


def forget(folder: Path, options: str) -> None:
    """The driver did not start with `options`: remove the archive they map (it may be what
    stopped the JVM) and stop recording."""
    global _recording
    _recording = None
    for option in options.split():
        if option.startswith("-XX:SharedArchiveFile="):
            path = Path(option.split("=", 1)[1])
            if path.parent == folder:
                path.unlink(missing_ok=True)


def recording() -> bool:
    return _recording is not None


def save(spark: Any) -> Path | None:
    """Have the driver JVM write the classes it loaded (when this process records), then keep
    the archive under its final name. Never fails the command: a failure is logged."""
    global _recording
    rec, _recording = _recording, None
    if rec is None:
        return None
    tmp = rec.folder / f"{_PREFIX}{rec.key}.{os.getpid()}.tmp"
    try:
        _dump(spark, tmp)
        final = rec.folder / f"{_PREFIX}{rec.key}-{tmp.stat().st_size}{_SUFFIX}"
        os.replace(tmp, final)
    except Exception as exc:  # an archive is an optimisation: the run's own result stands
        signum = interrupts.received()
        if signum is not None:  # py4j turned eoctl's interrupt into an error of its own
            raise Interrupted(signum) from None
        _log.debug("the class archive was not written: %s", exc)
        return None
    finally:  # also when a signal cut the dump short: no half-written archive stays
        tmp.unlink(missing_ok=True)
    clean(rec.folder, keep=final)
    return final


def _dump(spark: Any, path: Path) -> None:
    """`VM.cds dynamic_dump PATH` through the platform MBean server. The JVM's own
    "Dynamic dump to file" line goes to System.out, which is eoctl's stdout: it is set aside."""
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
    try:
        invoke.invoke(server, array(lang.Object, name, "vmCds", array(lang.Object, command),
                                    array(lang.String, "[Ljava.lang.String;")))
    finally:
        lang.System.setOut(stdout)
    if not path.is_file() or path.stat().st_size == 0:
        raise OSError(f"the JVM wrote no archive at {path}")


def clean(folder: Path, keep: Path, now: float | None = None) -> list[Path]:
    """Remove older archives of `keep`'s key, archives unused for 30 days and temporary archives
    of killed runs. A JVM that maps a removed archive keeps its mapping."""
    now = time.time() if now is None else now
    key = keep.name[len(_PREFIX) : len(_PREFIX) + 16]
    removed = []
    for path in folder.glob(f"{_PREFIX}*"):
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        if path == keep:
            continue
        stale = (path.suffix == ".tmp" and now - mtime > _TMP_STALE_S) or (
            path.suffix == _SUFFIX and (now - mtime > _UNUSED_FOR_S or (
                path.name.startswith(f"{_PREFIX}{key}-") and mtime <= keep.stat().st_mtime)))
        if stale:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
