from __future__ import annotations

from pathlib import Path

import pytest

from eoctl.config.model import EngineConfig
from eoctl.engine.jars import pom_xml, runtime_coordinates, spark_jar_settings
from eoctl.errors import EngineError, UsageError


def test_connector_matches_the_installed_pyspark() -> None:
    import pyspark

    coords = [str(c) for c in runtime_coordinates(EngineConfig())]
    assert f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}" in coords
    assert spark_jar_settings(EngineConfig()) == {"spark.jars.packages": ",".join(coords)}
    pinned = runtime_coordinates(EngineConfig(connector_version="4.0.0", packages=["g:a:1"]))
    assert str(pinned[0]).endswith(":4.0.0") and str(pinned[-1]) == "g:a:1"


def test_bad_extra_package_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="'g:a' is not a Maven coordinate"):
        runtime_coordinates(EngineConfig(packages=["g:a"]))


def test_jars_dir_replaces_maven_resolution(tmp_path: Path) -> None:
    (tmp_path / "b.jar").write_bytes(b"")
    (tmp_path / "a.jar").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a jar")
    assert spark_jar_settings(EngineConfig(jars_dir=str(tmp_path))) == {
        "spark.jars": f"{tmp_path / 'a.jar'},{tmp_path / 'b.jar'}"
    }
    with pytest.raises(EngineError, match="does not exist"):
        spark_jar_settings(EngineConfig(jars_dir=str(tmp_path / "missing")))
    (tmp_path / "a.jar").unlink()
    (tmp_path / "b.jar").unlink()
    with pytest.raises(EngineError, match="holds no .jar files"):
        spark_jar_settings(EngineConfig(jars_dir=str(tmp_path)))


def test_pom_lists_every_coordinate_and_excludes_what_spark_ships() -> None:
    xml = pom_xml(runtime_coordinates(EngineConfig()))
    for coord in runtime_coordinates(EngineConfig()):
        assert f"<artifactId>{coord.artifact}</artifactId><version>{coord.version}</version>" in xml
    assert "<groupId>org.apache.hadoop</groupId><artifactId>*</artifactId>" in xml
