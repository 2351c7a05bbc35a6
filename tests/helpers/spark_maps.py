"""Run as a script (`python -m tests.helpers.spark_maps JARS_DIR`): start a Spark session with
eoctl's own factory and print, as JSON, which of eoctl's class archives the driver JVM maps and
which remain in the cache folder. A process of its own, as a process has one driver JVM."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(jars_dir: str) -> None:
    from pyspark import SparkContext

    from eoctl.config.model import EngineConfig
    from eoctl.engine import start_session, stop_session
    from eoctl.engine.session import cache_dir

    spark = start_session(EngineConfig(master="local[1]", jars_dir=jars_dir))
    pid = SparkContext._gateway.proc.pid  # spark-submit exec's the JVM: this is the driver
    maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8")
    mapped = sorted({line.split()[-1] for line in maps.splitlines() if "spark-classes-" in line})
    count = spark.range(3).count()
    stop_session(spark, end_jvm=True)
    print(json.dumps({"mapped": mapped, "count": count,
                      "archives": sorted(p.name for p in cache_dir().glob("spark-classes-*"))}))


if __name__ == "__main__":
    main(sys.argv[1])
