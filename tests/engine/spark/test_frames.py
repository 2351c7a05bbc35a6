from __future__ import annotations

import datetime as dt

import pytest

from eoctl.engine.spark.frames import local_frame

pytestmark = pytest.mark.integration

_DDL = "topic string, partition int, committed long, at timestamp"


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_rows_keep_their_values_types_and_order(spark) -> None:
    at = dt.datetime(2026, 11, 21, 3, 0, 0)
    df = local_frame(spark, [("orders", 0, 41, at), ("orders", 1, None, None)], _DDL)
    assert df.schema.simpleString() == "struct<topic:string,partition:int,committed:bigint,at:timestamp>"
    assert [tuple(r) for r in df.collect()] == [("orders", 0, 41, at), ("orders", 1, None, None)]


def test_no_rows_still_has_the_schema(spark) -> None:
    df = local_frame(spark, [], _DDL)
    assert df.count() == 0 and df.columns == ["topic", "partition", "committed", "at"]


def test_many_rows_arrive_whole(spark) -> None:
    rows = [("t", p, p * 10, None) for p in range(1234)]
    df = local_frame(spark, rows, _DDL)
    assert df.count() == 1234
    assert df.agg({"committed": "sum"}).first()[0] == sum(r[2] for r in rows)


def test_stays_in_the_jvm(spark) -> None:
    # createDataFrame would plan a scan of a pickled RDD, read by forked Python workers.
    plan = _plan(local_frame(spark, [("t", 0, 1, None)], _DDL))
    assert "ExistingRDD" not in plan and "Generate" in plan
    assert "ExistingRDD" in _plan(spark.createDataFrame([("t", 0, 1, None)], _DDL))


def test_text_zones_and_every_kind_of_value_arrive_as_they_were(spark) -> None:
    """Text that JSON escapes, times with and without a zone (PySpark's own reading of each), the
    extremes of each integer type, booleans and doubles: equal to what createDataFrame makes."""
    ddl = "s string, i int, n long, b boolean, d double, t timestamp, `odd name` string"
    zone = dt.timezone(dt.timedelta(hours=-5))
    rows = [("quote ' \" back \\ é 😀 \n", -2**31, -2**63, True, -0.5, dt.datetime(1969, 12, 31, 23, 59, 59, 999_999),
             "x"),
            ("", 2**31 - 1, 2**63 - 1, False, 1e300, dt.datetime(2026, 11, 25, 12, 0, 0, 1, tzinfo=zone), None),
            (None, None, None, None, None, None, "")]
    assert [tuple(r) for r in local_frame(spark, rows, ddl).collect()] == [
        tuple(r) for r in spark.createDataFrame(rows, ddl).collect()]
    assert local_frame(spark, rows, ddl).schema == spark.createDataFrame(rows, ddl).schema


def test_a_type_json_cannot_carry_is_refused(spark) -> None:
    with pytest.raises(ValueError, match="x is binary"):
        local_frame(spark, [(b"1",)], "x binary")


def test_a_row_of_the_wrong_width_is_refused(spark) -> None:
    with pytest.raises(ValueError, match="4 fields"):
        local_frame(spark, [("t", 0)], _DDL)
