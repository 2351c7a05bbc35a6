"""The JVM jars eoctl's Spark jobs need beyond pyspark: the Kafka connector and JDBC drivers.

Online, Spark resolves them from Maven Central (`spark.jars.packages`), matching the installed
pyspark version. Offline, they come from a local folder (`engine.jars_dir` / `EOCTL_JARS_DIR`),
which `eoctl jars fetch DIR` fills on a machine that has Maven access. Once Ivy has resolved the
packages, the files it resolved them to are remembered in eoctl's cache folder and given as
`spark.jars` while they are all there: later runs skip the resolution.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from eoctl.config.model import EngineConfig
from eoctl.errors import EngineError, UsageError
from eoctl.scratch import run_dir

SCALA_BINARY = "2.13"  # every Spark 4 build is Scala 2.13

# Already in pyspark's own jars/: copying them again would put two versions on the classpath.
_PROVIDED_BY_SPARK = (
    ("org.apache.hadoop", "*"),
    ("org.slf4j", "*"),
    ("org.xerial.snappy", "snappy-java"),
    ("org.lz4", "lz4-java"),
    ("at.yawk.lz4", "lz4-java"),
    ("com.github.luben", "zstd-jni"),
    ("com.google.code.findbugs", "jsr305"),
    ("org.scala-lang", "*"),
    ("org.apache.spark", f"spark-tags_{SCALA_BINARY}"),
)

# Spark's parent POM lists an extra repository besides Maven Central; where it is unreachable,
# Maven fails instead of falling back. Blocking every repository but central keeps it on central.
_CENTRAL_ONLY_SETTINGS = (
    "<settings><mirrors><mirror><id>central-only</id><mirrorOf>*,!central</mirrorOf>"
    "<url>blocked://non-central</url><blocked>true</blocked></mirror></mirrors></settings>"
)


@dataclass(frozen=True)
class Coordinate:
    group: str
    artifact: str
    version: str

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


def installed_spark_version() -> str:
    from pyspark.version import __version__

    return __version__


def runtime_coordinates(engine: EngineConfig) -> list[Coordinate]:
    """The Maven coordinates of the Kafka connector and the JDBC drivers for this engine."""
    spark = engine.connector_version or installed_spark_version()
    coords = [
        Coordinate("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_BINARY}", spark),
        Coordinate("org.postgresql", "postgresql", engine.postgres_jdbc_version),
        Coordinate("com.mysql", "mysql-connector-j", engine.mysql_jdbc_version),
        Coordinate("org.duckdb", "duckdb_jdbc", engine.duckdb_jdbc_version),
    ]
    for extra in engine.packages:
        parts = extra.split(":")
        if len(parts) != 3 or not all(parts):
            raise UsageError(f"engine.packages: {extra!r} is not a Maven coordinate group:artifact:version")
        coords.append(Coordinate(*parts))
    return coords


def jars_in(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise EngineError(
            f"jars folder {folder} does not exist",
            hint="fill it with 'eoctl jars fetch DIR' on a machine with Maven access, or unset engine.jars_dir",
        )
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise EngineError(f"jars folder {folder} holds no .jar files", hint="fill it with 'eoctl jars fetch DIR'")
    return jars


def spark_jar_settings(engine: EngineConfig) -> dict[str, str]:
    """Spark settings that put the connector and drivers on the driver's and executors' classpath."""
    if engine.jars_dir:
        return {"spark.jars": ",".join(str(j) for j in jars_in(Path(engine.jars_dir)))}
    return {"spark.jars.packages": ",".join(str(c) for c in runtime_coordinates(engine))}


# What decides the jars Ivy resolves `spark.jars.packages` to; and versions it resolves anew each
# time (snapshots, ranges, latest.*), whose jars are never remembered.
_RESOLUTION_SETTINGS = ("spark.jars.packages", "spark.jars.repositories", "spark.jars.ivy",
                        "spark.jars.ivySettings", "spark.jars.excludes", "spark.jars")
_MOVING_VERSION = re.compile(r"SNAPSHOT|latest\.|[\[\]()+]")


def _resolution_file(settings: dict[str, str], folder: Path) -> Path | None:
    packages = settings.get("spark.jars.packages")
    if not packages or _MOVING_VERSION.search(packages):
        return None
    key = "\n".join(f"{k}={settings.get(k, '')}" for k in _RESOLUTION_SETTINGS)
    return folder / f"spark-jars-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def resolved_before(settings: dict[str, str], folder: Path) -> str | None:
    """The `spark.jars` Ivy resolved these settings' packages to last time, when every one of its
    files is still there: given instead of the packages, Spark skips Ivy's resolution (0.5-2.5 s
    of every start). None when there is no such record or a file is gone."""
    path = _resolution_file(settings, folder)
    if path is None:
        return None
    try:
        jars = json.loads(path.read_text(encoding="utf-8"))["jars"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(jars, str) or not jars:
        return None
    if not all(Path(urlparse(uri).path).is_file() for uri in jars.split(",")):
        return None
    return jars


def remember_resolution(settings: dict[str, str], folder: Path, jars: str) -> None:
    """Keep the `spark.jars` Ivy resolved `settings`' packages to (written whole, then renamed)."""
    path = _resolution_file(settings, folder)
    if path is None or not jars:
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"packages": settings["spark.jars.packages"], "jars": jars}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def pom_xml(coords: list[Coordinate]) -> str:
    """A throwaway POM whose runtime dependencies are exactly the jars Spark needs added."""
    exclusions = "".join(
        f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>" for g, a in _PROVIDED_BY_SPARK
    )
    deps = "".join(
        f"<dependency><groupId>{c.group}</groupId><artifactId>{c.artifact}</artifactId>"
        f"<version>{c.version}</version><exclusions>{exclusions}</exclusions></dependency>"
        for c in coords
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local.eoctl</groupId><artifactId>eoctl-spark-jars</artifactId><version>0</version>"
        f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>"
    )


# Maven 3.8's default dependency plugin predates copy-dependencies' current options.
_COPY_GOAL = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"


def fetch_jars(engine: EngineConfig, dest: Path) -> list[Path]:
    """Copy the runtime jars and their dependencies into `dest` with Maven."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise UsageError("mvn is not on PATH", hint="install Maven, or copy a jars folder from a machine that has it")
    dest = dest.resolve()  # Maven resolves a relative outputDirectory against the POM's folder
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jars-", dir=run_dir()) as tmp:  # under eoctl.scratch's root
        pom = Path(tmp) / "pom.xml"
        pom.write_text(pom_xml(runtime_coordinates(engine)), encoding="utf-8")
        settings = Path(tmp) / "settings.xml"
        settings.write_text(_CENTRAL_ONLY_SETTINGS, encoding="utf-8")
        proc = subprocess.run(
            [mvn, "-B", "-s", str(settings), "-f", str(pom), _COPY_GOAL, f"-DoutputDirectory={dest}", "-DincludeScope=runtime"],
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0:
        errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("[ERROR]")]
        reason = errors[0][len("[ERROR] ") :] if errors else f"mvn exited {proc.returncode}"
        raise EngineError(f"mvn could not fetch the jars into {dest}: {reason[:400]}")
    return jars_in(dest)
