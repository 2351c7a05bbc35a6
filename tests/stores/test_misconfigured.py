"""Where the configuration and the data disagree, every command says so in one style: one line
naming what was found and the key to set, exit 6 (MISCONFIGURED), the same on both engines, and
doctor fails that row with the same sentence.

Before: a wrong token column mapping was a raw DuckDB `Binder Error` (exit 3), a wrong sink column
exit 3 with the key, a wrong sent_column exit 6, a time column of a number type exit 3 on DuckDB and
numbers read as times on Spark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eoctl.errors import ExitCode
from tests.helpers.chaos import recorded_copy
from tests.helpers.cli import run_eoctl

pytestmark = pytest.mark.integration

CASES = {
    "token column": ('\n[endpoints.billing.tokens]\ncolumns = { token_id = "tok_id" }\n',
                     "has no column 'tok_id', which endpoints.billing.tokens.columns.token_id names (its columns: "
                     "token_id, message_id, destination, attempt_id, created_at)"),
    "outbox column": ('\n[endpoints.shop.outbox]\ncolumns = { updated_at = "UpdatedAt" }\n',
                      "has no column 'UpdatedAt', which endpoints.shop.outbox.columns.updated_at names"),
    # before: exit 3 "the outbox tables cannot be read" on DuckDB; on Spark the numbers read as times
    "time column of a number type": ('\n[endpoints.shop.outbox]\ncolumns = { updated_at = "version" }\n',
                                     "has column 'version' of type bigint, which endpoints.shop.outbox.columns."
                                     "updated_at names as a time (a timestamp, datetime or date column, or text "
                                     "holding ISO times)"),
    "sink column": (None, "sink shipments has no column 'order_no', which endpoints.shipping.sinks[0].key_columns "
                          "names (its columns: "),
}


def _refusal(chaos, engine: str, expected: str, env: dict[str, str]) -> str:
    """The one error line of an audit on `engine`, exit 6, holding `expected`."""
    result = run_eoctl("--config", str(chaos.config_path), "--engine", engine, "audit", "--no-record", env=env)
    assert result.code == ExitCode.MISCONFIGURED, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("eoctl: error: ") and expected in line and "Traceback" not in result.stderr, line
    return line


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_disagreement_is_one_line_exit_6_on_both_engines_and_doctor_fails_it(case: str, tmp_path: Path,
                                                                              spark_jars: Path) -> None:
    chaos = recorded_copy(tmp_path)
    extra, expected = CASES[case]
    text = chaos.config_path.read_text()
    text = text + extra if extra else text.replace('key_columns = ["order_id"]', 'key_columns = ["order_no"]')
    chaos.config_path.write_text(text)
    env = {"EOCTL_JARS_DIR": str(spark_jars)}
    lines = {_refusal(chaos, engine, expected, env) for engine in ("duckdb", "spark")}
    assert len(lines) == 1
    doctor = run_eoctl("--config", str(chaos.config_path), "--engine", "duckdb", "--format", "json", "doctor")
    assert doctor.code == 1
    import json

    failed = [r for r in json.loads(doctor.stdout)["checks"] if r["status"] == "fail"]
    assert [r["detail"] for r in failed] == [lines.pop().removeprefix("eoctl: error: ")]


def _text_times(chaos, spoiled: str | None) -> None:
    """billing's outbox with `updated_text`: each row's updated_at as ISO text, one row's `spoiled`
    instead (None: every value a time), mapped as the outbox's updated_at."""
    import duckdb

    with duckdb.connect(chaos.store_target) as con:
        con.execute("alter table billing.eo_outbox add column updated_text varchar")
        con.execute("update billing.eo_outbox set updated_text = strftime(updated_at at time zone 'UTC', "
                    "'%Y-%m-%dT%H:%M:%S.%fZ')")
        if spoiled is not None:
            con.execute("update billing.eo_outbox set updated_text = ? where incoming_message_id = "
                        "(select min(incoming_message_id) from billing.eo_outbox)", [spoiled])
    chaos.config_path.write_text(chaos.config_path.read_text().replace(
        "[endpoints.billing.input]", '[endpoints.billing.outbox]\ncolumns = { updated_at = "updated_text" }\n\n'
                                     "[endpoints.billing.input]"))


def test_a_text_time_column_holding_no_time_is_one_line_exit_6_on_both_engines_and_doctor_fails_it(
        tmp_path: Path, spark_jars: Path) -> None:
    """A text column mapped as a time, one of whose values is no time: named with the value and the
    key, exit 6 on both engines, doctor's row the same (before: exit 3, DuckDB's Conversion Error on
    one engine and Spark's CAST_INVALID_INPUT on the other)."""
    import json

    chaos = recorded_copy(tmp_path)
    _text_times(chaos, "next tuesday \x1b[31m")
    expected = ("has column 'updated_text' holding 'next tuesday \\x1b[31m', which is not a time, but "
                "endpoints.billing.outbox.columns.updated_at names it as a time")
    env = {"EOCTL_JARS_DIR": str(spark_jars)}
    lines = {_refusal(chaos, engine, expected, env) for engine in ("duckdb", "spark")}
    assert len(lines) == 1
    for engine in ("duckdb", "spark"):
        doctor = run_eoctl("--config", str(chaos.config_path), "--engine", engine, "--format", "json", "doctor",
                           env=env)
        assert doctor.code == 1, doctor.stderr[-2000:]
        failed = [r for r in json.loads(doctor.stdout)["checks"] if r["status"] == "fail"]
        assert [r["detail"] for r in failed] == [next(iter(lines)).removeprefix("eoctl: error: ")], engine


def test_a_text_time_column_holding_iso_times_is_read_as_times_on_both_engines(tmp_path: Path,
                                                                               spark_jars: Path) -> None:
    """The same mapping with every value an ISO time: no refusal, the findings of the typed column."""
    chaos = recorded_copy(tmp_path)
    env = {"EOCTL_JARS_DIR": str(spark_jars)}
    before = run_eoctl("--config", str(chaos.config_path), "--engine", "duckdb", "--format", "json", "audit",
                       "--no-record", env=env)
    _text_times(chaos, None)
    import json

    def found(stdout: str) -> list[tuple]:
        return sorted((f["code"], f["endpoint"], f["count"]) for f in json.loads(stdout)["findings"])

    for engine in ("duckdb", "spark"):
        result = run_eoctl("--config", str(chaos.config_path), "--engine", engine, "--format", "json", "audit",
                           "--no-record", env=env)
        assert result.code == before.code == 1, result.stderr[-2000:]
        assert found(result.stdout) == found(before.stdout), engine
