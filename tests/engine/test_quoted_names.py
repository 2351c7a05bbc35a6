"""Configured names are values, never SQL: a blob prefix and a store table whose names hold a
quote (and a space) are read on both engines with the same findings as the sample's own names.

Before, on Spark, a DuckDB table name holding a quote broke out of the COPY of its snapshot (a
name could run a statement of its own), and a blob prefix holding one was an internal error.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from eoctl.config import load_config
from tests.helpers.audits import audit_duckdb, audit_spark
from tests.helpers.chaos import recorded_copy, settled

pytestmark = pytest.mark.integration

CODES = ["EO401", "EO402", "EO403", "EO501", "EO502", "EO503"]


def _counts(report) -> dict[tuple[str, str], int]:
    return {(f.code, f.endpoint): f.count for f in report.findings}


def test_names_holding_quotes_read_alike_on_both_engines(spark, tmp_path: Path) -> None:
    chaos = recorded_copy(tmp_path / "plain")
    expected = _counts(audit_duckdb(chaos.config, settled(), CODES))
    assert {code for code, _ in expected} >= {"EO401", "EO402", "EO501"}

    quoted = recorded_copy(tmp_path / "quoted")
    folder = quoted.config_path.parent
    (folder / "blobs" / "billing").rename(folder / "blobs" / "bill'ing data")
    table = "ship'ments; drop table x"
    with duckdb.connect(str(folder / "state.duckdb")) as con:
        con.execute(f'alter table shipping.shipments rename to "{table}"')
    text = quoted.config_path.read_text()
    text = text.replace('blobs = "blobs/billing"', '''blobs = "blobs/bill'ing data"''')
    text = text.replace('table = "shipments"', f'table = "{table}"')
    quoted.config_path.write_text(text)
    config = load_config(quoted.config_path)
    assert _counts(audit_duckdb(config, settled(), CODES)) == expected
    assert _counts(audit_spark(spark, config, settled(), CODES)) == expected
