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


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_disagreement_is_one_line_exit_6_on_both_engines_and_doctor_fails_it(case: str, tmp_path: Path,
                                                                              spark_jars: Path) -> None:
    chaos = recorded_copy(tmp_path)
    extra, expected = CASES[case]
    text = chaos.config_path.read_text()
    text = text + extra if extra else text.replace('key_columns = ["order_id"]', 'key_columns = ["order_no"]')
    chaos.config_path.write_text(text)
    lines = set()
    env = {"EOCTL_JARS_DIR": str(spark_jars)}
    for engine in ("duckdb", "spark"):
        result = run_eoctl("--config", str(chaos.config_path), "--engine", engine, "audit", "--no-record", env=env)
        assert result.code == ExitCode.MISCONFIGURED, result.stderr[-2000:]
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith("eoctl: error: ") and expected in line and "Traceback" not in result.stderr, line
        lines.add(line)
    assert len(lines) == 1
    doctor = run_eoctl("--config", str(chaos.config_path), "--engine", "duckdb", "--format", "json", "doctor")
    assert doctor.code == 1
    import json

    failed = [r for r in json.loads(doctor.stdout)["checks"] if r["status"] == "fail"]
    assert [r["detail"] for r in failed] == [lines.pop().removeprefix("eoctl: error: ")]
