"""eoctl.engine.run: the one place an engine is chosen, and what a run opened there gives a flow."""

from __future__ import annotations

import pytest

from eoctl.config.model import Config
from eoctl.engine.run import open_rows_run, open_run, open_trace_reader
from eoctl.expr.records import records_table
from tests.helpers.audits import on_engine
from tests.helpers.chaos import recorded_copy, settled


def _views(run) -> set[str]:
    rows = run.rows("SHOW TABLES")
    return {r.get("name") or r.get("tableName") for r in rows}


def _opened(config: Config, spark, **kw) -> tuple[set[str], int, set, list, set]:
    run = open_run(spark, config, settled(), lambda _m: None, **kw)
    try:
        return _views(run), run.record_count(), set(run.scope.tables), run.fresh_stats(), set(run.scope.sink_schemas)
    finally:
        run.release()


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_a_run_opens_the_records_stores_and_only_the_inputs_asked_for(tmp_path, engine, request) -> None:
    config = on_engine(recorded_copy(tmp_path).config, engine)
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    bare, count, tables, stats, sinks = _opened(config, spark)
    assert {"records", "tokens", "outbox", "intents"} <= bare
    assert not sinks  # the sinks' columns are read only when asked for
    if engine == "duckdb":  # (a Spark session keeps the views of the runs before: the fixture is shared)
        assert not {v for v in bare if v.startswith(("sink_", "blobs_"))} and "transactions" not in bare
    assert count == 83 and stats == []  # every input record of the recorded chaos sample; no index: no stats
    assert ("billing", "tokens") in tables and ("shop", "outbox") in tables
    full, again, _, _, sinks = _opened(config, spark, inputs=frozenset({"sinks", "blobs", "transactions"}))
    assert {"sink_0", "transactions"} <= full and any(v.startswith("blobs_") for v in full) and again == count
    assert sinks == {(n, s.name) for n, ep in config.endpoints.items() for s in ep.sinks}


@pytest.mark.integration
def test_the_engines_count_the_same_records_and_find_the_same_tables(tmp_path, spark) -> None:
    config = recorded_copy(tmp_path).config
    on_duckdb = _opened(on_engine(config, "duckdb"), None)
    on_spark = _opened(on_engine(config, "spark"), spark)
    assert on_duckdb[1:] == on_spark[1:]


@pytest.mark.integration
def test_a_begun_index_not_kept_is_removed_on_release(tmp_path) -> None:
    config = on_engine(recorded_copy(tmp_path).config, "duckdb")
    partial = tmp_path / "index" / "partial-run"
    run = open_run(None, config, settled(), lambda _m: None, index_path=str(partial))
    assert run.fresh_stats()  # it keeps an index: per-partition stats of what it read
    assert partial.exists()
    run.release()
    assert not partial.exists()


@pytest.mark.integration
def test_the_trace_reader_is_the_configured_engines_and_spark_starts_only_for_it(tmp_path) -> None:
    from eoctl.engine.duckdb.trace import DuckDBTraceReader

    config = on_engine(recorded_copy(tmp_path).config, "duckdb")
    started = []
    reader = open_trace_reader(lambda: started.append(1), config)
    try:
        assert isinstance(reader, DuckDBTraceReader) and not started
    finally:
        reader.close()


@pytest.mark.unit
def test_a_rows_run_evaluates_over_the_rows_it_was_given(tmp_path) -> None:
    import datetime as dt

    from eoctl.config import load_config
    from eoctl.expr import compile_sql
    from eoctl.expr.inputs import Scope
    from eoctl.options import AuditOptions
    from tests.helpers.chaos import CHAOS

    config = load_config(CHAOS / "eoctl.toml")
    schema = records_table().schema()
    row = {c: None for c in schema.names} | {"endpoint": "shop", "topic": "orders", "partition": 0, "offset": 7,
                                             "message_id": "m\x1b1", "timestamp": dt.datetime(2026, 1, 1)}
    run = open_rows_run(config, {"records": ([row, {**row, "offset": 8}], schema)}, Scope(config, AuditOptions()))
    try:
        t = records_table()
        count, rows, path = run.evaluate(compile_sql(t.filter(t.offset > 7).select("offset", "message_id"),
                                                     run.dialect), "stem")
        assert (count, rows, path) == (1, [{"offset": 8, "message_id": "m\x1b1"}], None)
    finally:
        run.release()
