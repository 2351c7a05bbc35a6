"""Tables through Spark: PostgreSQL (partitioned JDBC), DuckDB files, file datasets."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from eoctl.config.model import Config, DuckDBStore, PostgresStore, TableSource
from eoctl.errors import SourceError
from eoctl.engine.spark.stores import read_store_table, read_table

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def pg_store(postgres) -> PostgresStore:
    import psycopg

    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        conn.execute(
            "create table eo_tokens (id bigint primary key, token_id text not null, message_id text not null,"
            " created_at timestamptz not null, meta jsonb)"
        )
        conn.execute(
            "insert into eo_tokens select i, 'tok-' || i, 'msg-' || (i %% 700), %s + i * interval '1 second',"
            " jsonb_build_object('i', i) from generate_series(1, 2000) i",
            (T0,),
        )
    return PostgresStore(type="postgres", host="127.0.0.1", port=postgres.port, database=postgres.database,
                         user=postgres.user, password=postgres.password)


def test_postgres_partitioned_read(spark, pg_store) -> None:
    df = read_store_table(spark, pg_store, "eo_tokens", partition_column="id", num_partitions=4)
    assert df.rdd.getNumPartitions() == 4
    stats = df.selectExpr("count(*) n", "sum(id) s", "count(distinct message_id) m", "min(created_at) t").first()
    assert (stats.n, stats.s, stats.m) == (2000, 2000 * 2001 // 2, 700)
    assert stats.t == T0.replace(tzinfo=None) + dt.timedelta(seconds=1)  # UTC session: naive UTC
    # every partition holds rows: the bounds came from the table, not from defaults
    sizes = df.rdd.glom().map(len).collect()
    assert len(sizes) == 4 and all(s > 0 for s in sizes) and sum(sizes) == 2000


def test_postgres_unpartitioned_and_missing_table(spark, pg_store) -> None:
    assert read_store_table(spark, pg_store, "eo_tokens").count() == 2000
    with pytest.raises(SourceError, match="table no_such_table in PostgreSQL eoctl@127.0.0.1:"):
        read_store_table(spark, pg_store, "no_such_table").schema


def test_postgres_wrong_password_never_shows_the_password(spark, pg_store) -> None:
    bad = pg_store.model_copy(update={"password": type(pg_store.password)("wrong-secret-value")})
    with pytest.raises(SourceError) as err:
        read_store_table(spark, bad, "eo_tokens").schema
    assert "wrong-secret-value" not in err.value.one_line()
    assert "password authentication failed" in err.value.one_line()


def test_postgres_copy_for_the_duckdb_engine_reads_as_spark_reads(spark, pg_store) -> None:
    """The DuckDB engine's Parquet copy (ADBC) holds what Spark's JDBC read holds: jsonb as text,
    times in UTC; a wrong password is one line without it; a missing table says so."""
    import pyarrow.parquet as pq

    from eoctl.stores.snapshots import postgres_snapshot

    copied = pq.read_table(postgres_snapshot(pg_store, "eo_tokens")).to_pylist()
    read = [r.asDict() for r in read_store_table(spark, pg_store, "eo_tokens").collect()]
    for row in copied:  # Arrow gives the UTC instant; Spark the naive UTC wall time
        row["created_at"] = row["created_at"].astimezone(dt.timezone.utc).replace(tzinfo=None)
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(copied, key=key) == sorted(read, key=key) and len(copied) == 2000
    bad = pg_store.model_copy(update={"password": type(pg_store.password)("wrong-secret-value")})
    with pytest.raises(SourceError) as err:
        postgres_snapshot(bad, "eo_tokens")
    assert "wrong-secret-value" not in err.value.one_line() and "password authentication failed" in err.value.one_line()
    with pytest.raises(SourceError, match="table no_such_table does not exist in PostgreSQL eoctl@127.0.0.1:"):
        postgres_snapshot(pg_store, "no_such_table")


@pytest.fixture()
def duckdb_store(tmp_path: Path) -> DuckDBStore:
    import duckdb

    path = tmp_path / "state.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute("set TimeZone = 'Europe/Warsaw'")  # the writer's zone must not leak into the read
        db.execute(
            "create table eo_outbox as select i::bigint as n, 'm' || i as incoming_message_id,"
            " timestamptz '2026-11-01 12:00:00+00' + i * interval 1 minute as created_at,"
            " uuid() as attempt, json_object('i', i) as outgoing, [i, i + 1] as tags from range(100) t(i)"
        )
    return DuckDBStore(type="duckdb", path=str(path))


def test_duckdb_table_read(spark, duckdb_store) -> None:
    # Spark reads a Parquet snapshot; partitioning options are for JDBC and are ignored here.
    df = read_store_table(spark, duckdb_store, "eo_outbox", partition_column="n", num_partitions=3)
    assert all(".parquet" in f for f in df.inputFiles())
    assert dict(df.dtypes)["created_at"] == "timestamp"
    row = df.where("n = 5").first()
    assert row.incoming_message_id == "m5"
    assert row.created_at == dt.datetime(2026, 11, 1, 12, 5)
    assert row.outgoing == '{"i":5}' and row.tags == "[5, 6]" and len(row.attempt) == 36
    assert df.count() == 100


def test_duckdb_snapshot_is_reused_until_the_file_changes(spark, duckdb_store) -> None:
    import duckdb

    first = read_store_table(spark, duckdb_store, "eo_outbox").inputFiles()
    assert read_store_table(spark, duckdb_store, "eo_outbox").inputFiles() == first
    with duckdb.connect(str(duckdb_store.path)) as conn:
        conn.execute("delete from eo_outbox where n >= 50")
    again = read_store_table(spark, duckdb_store, "eo_outbox")
    assert again.inputFiles() != first and again.count() == 50


def test_duckdb_missing_table(spark, duckdb_store) -> None:
    with pytest.raises(SourceError, match="table nope does not exist in DuckDB file"):
        read_store_table(spark, duckdb_store, "nope")


@pytest.mark.parametrize("fmt", ["parquet", "orc", "json", "csv"])
def test_file_datasets(spark, tmp_path: Path, fmt: str) -> None:
    path = str(tmp_path / f"sink-{fmt}")
    src = spark.createDataFrame([(i, f"m{i}", i * 1.5) for i in range(50)], "order_id int, source_message_id string, amount double")
    writer = src.write.format(fmt)
    (writer.option("header", "true") if fmt == "csv" else writer).save(path)
    df = read_table(spark, Config(), TableSource(format=fmt, path=path))
    assert set(df.columns) == {"order_id", "source_message_id", "amount"}
    assert df.count() == 50
    assert df.where("source_message_id = 'm7'").first().amount == 10.5


def test_store_table_source_uses_the_named_store(spark, pg_store) -> None:
    config = Config(stores={"pg": pg_store})
    df = read_table(spark, config, TableSource(store="pg", table="eo_tokens", partition_column="id", num_partitions=2))
    assert df.rdd.getNumPartitions() == 2 and df.count() == 2000
