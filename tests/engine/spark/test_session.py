from __future__ import annotations

import pytest

from eoctl.config.model import EngineConfig
from eoctl.engine.spark.session import java_version, session_settings

pytestmark = pytest.mark.integration


def test_settings_are_utc_quiet_and_user_conf_wins() -> None:
    settings = session_settings(EngineConfig(conf={"spark.sql.session.timeZone": "UTC", "spark.app.name": "mine"}))
    assert settings["spark.sql.session.timeZone"] == "UTC" and settings["spark.app.name"] == "mine"
    assert "-Duser.timezone=UTC" in settings["spark.driver.extraJavaOptions"]
    # the JVM's notices (a class archive that does not match) never reach stdout, where the JSON is
    assert "-Xlog:disable -Xlog:all=warning:stderr" in settings["spark.driver.extraJavaOptions"]
    assert "log4j2.configurationFile" in settings["spark.driver.extraJavaOptions"]
    assert "log4j2.configurationFile" not in session_settings(EngineConfig(), debug=True)["spark.driver.extraJavaOptions"]


def test_java_is_17_or_newer() -> None:
    major, line = java_version()
    assert major >= 17, line


def test_session_is_utc_and_has_the_connector(spark, spark_jars) -> None:
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    jvm_zone = spark.sparkContext._jvm.java.util.TimeZone.getDefault().getID()
    assert jvm_zone == "UTC"
    assert any("spark-sql-kafka" in j for j in spark.conf.get("spark.jars").split(","))
    row = spark.sql("select timestamp'2026-11-01 12:00:00' as t, cast(timestamp'2026-11-01 12:00:00' as long) as e").first()
    assert row.e == 1793534400  # 2026-11-01T12:00:00Z
