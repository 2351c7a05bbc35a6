"""eoctl.engine.spark.run: the settings a Spark run plans its queries with, and the session after."""

from __future__ import annotations

import pytest

from eoctl.engine.run import open_run
from tests.helpers.audits import on_engine
from tests.helpers.chaos import recorded_copy, settled

PLAN_TEXT = "spark.sql.maxPlanStringLength"


def _during_and_after(config, spark) -> tuple[str, str]:
    run = open_run(spark, config, settled(), lambda _m: None)
    try:
        during = spark.conf.get(PLAN_TEXT)
    finally:
        run.release()
    return during, spark.conf.get(PLAN_TEXT)


@pytest.mark.integration
def test_a_run_bounds_plan_text_and_gives_the_session_back_as_it_was(tmp_path, spark) -> None:
    config = on_engine(recorded_copy(tmp_path).config, "spark")
    before = spark.conf.get(PLAN_TEXT)
    during, after = _during_and_after(config, spark)
    assert during == "2000" != before and after == before


@pytest.mark.integration
def test_the_users_engine_conf_wins_over_the_runs_planning_settings(tmp_path, spark) -> None:
    config = on_engine(recorded_copy(tmp_path).config, "spark")
    config = config.model_copy(update={"engine": config.engine.model_copy(update={"conf": {PLAN_TEXT: "50000"}})})
    spark.conf.set(PLAN_TEXT, "50000")  # as the session the user configured was started
    try:
        assert _during_and_after(config, spark) == ("50000", "50000")
    finally:
        spark.conf.unset(PLAN_TEXT)


def _persistent_rdds(spark) -> int:
    return spark.sparkContext._jsc.getPersistentRDDs().size()


@pytest.mark.integration
def test_a_kept_table_is_a_plan_of_its_own_with_its_size_and_is_freed_on_release(tmp_path, spark) -> None:
    config = on_engine(recorded_copy(tmp_path).config, "spark")
    before = _persistent_rdds(spark)
    run = open_run(spark, config, settled(), lambda _m: None)
    try:
        opened = _persistent_rdds(spark)  # what the run keeps as it opens (the pending entries' messages)
        run.keep("kept_ids", "SELECT DISTINCT message_id FROM records")
        run.keep("kept_twice", "SELECT k.message_id FROM kept_ids k JOIN records r USING (message_id)")
        assert _persistent_rdds(spark) == opened + 2  # the checkpoints; the caches they were read from are gone
        df = spark.sql("SELECT * FROM kept_twice")
        plan = df._jdf.queryExecution().optimizedPlan()
        # a leaf: no plan of the tables it was computed from (kept_ids, records) to walk again
        assert plan.collectLeaves().size() == 1 and "records" not in plan.toString().lower().replace("logicalrdd", "")
        assert 0 < plan.stats().sizeInBytes() < 100_000  # its size as computed, not Spark's guess for an RDD
        rows = {r[0] for r in df.collect()}
        assert rows == {r["message_id"] for r in run.rows("SELECT message_id FROM records WHERE message_id IS NOT NULL")}
        assert len(rows) > 10
        run.keep("kept_ids", "SELECT message_id FROM kept_ids LIMIT 3")  # kept again: the old one freed
        assert _persistent_rdds(spark) == opened + 2 and len(run.rows("SELECT * FROM kept_ids")) == 3
    finally:
        run.release()
    assert _persistent_rdds(spark) == before



@pytest.mark.integration
def test_a_failing_call_stops_the_spark_query_another_thread_runs(tmp_path, spark) -> None:
    """in_order over a Spark run, as the audit runs its evidence queries: when one call fails, the
    query another thread waits on (minutes of work, several jobs) is cancelled, its call ends, and
    the session runs the next query as before."""
    import time

    from eoctl.engine.run import in_order

    run = open_run(spark, on_engine(recorded_copy(tmp_path).config, "spark"), settled(), lambda _m: None)
    long_query = ("SELECT count(*) AS n FROM range(1000000) a CROSS JOIN range(1000000) b "
                  "WHERE a.id * b.id % 7 = 3")  # 10^12 pairs of rows: minutes on two cores

    def failing() -> None:
        time.sleep(3)  # the long query's jobs are running by now
        raise ValueError("a check's query failed")

    try:
        started = time.monotonic()
        with pytest.raises(ValueError, match="check's query"):
            in_order(run, [failing, lambda: run.rows(long_query)])
        assert time.monotonic() - started < 40
        assert not spark.sparkContext.statusTracker().getActiveJobsIds()
        assert run.rows("SELECT 1 AS one") == [{"one": 1}]
    finally:
        run.release()
