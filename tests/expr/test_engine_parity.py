"""Every check and plan written once (eoctl.expr): the DuckDB engine's audit finds what the Spark
engine's finds, to the evidence row, and what the generated state's ground truth says; reconcile
classifies every token alike."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from eoctl.audit import select_codes
from tests.helpers.audits import audit_duckdb, audit_spark
from eoctl.config import load_config
from tests.helpers.chaos import CHAOS, recorded_copy, settled
from tests.helpers.configs import on_engine
from tests.helpers.findings import canonical as _findings
from tests.helpers.layouts import drop_intents, shared_tables

pytestmark = pytest.mark.integration


def _both(spark, config) -> tuple[dict, dict]:
    options = settled()
    options.evidence_rows = 100_000
    codes = select_codes(None, None)
    return _findings(audit_spark(spark, config, options, codes)), _findings(audit_duckdb(config, options, codes))


def _classes(report) -> tuple[dict, list]:
    """(counts per endpoint and class, every evidence row as sorted JSON per endpoint and class)."""
    return report.counts, sorted((e.endpoint, e.cls, e.count, sorted(json.dumps(r, sort_keys=True) for r in e.rows))
                                 for e in report.evidence)


def _both_planned(spark, config_path) -> tuple[dict, dict]:
    """gc-tokens' and gc-blobs' plans (tallies, every planned row) on each engine."""
    import dataclasses

    from eoctl.ops import gc_blobs, gc_tokens
    from eoctl.ops.gc_flow import GcOptions

    options = GcOptions(grace=dt.timedelta(0), now=settled().now, evidence_rows=100_000)
    out: tuple[dict, dict] = ({}, {})
    for side, (session, config) in enumerate([(spark, load_config(config_path)),
                                              (None, load_config(config_path, overrides={"kind": "duckdb"}))]):
        for plan in (gc_tokens.gc_tokens, gc_blobs.gc_blobs):
            result = plan(session, config, options)
            out[side][result.command] = ([dataclasses.astuple(t) for t in result.tallies],
                                         sorted(json.dumps(r, sort_keys=True) for r in result.sample))
    return out


def _both_reconciled(spark, config) -> tuple[tuple, tuple]:
    from eoctl.ops.reconcile import run_reconcile

    args = {"grace": dt.timedelta(hours=1), "now": settled().now, "evidence_rows": 100_000}
    return _classes(run_reconcile(spark, config, **args)), _classes(run_reconcile(None, on_engine(config, "duckdb"),
                                                                                  **args))


def test_duckdb_finds_what_spark_finds_on_the_chaos_sample(spark) -> None:
    config = load_config(CHAOS / "eoctl.toml")
    by_spark, by_duckdb = _both(spark, config)
    assert by_duckdb == by_spark
    # the sample's faults reach every area the DuckDB engine reads
    assert {code[:3] for code, _, _ in by_spark} >= {"EO1", "EO2", "EO3", "EO4", "EO5"}
    on_spark, on_duckdb = _both_reconciled(spark, config)
    assert on_duckdb == on_spark
    assert on_spark[0]["shipping"]["garbage"] == 1 and on_spark[0]["billing"]["referenced"] == 2
    planned_spark, planned_duckdb = _both_planned(spark, CHAOS / "eoctl.toml")
    assert planned_duckdb == planned_spark
    assert all(rows for _tallies, rows in planned_spark.values())  # a token and a blob to collect


@pytest.mark.parametrize("layout", ["postgres-shared", "duckdb-without-intents"])
def test_duckdb_finds_what_spark_finds_in_other_store_layouts(spark, request, tmp_path, layout: str) -> None:
    """PostgreSQL tables (read through ADBC) shared by every endpoint, and a store without intents."""
    chaos = recorded_copy(tmp_path)
    if layout == "postgres-shared":
        chaos = shared_tables(chaos, "postgres", request.getfixturevalue("postgres"))
    else:
        chaos = drop_intents(chaos)
    by_spark, by_duckdb = _both(spark, load_config(chaos.config_path, environ=chaos.environ))
    assert by_duckdb == by_spark
    assert {code for code, _, _ in by_spark} >= {"EO102", "EO201", "EO301", "EO502"}


def test_duckdb_finds_what_spark_finds_and_the_ground_truth_on_a_generated_state(spark, tmp_path) -> None:
    from samples.generator import DEFAULT_MIX, GenSpec, generate

    mix = {code: rate * 5 for code, rate in DEFAULT_MIX.items()}
    truth = generate(GenSpec(8_000, tmp_path / "state", partitions=4, mix=mix))
    config = load_config(tmp_path / "state" / "eoctl.toml")
    by_spark, by_duckdb = _both(spark, config)
    assert by_duckdb == by_spark
    # the first rows a report shows, in order, and the next command filled from the first: the same
    options = settled()
    options.evidence_rows = 3
    codes = select_codes(None, None)

    def shown(report) -> list:
        return sorted((f.code, f.endpoint, f.where, json.dumps(f.evidence, sort_keys=True, default=str),
                       (f.remedy() or {}).get("command")) for f in report.findings)

    first_spark, first_duckdb = shown(audit_spark(spark, config, options, codes)), shown(audit_duckdb(config, options, codes))
    assert first_duckdb == first_spark
    assert any(code == "EO202" and len(json.loads(rows)) == 3 for code, _, _, rows, _ in first_spark)
    for code, expected in truth["codes"].items():
        assert sum(n for (c, _, _), (n, _rows) in by_duckdb.items() if c == code) == expected["count"], code
    on_spark, on_duckdb = _both_reconciled(spark, config)
    assert on_duckdb == on_spark
    # every class but young (the generator's tokens are all old) appears
    assert all(on_spark[0]["billing"][c] for c in ("live", "referenced", "leaked", "garbage", "missing"))
    planned_spark, planned_duckdb = _both_planned(spark, tmp_path / "state" / "eoctl.toml")
    assert planned_duckdb == planned_spark
    assert len(planned_spark["gc-tokens"][1]) == truth["codes"]["EO201"]["count"]
