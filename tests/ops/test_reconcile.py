"""reconcile-tokens classifies every endpoint in one pass: each endpoint's counts and evidence are
what a run of that endpoint alone gives, and each class's sample is its first rows in a stated
order (on Spark as on DuckDB), the whole class written as Parquet when it has more."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb
import pytest

from eoctl.ops.reconcile import run_reconcile
from tests.helpers.chaos import recorded_copy, settled
from tests.helpers.configs import on_engine

pytestmark = pytest.mark.integration

ENDPOINTS = ("shop", "billing", "shipping")


def _richer_chaos(tmp_path: Path):
    """The chaos sample with more in each class: three orphan tokens in billing's and shipping's
    stores (`destination` names the endpoint whose they are; their message ids in the other
    order), and billing's committed offsets moved back, so its last records are in flight again
    (their tokens are gone: in-flight records without a token)."""
    chaos = recorded_copy(tmp_path)
    folder = chaos.config_path.parent
    with duckdb.connect(str(folder / "state.duckdb")) as db:
        for schema in ("billing", "shipping"):
            db.execute(f"insert into {schema}.eo_tokens select 'orphan-' || i || '-{schema}', 'm-' || (9 - i), "
                       f"'{schema}', 'a', timestamptz '2026-01-01 00:00:00+00' from range(3) t(i)")
    (folder / "topics" / "orders" / "_committed_offsets.json").write_text(json.dumps({"orders": {"0": 15, "1": 20}}))
    return chaos


def _key(row: dict) -> tuple:
    return (row["token_id"],) if "class" in row else (row["topic"], row["partition"], row["offset"])


def test_one_pass_gives_each_endpoint_what_it_alone_gives_and_samples_in_order(tmp_path: Path) -> None:
    chaos = _richer_chaos(tmp_path)
    config = on_engine(chaos.config, "duckdb")
    now = settled().now
    together = run_reconcile(None, config, grace=dt.timedelta(0), now=now, evidence_rows=2,
                             evidence_dir=tmp_path / "evidence")
    alone = {n: run_reconcile(None, config, endpoints=[n], grace=dt.timedelta(0), now=now, evidence_rows=100_000)
             for n in ENDPOINTS}
    assert together.counts == {n: alone[n].counts[n] for n in ENDPOINTS}
    assert together.counts["billing"]["missing"] >= 3 and together.counts["shipping"]["garbage"] >= 3
    full = {(e.endpoint, e.cls): e.rows for n in ENDPOINTS for e in alone[n].evidence}
    assert [(e.endpoint, e.cls) for e in together.evidence] == [k for n in ENDPOINTS for k in full if k[0] == n]
    sampled_from_more = 0
    for e in together.evidence:
        rows = sorted(full[(e.endpoint, e.cls)], key=_key)
        assert e.count == len(rows)
        assert e.rows == rows[:2], (e.endpoint, e.cls)  # the first two in order, nothing else
        if e.count > 2:
            sampled_from_more += 1
            written = duckdb.sql(f"select * from read_parquet('{e.parquet}')").fetchall()
            assert len(written) == e.count, (e.endpoint, e.cls)
        else:
            assert e.parquet is None
    assert sampled_from_more >= 2


def test_spark_samples_what_duckdb_samples(spark, tmp_path: Path) -> None:
    chaos = _richer_chaos(tmp_path)
    args = {"grace": dt.timedelta(0), "now": settled().now, "evidence_rows": 2}
    on_spark = run_reconcile(spark, on_engine(chaos.config, "spark"), **args)
    on_duckdb = run_reconcile(None, on_engine(chaos.config, "duckdb"), **args)
    assert on_spark.counts == on_duckdb.counts
    assert [(e.endpoint, e.cls, e.count, e.rows) for e in on_spark.evidence] == [
        (e.endpoint, e.cls, e.count, e.rows) for e in on_duckdb.evidence]
