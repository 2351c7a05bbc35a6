"""Run as a script (`python -m tests.helpers.spark_maps [JARS_DIR]`): start a Spark session with
eoctl's own factory (without JARS_DIR, the jars come from Maven through Ivy) and print, as JSON,
which of eoctl's class archives the driver JVM maps, which remain in the cache folder, and whether
the Kafka connector and the JDBC drivers load. A process of its own: one driver JVM a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


LOADED = ("org.apache.spark.sql.kafka010.KafkaSourceProvider", "org.postgresql.Driver", "org.duckdb.DuckDBDriver")


def main(jars_dir: str | None) -> None:
    from pyspark import SparkContext

    from eoctl.config.model import EngineConfig
    from eoctl.engine.spark import start_session, stop_session
    from eoctl.engine.spark.session import cache_dir

    spark = start_session(EngineConfig(master="local[1]", jars_dir=jars_dir, class_archive=jars_dir is not None))
    pid = SparkContext._gateway.proc.pid  # spark-submit exec's the JVM: this is the driver
    maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8")
    mapped = sorted({line.split()[-1] for line in maps.splitlines() if "spark-classes-" in line})
    count = spark.range(3).count()
    jvm = spark.sparkContext._jvm
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    loads = {}
    for name in LOADED:
        try:
            jvm.java.lang.Class.forName(name, False, loader)
            loads[name] = True
        except Exception:  # py4j's error for a ClassNotFoundException
            loads[name] = False
    stop_session(spark, end_jvm=True)
    print(json.dumps({"mapped": mapped, "count": count, "loads": loads,
                      "archives": sorted(p.name for p in cache_dir().glob("spark-classes-*"))}))


def run(jars_dir: Path | None, cache: Path) -> dict:
    """This script in a process of its own, with `cache` as XDG_CACHE_HOME: what it printed."""
    env = {k: v for k, v in os.environ.items() if k != "EOCTL_JARS_DIR"}
    proc = subprocess.run([sys.executable, "-m", "tests.helpers.spark_maps", *([str(jars_dir)] if jars_dir else [])],
                          capture_output=True, text=True, env={**env, "XDG_CACHE_HOME": str(cache)}, timeout=600,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
