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
