"""Jars the tests need, fetched from Maven Central once into .cache/ (or EOCTL_JARS_DIR)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from eoctl.config.model import EngineConfig
from eoctl.engine.spark.jars import fetch_jars
from tests.helpers.servers import CACHE

KAFKA_POM = Path(__file__).resolve().parent / "kafka_broker" / "pom.xml"


def spark_jars_dir() -> Path:
    """The Kafka connector and JDBC drivers for Spark: EOCTL_JARS_DIR, else fetched into .cache."""
    if os.environ.get("EOCTL_JARS_DIR"):
        return Path(os.environ["EOCTL_JARS_DIR"])
    dest = CACHE / "jars" / "spark"
    if not any(dest.glob("spark-sql-kafka-*.jar")):
        fetch_jars(EngineConfig(), dest)
    return dest


def kafka_broker_jars_dir() -> Path:
    """A Kafka broker's jars (see kafka_broker/pom.xml), fetched into .cache once."""
    dest = CACHE / "jars" / "kafka-broker"
    if any(dest.glob("kafka_2.13-*.jar")):
        return dest
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("mvn is not on PATH; it fetches the Kafka broker's jars")
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [mvn, "-q", "-B", "-f", str(KAFKA_POM),
         "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
         f"-DoutputDirectory={dest}", "-DincludeScope=runtime"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"mvn failed fetching Kafka broker jars: {(proc.stdout + proc.stderr)[-800:]}")
    return dest
