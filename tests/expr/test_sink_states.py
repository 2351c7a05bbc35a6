"""eoctl.expr.sink_states: a sink's watermark kept as an integer alike on both engines (a run may
alternate them), and states named after the sink's configuration."""

from __future__ import annotations

import pytest

from eoctl.config.model import SinkConfig
from eoctl.expr import sink_states

#: one watermark of each kind a mark keeps, as DuckDB and Spark SQL write it, and the integer both must give
_WATERMARKS = {
    "wall_time": ("TIMESTAMP '2026-01-01 00:00:00.000001'", "TIMESTAMP_NTZ '2026-01-01 00:00:00.000001'",
                  "timestamp", 1_767_225_600_000_001),
    "instant": ("TIMESTAMPTZ '2026-01-01 01:00:00.000002+01:00'", "TIMESTAMP '2026-01-01 01:00:00.000002+01:00'",
                "timestamp('UTC')", 1_767_225_600_000_002),
    "day": ("DATE '2026-01-02'", "DATE '2026-01-02'", "date", 1_767_312_000_000_000),
    "id": ("CAST(9007199254740993 AS BIGINT)", "CAST(9007199254740993 AS BIGINT)", "int64", 9_007_199_254_740_993),
    "numeric_id": ("CAST(12345 AS DECIMAL(18, 0))", "CAST(12345 AS DECIMAL(18, 0))", "decimal(18, 0)", 12_345),
}


def _ordinals(run_sql, dialect, which: int) -> dict[str, int]:
    import ibis

    from eoctl.expr.functions import compile_sql

    out = {}
    for name, (*literals, kind, _expected) in _WATERMARKS.items():
        t = ibis.table({"w": kind}, name="watermarks")
        sql = compile_sql(t.select(o=sink_states.ordinal(t.w, dialect)), dialect)
        out[name] = run_sql(f"SELECT {literals[which]} AS w", sql)
    return out


@pytest.mark.integration
def test_a_watermark_is_the_same_integer_on_both_engines(spark) -> None:
    import duckdb

    from eoctl.expr.functions import Dialect

    def on_duckdb(source: str, sql: str) -> int:
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"CREATE VIEW watermarks AS {source}")
        return con.execute(sql).fetchone()[0]

    def on_spark(source: str, sql: str) -> int:
        spark.sql(source).createOrReplaceTempView("watermarks")
        return spark.sql(sql).collect()[0][0]

    expected = {name: w[-1] for name, w in _WATERMARKS.items()}
    assert _ordinals(on_duckdb, Dialect.duckdb, 0) == expected
    assert _ordinals(on_spark, Dialect.spark, 1) == expected


#: a value one step below each watermark of _WATERMARKS, as DuckDB and Spark SQL write it
_BELOW = {
    "wall_time": ("TIMESTAMP '2026-01-01 00:00:00'", "TIMESTAMP_NTZ '2026-01-01 00:00:00'"),
    "instant": ("TIMESTAMPTZ '2026-01-01 01:00:00.000001+01:00'", "TIMESTAMP '2026-01-01 01:00:00.000001+01:00'"),
    "day": ("DATE '2026-01-01'", "DATE '2026-01-01'"),
    "id": ("CAST(9007199254740992 AS BIGINT)", "CAST(9007199254740992 AS BIGINT)"),
    "numeric_id": ("CAST(12344 AS DECIMAL(18, 0))", "CAST(12344 AS DECIMAL(18, 0))"),
}


def _new_rows(run_sql, dialect, which: int) -> dict[str, tuple[list[int | None], list[int | None]]]:
    """Per kind of watermark, over the rows (the watermark, one step below, NULL): the ordinals of
    the rows at_or_above keeps for a mark at the watermark's ordinal, and for one above it."""
    import ibis

    from eoctl.expr.functions import compile_sql

    out = {}
    for name, (*literals, kind, expected) in _WATERMARKS.items():
        source = " UNION ALL ".join(f"SELECT {v} AS w" for v in (literals[which], _BELOW[name][which], "NULL"))
        t = ibis.table({"w": kind}, name="watermarks")
        kept = [sorted((run_sql(source, compile_sql(
            sink_states.at_or_above(t, "w", mark, dialect).select(o=sink_states.ordinal(t.w, dialect)), dialect))),
            key=lambda o: (o is not None, o)) for mark in (expected, expected + 1)]
        out[name] = tuple(kept)
    return out


@pytest.mark.integration
def test_new_rows_are_those_at_or_above_the_mark_on_both_engines(spark) -> None:
    """The literal that lets Parquet skip old row groups never drops a row the mark keeps: a
    watermark equal to the mark is new, one step below is not, NULL always is."""
    import duckdb

    from eoctl.expr.functions import Dialect

    def on_duckdb(source: str, sql: str) -> list[int | None]:
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"CREATE VIEW watermarks AS {source}")
        return [r[0] for r in con.execute(sql).fetchall()]

    def on_spark(source: str, sql: str) -> list[int | None]:
        spark.sql(source).createOrReplaceTempView("watermarks")
        return [r[0] for r in spark.sql(sql).collect()]

    expected = {name: ([None, w[-1]], [None]) for name, w in _WATERMARKS.items()}
    assert _new_rows(on_duckdb, Dialect.duckdb, 0) == expected
    assert _new_rows(on_spark, Dialect.spark, 1) == expected


@pytest.mark.unit
def test_only_integers_and_times_are_kept_as_marks() -> None:
    import ibis.expr.datatypes as dt

    kept = [dt.int32, dt.int64, dt.timestamp, dt.Timestamp(timezone="UTC"), dt.date, dt.Decimal(18, 0)]
    refused = [dt.string, dt.float64, dt.Decimal(18, 2), dt.Decimal(38, 0), dt.boolean]
    assert all(sink_states.ordered(k) for k in kept)
    assert not any(sink_states.ordered(k) for k in refused)


@pytest.mark.unit
def test_the_states_are_named_after_what_the_sink_is() -> None:
    sink = SinkConfig(name="invoices", store="billing", table="invoices", message_id_column="source_message_id",
                      key_columns=["invoice_id"], watermark_column="applied_at")
    names = sink_states.state_names("billing", sink)
    assert len(names) == 3 and all(n.startswith("sink_") for n in names)
    # whether it must hold every message changes what a check reads of it, not what its rows are
    assert sink_states.state_names("billing", sink.model_copy(update={"every_message": True})) == names
    for change in ({"table": "invoices_v2"}, {"key_columns": ["order_id"]}, {"watermark_column": "written_at"},
                   {"message_id_column": "message_id"}, {"value_columns": ["amount"]}):
        assert sink_states.state_names("billing", sink.model_copy(update=change))[0] != names[0], change
    assert sink_states.state_names("shipping", sink)[0] != names[0]
    # without key columns there is no EO502 state
    assert len(sink_states.state_names("billing", sink.model_copy(update={"key_columns": []}))) == 2


def _marks(run_sql, tmp_path) -> dict[int | None, int | None]:
    """The mark kept over a sink whose rows' watermarks are 2, 5 and NULL, continuing from each
    kept mark (None: no mark kept)."""
    import ibis

    from eoctl.config import load_config
    from eoctl.expr.functions import compile_sql
    from eoctl.expr.inputs import Scope
    from eoctl.options import AuditOptions
    from tests.helpers.configs import write_config

    config = load_config(write_config(tmp_path, """
        [endpoints.billing]
        [[endpoints.billing.sinks]]
        name = "invoices"
        format = "parquet"
        path = "sinks/invoices"
        message_id_column = "source_message_id"
        watermark_column = "applied_at"
    """))
    sink = config.endpoints["billing"].sinks[0]
    scope = Scope(config, AuditOptions(), sink_schemas={
        ("billing", "invoices"): ibis.schema({"source_message_id": "string", "applied_at": "int64"})})
    source = ("SELECT * FROM (VALUES ('a', CAST(2 AS BIGINT)), ('b', CAST(5 AS BIGINT)), ('c', CAST(NULL AS BIGINT))) "
              "AS v(source_message_id, applied_at)")
    return {kept: run_sql(scope.sink_view("billing", sink), source, compile_sql(
        sink_states.mark(scope, "billing", sink, run_sql.dialect, kept), run_sql.dialect))
        for kept in (None, 1, 5, 9)}


@pytest.mark.integration
def test_a_mark_is_the_highest_watermark_the_sink_has_held_on_both_engines(spark, tmp_path) -> None:
    """The rows' highest, or the kept mark's when it is higher (rows deleted since never lower
    it): read from the new rows only, alike on both engines."""
    import duckdb

    from eoctl.expr.functions import Dialect

    def on_duckdb(view: str, source: str, sql: str) -> int | None:
        con = duckdb.connect()
        con.execute(f"CREATE VIEW {view} AS {source}")
        return con.execute(sql).fetchone()[0]

    def on_spark(view: str, source: str, sql: str) -> int | None:
        spark.sql(source).createOrReplaceTempView(view)
        return spark.sql(sql).collect()[0][0]

    on_duckdb.dialect, on_spark.dialect = Dialect.duckdb, Dialect.spark
    expected = {None: 5, 1: 5, 5: 5, 9: 9}
    assert _marks(on_duckdb, tmp_path) == expected
    assert _marks(on_spark, tmp_path) == expected
