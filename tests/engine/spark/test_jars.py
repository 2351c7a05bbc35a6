from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eoctl.config.model import EngineConfig
from eoctl.engine.spark.jars import pom_xml, runtime_coordinates, spark_jar_settings
from eoctl.errors import EngineError, UsageError
from tests.helpers.cli import run_eoctl
from tests.helpers.servers import REPO


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


@pytest.mark.integration
def test_jars_fetch_into_a_relative_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`eoctl jars fetch DIR` with Maven: the connector, its token provider and the JDBC drivers."""
    from tests.helpers.cli import run_eoctl

    monkeypatch.chdir(tmp_path)
    result = run_eoctl("--format", "json", "jars", "fetch", "jars")
    assert result.code == 0, result.stderr
    names = {p.name for p in (tmp_path / "jars").glob("*.jar")}
    import pyspark

    for expected in (f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar",
                     f"spark-token-provider-kafka-0-10_2.13-{pyspark.__version__}.jar",
                     "postgresql-42.7.14.jar", "duckdb_jdbc-2.0.0.1.jar"):
        assert expected in names
    assert not any(n.startswith(("hadoop-", "scala-library", "slf4j")) for n in names)  # Spark ships those


PACKAGES = {"spark.jars.packages": "org.postgresql:postgresql:42.7.14"}


@pytest.mark.unit
def test_resolved_jars_are_remembered_while_their_files_are_there(tmp_path: Path) -> None:
    from eoctl.engine.spark.jars import remember_resolution, resolved_before

    jar = tmp_path / "ivy" / "org.postgresql_postgresql-42.7.14.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"jar")
    cache = tmp_path / "cache"
    cache.mkdir()
    assert resolved_before(PACKAGES, cache) is None
    remember_resolution(PACKAGES, cache, jar.as_uri())
    assert resolved_before(PACKAGES, cache) == jar.as_uri()
    assert [p.suffix for p in cache.iterdir()] == [".json"]  # nothing temporary left
    # another resolution (a repository more, another package) does not take this one's jars
    assert resolved_before({**PACKAGES, "spark.jars.repositories": "https://repo.example/m2"}, cache) is None
    assert resolved_before({"spark.jars.packages": "org.duckdb:duckdb_jdbc:2.0.0.1"}, cache) is None
    jar.unlink()  # Ivy's cache was cleared: resolve again
    assert resolved_before(PACKAGES, cache) is None


@pytest.mark.unit
@pytest.mark.parametrize("version", ["1.0-SNAPSHOT", "[1.0,2.0)", "latest.release", "1.+"])
def test_versions_ivy_resolves_anew_are_never_remembered(tmp_path: Path, version: str) -> None:
    from eoctl.engine.spark.jars import remember_resolution, resolved_before

    jar = tmp_path / "a.jar"
    jar.write_bytes(b"jar")
    moving = {"spark.jars.packages": f"g:a:{version}"}
    remember_resolution(moving, tmp_path, jar.as_uri())
    assert resolved_before(moving, tmp_path) is None and not list(tmp_path.glob("*.json"))


@pytest.mark.unit
def test_a_broken_record_means_resolving_again(tmp_path: Path) -> None:
    from eoctl.engine.spark.jars import remember_resolution, resolved_before

    jar = tmp_path / "a.jar"
    jar.write_bytes(b"jar")
    remember_resolution(PACKAGES, tmp_path, jar.as_uri())
    [record] = tmp_path.glob("*.json")
    for broken in ("{", '{"jars": 3}', "[]", '{"jars": ""}'):
        record.write_text(broken, encoding="utf-8")
        assert resolved_before(PACKAGES, tmp_path) is None, broken


@pytest.mark.integration
def test_a_second_start_loads_the_jars_ivy_resolved_without_resolving(tmp_path: Path) -> None:
    """Maven Central through Ivy, as README's first command: the second start skips the
    resolution, and the connector and drivers still load."""
    from tests.helpers.spark_maps import LOADED, run

    cache = tmp_path / "cache"
    log = cache / "eoctl" / "spark-driver.log"
    first = run(None, cache)
    assert first["loads"] == dict.fromkeys(LOADED, True)
    assert log.read_text(encoding="utf-8").count(":: resolving dependencies") == 1
    [record] = (cache / "eoctl").glob("spark-jars-*.json")
    assert "postgresql" in json.loads(record.read_text(encoding="utf-8"))["jars"]

    second = run(None, cache)
    assert second["loads"] == dict.fromkeys(LOADED, True)
    assert log.read_text(encoding="utf-8").count(":: resolving dependencies") == 1  # not again


@pytest.mark.integration
def test_readme_first_command_resolves_the_jars_from_maven_central() -> None:
    """README's first command, word for word: no jars folder, so Spark resolves the connector and
    drivers of the installed pyspark itself; the chaos sample's report is readable text. In this
    file with the other test that resolves through Ivy: pytest's workers run a file's tests in one
    process, so two resolutions never write one Ivy cache at once."""
    result = run_eoctl("--config", str(REPO / "samples" / "chaos" / "eoctl.toml"), "audit", unset=("EOCTL_JARS_DIR",))
    assert result.code == 1, result.stderr[-2000:]  # the sample has findings at error and above
    assert "findings by code" in result.stderr and ": 83 records; endpoints shop, billing, shipping" in result.stderr
    counts = {m[0]: int(m[1]) for m in re.findall(r"^│ (EO\d{3}) │ \w+ +│ +(\d+) │", result.stderr, re.M)}
    # what the JSON report gives on DuckDB (tests/cli/test_audit_cmd.py), EO401 too: the sample's
    # [audit] grace = "0s" makes its orphan blob one however recent the checkout's file times
    assert counts == {"EO101": 3, "EO102": 1, "EO103": 1, "EO201": 1, "EO301": 4, "EO302": 1, "EO401": 1,
                      "EO402": 1, "EO403": 1, "EO501": 2, "EO502": 1}
    assert ":: resolving dependencies" not in result.stderr  # Ivy's chatter went to the driver log
    assert result.stdout == ""
