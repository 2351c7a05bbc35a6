"""No output of eoctl shows a secret: the chaos sample with two dozen real secret-bearing settings
added, audited with --debug and garbage-collected, then every output read back: `config check`
(text, JSON), stdout and stderr, the report and its evidence files, the findings history, the run
log and journals, the metrics file, the Spark driver log, Spark's event log and the class archive
the audit's driver JVM wrote (eoctl.engine.spark.class_archive)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eoctl.secrets import NAME_REGEX, VALUE_REGEX, is_secret_name, mask_text, spark_redaction
from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl
from tests.helpers.secret_settings import SETTINGS, Setting, write_with_secrets

pytestmark = pytest.mark.integration


def _tables_as_text(path: Path) -> str:
    """Every row of every table of a DuckDB file."""
    import duckdb

    lines = []
    with duckdb.connect(str(path), read_only=True) as con:
        for schema, table in con.execute("select table_schema, table_name from information_schema.tables").fetchall():
            rows = con.execute(f'select * from "{schema}"."{table}"').fetchall()
            lines.append(f"{schema}.{table}: {rows!r}")
    return "\n".join(lines)


def _parquet_as_text(folder: Path) -> str:
    import duckdb

    with duckdb.connect() as con:
        return "\n".join(repr(con.execute("select * from read_parquet(?)", [str(p / "*.parquet")]).fetchall())
                         for p in sorted(folder.iterdir()))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory, spark_jars: Path) -> dict[str, str]:
    """What each output holds after one audit and one gc run (two Spark sessions in all)."""
    tmp = tmp_path_factory.mktemp("secrets")
    chaos = recorded_copy(tmp)
    events = tmp / "events"
    events.mkdir()
    write_with_secrets(chaos.config_path, {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
                                           "spark.eventLog.compress": "false"})
    env = {"XDG_CACHE_HOME": str(tmp / "cache"), "EOCTL_JARS_DIR": str(spark_jars)}
    cfg = ("--config", str(chaos.config_path), "--master", "local[2]")
    out: dict[str, str] = {}

    text = run_eoctl(*cfg, "config", "check", env=env)
    as_json = run_eoctl(*cfg, "--format", "json", "config", "check", env=env)
    assert text.code == 0 and as_json.code == 0, text.stderr + as_json.stderr
    out["config check (text)"], out["config check (json)"] = text.stderr + text.stdout, as_json.stdout + as_json.stderr

    report = tmp / "report.json"
    audit = run_eoctl(*cfg, "--debug", "--format", "json", "audit", "--grace", "0s", "--evidence-rows", "1",
                      "--output", str(report), env=env)
    assert audit.code == 1, audit.stderr  # the sample's findings
    out["audit --debug (stdout and stderr)"] = audit.stdout + audit.stderr
    out["audit report (JSON)"] = report.read_text(encoding="utf-8")
    out["audit evidence files"] = _parquet_as_text(tmp / "report-evidence")
    out["findings history"] = _tables_as_text(chaos.config_path.parent / "eoctl-history.duckdb")

    metrics = tmp / "gc-tokens.prom"
    gc = run_eoctl(*cfg, "--format", "json", "gc-tokens", "--execute", "--grace", "0s", "--metrics-file", str(metrics),
                   env=env)
    assert gc.code == 0, gc.stderr
    out["gc-tokens (stdout and stderr)"] = gc.stdout + gc.stderr
    out["metrics file"] = metrics.read_text(encoding="utf-8")
    out["run log and journals"] = _tables_as_text(chaos.config_path.parent / "state.duckdb")
    out["Spark driver log"] = (tmp / "cache" / "eoctl" / "spark-driver.log").read_text(encoding="utf-8")
    # the first run of the cache folder (the audit) recorded it, the gc mapped it
    out["Spark class archive"] = "".join(p.read_bytes().decode("latin-1")
                                         for p in sorted((tmp / "cache" / "eoctl").glob("spark-classes-*.jsa")))
    out["Spark event logs"] = "\n".join(p.read_text(encoding="utf-8", errors="replace")
                                        for p in sorted(events.rglob("*")) if p.is_file())
    return out


def test_every_output_was_read(outputs: dict[str, str]) -> None:
    """The outputs hold what they are for: a secret shown in them would have been seen."""
    conf = json.loads(outputs["config check (json)"])["resolved"]["engine"]["conf"]
    assert conf["spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net"] == "********"
    assert '"code": "EO102"' in outputs["audit report (JSON)"] and "EO102" in outputs["findings history"]
    stores = outputs["run log and journals"]
    assert "eoctl_journal_eo_tokens" in stores and "gc-tokens" in stores
    assert 'eoctl_gc_tokens_deleted{endpoint="shipping"} 1' in outputs["metrics file"]
    assert outputs["audit evidence files"] and "Traceback" not in outputs["audit --debug (stdout and stderr)"]
    # Spark's event log lists every setting: the secret ones by name, their values redacted
    assert "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net" in outputs["Spark event logs"]
    assert "org/apache/spark/sql/SparkSession" in outputs["Spark class archive"]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.id)
def test_no_output_shows_the_secret(outputs: dict[str, str], setting: Setting) -> None:
    shown = [where for where, text in outputs.items() if setting.secret in text]
    assert shown == [], f"{setting.id} is shown in {shown}"


def test_spark_reads_the_rule_as_python_does(spark) -> None:
    """Spark applies NAME_REGEX and VALUE_REGEX with Java's regular expressions: the same answers."""
    pattern = spark.sparkContext._jvm.java.util.regex.Pattern
    names, values = pattern.compile(NAME_REGEX), pattern.compile(VALUE_REGEX)
    for s in SETTINGS:
        assert names.matcher(s.name).find() == is_secret_name(s.name), s.name
        assert bool(values.matcher(s.value).find()) == (mask_text(s.value) != s.value), s.value
        if s.by_value:
            assert s.secret not in values.matcher(s.value).replaceAll("*")
    for harmless in ("token_id", "tokens", "key_columns", "ssl.key.location", "key.deserializer"):
        assert not names.matcher(harmless).find()
    # what a Spark Connect session gets are session settings: a session may set them
    for key, value in spark_redaction(remote=True).items():
        spark.conf.set(key, value)
        assert spark.conf.get(key) == value
        spark.conf.unset(key)
