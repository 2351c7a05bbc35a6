"""Topic checks written once (eoctl.expr.topics): DuckDB finds what the Spark audit finds."""

from __future__ import annotations

import json

import pytest

from eoctl.config import load_config
from eoctl.engine.duckdb import build_working_copy, connect, rows_by_endpoint
from eoctl.expr import Dialect, compile_sql
from eoctl.expr.records import records_table
from eoctl.expr.topics import CHECKS
from tests.helpers.chaos import CHAOS, settled

pytestmark = pytest.mark.integration


def _canonical(rows: list[dict]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def _both(spark, config) -> tuple[dict, dict]:
    """(code, endpoint) -> (count, every evidence row) from the Spark audit and from DuckDB."""
    from eoctl.audit import run_audit

    options = settled()
    options.evidence_rows = 100_000
    report = run_audit(spark, config, options, sorted(CHECKS))
    by_spark = {(f.code, f.endpoint): (f.count, _canonical(f.evidence)) for f in report.findings}
    con = connect()
    build_working_copy(con, config)
    by_duckdb = {}
    for code, check in CHECKS.items():
        for endpoint, rows in rows_by_endpoint(con, compile_sql(check(records_table()), Dialect.duckdb)).items():
            by_duckdb[(code, endpoint)] = (len(rows), _canonical(rows))
    return by_spark, by_duckdb


def test_duckdb_finds_what_spark_finds_on_the_chaos_sample(spark) -> None:
    by_spark, by_duckdb = _both(spark, load_config(CHAOS / "eoctl.toml"))
    assert by_duckdb == by_spark
    assert {code for code, _ in by_spark} >= {"EO101", "EO102", "EO103"}


def test_duckdb_finds_what_spark_finds_and_the_ground_truth_on_a_generated_state(spark, tmp_path) -> None:
    from samples.generator import DEFAULT_MIX, GenSpec, generate

    mix = {code: rate * 5 for code, rate in DEFAULT_MIX.items()}
    truth = generate(GenSpec(8_000, tmp_path / "state", partitions=4, mix=mix))
    by_spark, by_duckdb = _both(spark, load_config(tmp_path / "state" / "eoctl.toml"))
    assert by_duckdb == by_spark
    for code in CHECKS:
        assert sum(n for (c, _), (n, _rows) in by_duckdb.items() if c == code) == truth["codes"][code]["count"], code
