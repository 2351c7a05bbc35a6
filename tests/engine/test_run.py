"""eoctl.engine.run: the one place an engine is chosen, and what a run opened there gives a flow."""

from __future__ import annotations

import pytest

from eoctl.config.model import Config
from eoctl.engine.run import in_order, open_rows_run, open_run, open_trace_reader
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


class _Threads:
    """What in_order asks of an engine: how many calls at once, and a cancel (which releases the
    calls that wait for it, as a cancelled Spark job ends the call waiting on it)."""

    def __init__(self, concurrency: int) -> None:
        import threading

        self.concurrency = concurrency
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()


def _pool_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("eoctl-engine")]


@pytest.mark.unit
def test_in_order_runs_up_to_the_engines_concurrency_at_once_and_answers_in_call_order() -> None:
    import threading
    import time

    engine = _Threads(3)
    together = threading.Barrier(3, timeout=10)  # broken (an error) unless three run at once
    lock, running, most, waited = threading.Lock(), [0], [0], []

    def call(i: int):
        def run() -> int:
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            if i < 3:
                together.wait()
            time.sleep(0.05 * (6 - i))  # the later calls finish first
            with lock:
                running[0] -= 1
            return i * 10
        return run

    def before(i: int) -> None:
        assert threading.current_thread() is threading.main_thread()
        waited.append(i)

    assert in_order(engine, [call(i) for i in range(6)], before) == [0, 10, 20, 30, 40, 50]
    assert most[0] == 3 and waited == list(range(6)) and not _pool_threads()


@pytest.mark.unit
def test_in_order_one_at_a_time_says_before_each_call_runs() -> None:
    said: list[str] = []
    calls = [lambda i=i: said.append(f"ran {i}") or i for i in range(3)]
    assert in_order(_Threads(1), calls, lambda i: said.append(f"before {i}")) == [0, 1, 2]
    assert said == ["before 0", "ran 0", "before 1", "ran 1", "before 2", "ran 2"]


@pytest.mark.unit
def test_a_failing_call_cancels_the_calls_not_started_and_the_engines_running_work() -> None:
    import time

    engine = _Threads(2)
    started: list[int] = []

    def failing() -> None:
        started.append(0)
        raise ValueError("the first check's query failed")

    def running() -> None:  # a long query: it ends when the engine cancels it
        started.append(1)
        assert engine.cancelled.wait(10), "in_order never cancelled the engine's running work"
        raise RuntimeError("job cancelled")

    def later(i: int):
        def run() -> None:
            started.append(i)
            time.sleep(0.2)  # long enough for the failure to reach in_order before the queue empties
        return run

    with pytest.raises(ValueError, match="first check"):
        in_order(engine, [failing, running, *[later(i) for i in range(2, 8)]])
    assert engine.cancelled.is_set()
    assert 1 in started and len(started) <= 4  # the calls still queued never ran
    assert not _pool_threads()  # every thread stopped before the error reached the caller
