"""`eoctl audit --since-last` reports exactly what a full audit reports after any sequence of changes
(tests/helpers/appends.py: new messages, redeliveries across the boundary, regenerated tokens,
sequence gaps opened and closed, sink rows added, rewritten or deleted, tokens deleted, committed
offsets moved), each step compared with a full audit: every code, every evidence identity."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eoctl import incremental
from eoctl.audit import select_codes
from eoctl.config import load_config
from tests.helpers.appends import BILLING_SINK, Pipeline, steps
from tests.helpers.audits import audit_duckdb, audit_spark
from tests.helpers.chaos import recorded_copy, settled, state_names
from tests.helpers.findings import identities

CODES = select_codes(None, None)


def _pipeline(tmp: Path):
    chaos = recorded_copy(tmp)
    chaos.config_path.write_text(chaos.config_path.read_text() + BILLING_SINK)
    return Pipeline(chaos.config_path.parent, {}), load_config(chaos.config_path)


def _audit(engine: str, spark, config, **kw):
    options = settled()
    for k, v in kw.items():
        setattr(options, k, v)
    if engine == "spark":
        return audit_spark(spark, config, options, CODES)
    return audit_duckdb(config, options, CODES)


def _recorded(engine: str, spark, config, **kw):
    report = _audit(engine, spark, config, keep_index=True, **kw)
    incremental.record(spark if engine == "spark" else None, config, report)
    return report


def _walk(pipeline: Pipeline, config, spark, path: list[tuple[str, list]]) -> None:
    """A recorded full audit, then per step: the changes, a recorded `--since-last` audit on the
    step's engine, and a full audit on DuckDB, whose findings it must equal."""
    first = _recorded(path[0][0] if path else "duckdb", spark, config)
    assert first.run["scan"]["mode"] == "full"
    for i, (engine, ops) in enumerate(path):
        pipeline.apply(ops, f"step-{i}.parquet")
        incr = _recorded(engine, spark, config, since_last=True)
        full = _audit("duckdb", None, config)
        assert incr.run["scan"]["mode"] == "incremental", incr.run["scan"]
        assert incr.run["scan"]["continued"] == sorted(state_names(config))
        # DuckDB reads the index narrowly once the run it continues kept the carried records
        assert incr.run["scan"]["index_read"] == ("narrow" if engine == "duckdb" else "whole")
        assert incr.scanned == full.scanned
        assert identities(incr) == identities(full), (i, ops)


@pytest.mark.integration
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=st.lists(steps, min_size=1, max_size=4))
# found by Hypothesis: in the last step no archive file holds a record past the index (the hourly
# run after an hour without records), and DuckDB read the archive with no file at all
@example(path=[[("commit", 104, 0), ("new", 924, 1), ("new", 374, 0), ("sink_delete", 448, 3), ("new", 51, -2),
                ("sink_conflict", 717, 0)],
               [("new", 600, -3), ("commit", 713, -3), ("new", 46, 2), ("no_headers", 675, 2)],
               [("commit", 635, 2), ("sink_conflict", 526, 1)]])
def test_after_random_changes_an_incremental_audit_finds_what_a_full_audit_finds(path) -> None:
    """On DuckDB, each step continuing from the last."""
    with tempfile.TemporaryDirectory() as tmp:
        pipeline, config = _pipeline(Path(tmp))
        _walk(pipeline, config, None, [("duckdb", ops) for ops in path])


@pytest.mark.integration
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=st.lists(st.tuples(st.sampled_from(["spark", "duckdb"]), steps), min_size=2, max_size=3))
def test_on_spark_and_alternating_engines_the_states_continue_alike(spark, path) -> None:
    """The same on Spark, each step on an engine drawn: a run continues the states the other
    engine kept."""
    with tempfile.TemporaryDirectory() as tmp:
        pipeline, config = _pipeline(Path(tmp))
        _walk(pipeline, config, spark, [(engine, ops) for engine, ops in path])
