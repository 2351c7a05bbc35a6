"""The working copy (eoctl.expr.records), one expression: the same rows on DuckDB and on Spark."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from eoctl.expr import Dialect, compile_sql
from eoctl.expr.records import (
    HEADERS,
    RECORD_COLUMNS,
    commits_table,
    protocol_table,
    working_copy,
)

T = dt.datetime(2026, 11, 1, 12, 0)


def _protocol(**overrides) -> dict:
    row = {"endpoint": "e", "topic": "t", "partition": 0, "offset": 0, "timestamp": T,
           "message_id": b"m", "token_id": b"k", "producer": b"p", "sequence": b"7", "causation_id": None,
           "attempt_id": b"a", "blobs": None}
    return {**row, **overrides}


#: (protocol row, expected problem)
CASES = [
    (_protocol(offset=0), None),
    (_protocol(offset=1, token_id=None), "missing eo-message-id or eo-token-id header"),
    (_protocol(offset=2, producer=b"\xfe\xff"), "protocol header is not UTF-8"),
    (_protocol(offset=3, sequence=b"seven"), "eo-sequence is not an integer"),
    (_protocol(offset=4, blobs=b"not json"), "eo-blobs is not a JSON list of {uri, sha256}"),
    (_protocol(offset=5, blobs=b'[{"uri": "u", "sha256": "s"}]'), None),
    (_protocol(offset=6, partition=1, message_id=None, token_id=b"\xfe"), "missing eo-message-id or eo-token-id header"),
]
COMMITS = [("e", "t", 0, 3)]


def _tables() -> tuple[pa.Table, pa.Table]:
    schema = pa.schema([("endpoint", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                        ("offset", pa.int64()), ("timestamp", pa.timestamp("us")),
                        *[(h, pa.binary()) for h in HEADERS]])
    protocol = pa.Table.from_pylist([row for row, _ in CASES], schema=schema)
    commits = pa.Table.from_pylist([dict(zip(("c_endpoint", "c_topic", "c_partition", "committed"), c))
                                    for c in COMMITS], schema=pa.schema([
        ("c_endpoint", pa.string()), ("c_topic", pa.string()), ("c_partition", pa.int32()), ("committed", pa.int64())]))
    return protocol, commits


def _duckdb_rows() -> list[dict]:
    import duckdb

    protocol, commits = _tables()
    con = duckdb.connect()
    con.register("protocol", protocol)
    con.register("commits", commits)
    sql = compile_sql(working_copy(protocol_table(), commits_table(), Dialect.duckdb), Dialect.duckdb)
    return sorted(con.sql(sql).to_arrow_table().to_pylist(), key=lambda r: r["offset"])


@pytest.mark.unit
def test_problems_text_and_progress_on_duckdb() -> None:
    rows = _duckdb_rows()
    assert [r["problem"] for r in rows] == [want for _, want in CASES]
    assert list(rows[0]) == list(RECORD_COLUMNS)
    assert [r["processed"] for r in rows] == [True, True, True, False, False, False, False]
    assert rows[0]["seq"] == 7 and rows[3]["seq"] is None
    assert rows[2]["producer"] is None  # not UTF-8: no text, on every engine
    assert rows[6]["committed"] is None


@pytest.mark.integration
def test_spark_gives_the_same_rows(spark) -> None:
    protocol, commits = _tables()
    ddl = ("endpoint string, topic string, partition int, offset long, timestamp timestamp, "
           + ", ".join(f"{h} binary" for h in HEADERS))
    spark.createDataFrame(protocol.to_pylist(), ddl).createOrReplaceTempView("protocol")
    spark.createDataFrame(commits.to_pylist(), "c_endpoint string, c_topic string, c_partition int, committed long",
                          ).createOrReplaceTempView("commits")
    sql = compile_sql(working_copy(protocol_table(), commits_table(), Dialect.spark), Dialect.spark)
    got = sorted((r.asDict() for r in spark.sql(sql).collect()), key=lambda r: r["offset"])
    assert got == _duckdb_rows()
